"""Inside a worker: where a timed call's outputs lie, so that the parent can read them from
outside the process (bot.engine.timing.outside_checks), and the outputs held across batches, as a
caller that keeps its results holds them.

An honest kernel's outputs are fresh memory: while the harness still holds an earlier call's
outputs, no later output can lie in that memory. The parent knows which calls are held (the
last `hold_calls` timed calls, a number it chooses) and where their outputs lay, so an output
ring or a shared output buffer is seen aliased however many batches it spans, up to the calls
held. What the harness says here is the candidate's word; the parent reads the bytes at the
named places itself and binds them to the digests committed inside the window.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch


def span(t: torch.Tensor) -> list[int]:
    """[address of the first element, bytes from it to the end of the last one]."""
    if t.numel() == 0:
        return [t.data_ptr(), 0]
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return [t.data_ptr(), (last + 1) * t.element_size()]


def where(outputs: list[torch.Tensor]) -> tuple[list[list[int]], list[list[int]]]:
    """One call's outputs: their spans and their strides (in elements)."""
    return [span(o) for o in outputs], [list(o.stride()) for o in outputs]


class Held:
    """The outputs of the latest timed calls, kept alive across batches."""

    def __init__(self) -> None:
        self.calls: deque[list[Any]] = deque()

    def keep(self, batch: list[list[Any]], last: int) -> None:
        """Add a batch's outputs, in call order; hold the last `last` calls' only."""
        self.calls.extend(batch)
        while len(self.calls) > max(last, 0):
            self.calls.popleft()
