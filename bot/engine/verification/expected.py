"""The reference's outputs each trial's contender calls are compared with: held in the bot's
process, asked of the reference again trial by trial, or kept in the reference and compared
there, in blocks it lends each call (bot.harness.judge)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.core.domain import CheckResult
from bot.core.tolerance import Rule, rule_to_wire
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.protocol.channel import close_fds
from bot.protocol.messages import Judge, Lend, Run

# A hold on the device, taken around the reference's work (bot.engine.verification.trials.DeviceHolds).
Hold = Callable[[], contextlib.AbstractContextManager[Any]]

# The reference's outputs of every trial of a shape are held in the bot's process while they
# take no more than this; larger ones (KernelBench's 19_ReLU: 12 GiB of float64 a trial, eight
# trials) are asked for again, once a trial, and only one trial's are held at a time: held all at
# once they ran a 128 GiB host out of memory, and the run was killed with every problem in it.
REFERENCE_HOLD_BYTES = 4 << 30


@dataclass(frozen=True)
class Lent:
    """Blocks the reference lent for one contender call: their token, sizes and descriptors
    (the bot's copies, closed once sent)."""

    token: str
    sizes: list[int]
    fds: list[int]


class ExpectedOutputs:
    """The reference's outputs of each trial, for the contenders' to be compared with: those of
    the sizing trials where all fit REFERENCE_HOLD_BYTES, else each trial's asked for again when
    the contenders reach it (the reference answers a seed alike every time: a problem that does
    not fails at its first trial, bot.harness.checked). Where the reference kept them
    (`lent`), it keeps each trial's in turn, lends each contender's call blocks to write its
    outputs into, and judges them there: `of` is None, and `lend` and `judge` serve each call."""

    def __init__(
        self,
        reference: WorkerClient,
        timeout_s: float,
        plan: list[tuple[str, int]],
        refs: list[Any],
        hold: Hold,
        note: Callable[[str], None],
    ) -> None:
        self.reference, self.timeout_s, self.plan, self.hold, self.note = reference, timeout_s, plan, hold, note
        self.lent = any(r.kept for r in refs)
        self.tried = False  # whether the reference has lent blocks yet
        self.lock = threading.Lock()  # contenders' calls run on several threads; the reference is one
        size = sum(t.numel() * t.element_size() for r in refs for t in r.outputs or [])
        self.held: list[list[Any] | None] = (
            [list(r.outputs) for r in refs] if not self.lent and size <= REFERENCE_HOLD_BYTES else [None] * len(refs)
        )

    def _ask(self, request: Any) -> Any:
        with self.hold(), self.lock:
            return ask(self.reference, request, self.timeout_s, "problem")

    def of(self, n: int) -> list[Any] | None:
        if self.held[n] is not None:
            return self.held[n]
        seed = self.plan[n][1]
        if self.lent:
            self._ask(Run(seed=seed, want="outputs", send_up_to=-1))
            if self.tried:
                return None
            self.tried = True
            try:  # once: where the reference cannot lend (no CUDA VMM, say), outputs travel
                probe = self.lend()
                # Never sent: its descriptors would keep the block's memory for the bot's whole run.
                close_fds(probe.fds)
                self.judge(probe, None)
                self.note("outputs compared in the reference, where they lie")
                return None
            except WorkerFailure as exc:
                self.lent = False
                self.note(
                    f"outputs compared in the bot's process: the reference could not lend them memory ({exc.reason})"
                )
        return list(self._ask(Run(seed=seed, want="outputs")).outputs)

    def lend(self) -> Lent:
        with self.hold(), self.lock:
            return lend(self.reference, self.timeout_s)

    def judge(self, lent: Lent, wanted: list[tuple[Rule | None, str]] | None) -> list[CheckResult]:
        with self.hold(), self.lock:
            return judge(self.reference, lent, wanted, self.timeout_s)


def lend(reference: WorkerClient, timeout_s: float, alone: bool = False) -> Lent:
    """Blocks the reference lends for one call's outputs, bound to the outputs it kept last
    (`alone`: for these blocks only, freed with them)."""
    reply = ask(reference, Lend(alone=alone), timeout_s, "problem")
    fds = reference.channel.take_fds()
    if len(fds) != len(reply.sizes):
        close_fds(fds)
        raise WorkerFailure("problem", f"the reference lent {len(reply.sizes)} blocks with {len(fds)} descriptors")
    return Lent(reply.token, reply.sizes, fds)


def judge(
    reference: WorkerClient, lent: Lent, wanted: list[tuple[Rule | None, str]] | None, timeout_s: float
) -> list[CheckResult]:
    """The reference's verdict on what was written into `lent` (each output by its rule, with
    its label); with `wanted` None the blocks are only freed."""
    rules = [rule_to_wire(rule) for rule, _ in wanted or []]
    labels = [label for _, label in wanted or []]
    request = Judge(token=lent.token, rules=rules, labels=labels, compare=wanted is not None)
    reply = ask(reference, request, timeout_s, "problem")
    return [CheckResult.from_json(r) for r in reply.results]
