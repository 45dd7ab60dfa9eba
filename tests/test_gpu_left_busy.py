"""The reference's look at the GPU before each window (`GPU left busy`), with a stand-in for
the reference worker that answers each look as a GPU in a given state would: no GPU needed."""

from __future__ import annotations

import random
from collections import deque

from bot.core.settings import Device
from bot.engine.timing.harness_cost import HarnessCost
from bot.protocol.batches import QuietReply

QUIET = (3_100.0, [100.0] * 30)  # the look's 30 spin kernels on a GPU that is the reference's
# Another process's work time-slicing with the look all through it: slower, and no single long
# gap between two kernels to give it away.
BUSY = (9_000.0, [300.0] * 30)
LEFT_BEHIND = (6_000.0, [200.0] * 30)


class LookingReference:
    """Answers each look from a script of (wall time, gaps between kernels)."""

    device = Device.CUDA

    def __init__(self, looks: list[tuple[float, list[float]]]):
        self.looks = deque(looks)

    def request(self, message: dict, timeout_s: float, phase: str) -> dict:
        assert message["op"] == "quiet", message
        wall_us, gaps = self.looks.popleft()
        return QuietReply(wall_us=wall_us, intervals_us=gaps).to_wire()


def _harness(looks: list[tuple[float, list[float]]]) -> HarnessCost:
    meta = [{"dtype": "float32", "shape": [1024]}]
    return HarnessCost(LookingReference(looks), meta, 4096, "latency", random.Random(0), 10.0)  # type: ignore[arg-type]


def test_work_left_running_while_the_idle_look_was_taken_cannot_hide_later_work():
    # The defeating candidate: its trials leave GPU work running into the first timing window, so
    # the looks that set the idle time are slowed by it; afterwards its batches leave work behind
    # that slows a look less than that. A quiet look in between shows what idle is.
    harness = _harness([BUSY, BUSY, BUSY, BUSY, QUIET, LEFT_BEHIND] + [LEFT_BEHIND] * 20)
    first = harness.gpu_left_busy()
    assert first is not None and first.passed  # nothing to compare with yet: no blame
    assert harness.gpu_left_busy().passed  # the quiet look
    caught = harness.gpu_left_busy()
    assert not caught.passed, caught.details
    assert caught.details["idle_wall_us"] == QUIET[0]


def test_an_idle_gpu_passes_every_look():
    harness = _harness([QUIET] * 10)
    assert all(harness.gpu_left_busy().passed for _ in range(7))
