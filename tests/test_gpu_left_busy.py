"""The reference's look at the GPU after each batch (`GPU left busy`), with a stand-in for the
reference worker that answers each look as a GPU in a given state would, and what a busy look
decides of the batch before it: no GPU needed, but for the look's own length."""

from __future__ import annotations

import random
import statistics
import time
from collections import deque

import pytest

from bot.core.domain import CheckResult
from bot.core.settings import Device
from bot.engine.timing.harness_cost import HarnessCost
from bot.engine.timing.records import TimingRecord
from bot.engine.timing.timed_batch import _kept_after_looks
from bot.engine.verification import verify
from bot.harness.timing import TimedCalls
from bot.protocol.batches import Quiet, QuietReply

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


BUSY_LOOK = CheckResult("GPU left busy", False, "after this contender's batch the GPU was still busy", {"wall_us": 6e3})
QUIET_LOOK = CheckResult("GPU left busy", True, details={"wall_us": 3e3})


def _settle(record: TimingRecord, looks: list[CheckResult], keep: bool = True) -> bool:
    kept = _kept_after_looks(record, looks, keep)
    if kept:  # what one_batch appends for a kept batch, as far as the allowance counts it
        record.batch_sizes.append(10)
    return kept


def test_an_honest_contender_met_by_one_busy_look_is_timed_again_not_failed():
    record = TimingRecord()
    assert all(_settle(record, [QUIET_LOOK]) for _ in range(5))
    assert not _settle(record, [QUIET_LOOK, BUSY_LOOK])  # the lending path's two looks: one busy
    assert not record.failed
    assert len(record.batch_sizes) == 5  # that batch's figures left out
    retimed = [c for c in record.checks if c.name == verify.BUSY_RETIMED]
    assert len(retimed) == 1 and retimed[0].passed and "1 of 1 allowed" in retimed[0].evidence
    assert _settle(record, [QUIET_LOOK])
    assert verify.judge([*record.checks, CheckResult("values", True)]).accepted


def test_work_left_running_after_every_batch_fails_the_contender():
    # The defeating candidate of a bare retry: it leaves work running after every batch, each
    # retry among them. The allowance runs out at the second, with nothing of it kept.
    record = TimingRecord()
    assert not _settle(record, [BUSY_LOOK], keep=False)  # its warm-up batch
    assert not record.failed
    assert not _settle(record, [BUSY_LOOK])
    assert record.failed and record.batch_sizes == []
    failed = [c for c in record.checks if not c.passed]
    assert [c.name for c in failed] == ["GPU left busy"]
    assert failed[0].evidence.startswith("2 of its batches left the GPU busy, past the 1 timed again")
    assert not verify.judge([*record.checks, CheckResult("values", True)]).accepted


def test_work_left_running_after_chosen_batches_drops_one_in_twenty_at_most():
    # The candidate that leaves work running only after the batches it wants out of its median
    # (its slowest, which its own events tell it): it may drop one, and one more for every 20
    # kept, and fails at the next.
    record = TimingRecord()
    dropped = 0
    for _ in range(2_000):
        if record.failed:
            break
        if _settle(record, [QUIET_LOOK]) and len(record.batch_sizes) % 10 == 0:
            dropped += not _settle(record, [BUSY_LOOK]) and not record.failed
    kept = len(record.batch_sizes)
    assert record.failed, kept
    assert dropped == 1 + (kept - 1) // verify.BATCHES_PER_RETIME
    assert dropped <= 1 + kept / verify.BATCHES_PER_RETIME


def test_a_quiet_look_decides_nothing_and_is_kept_as_evidence():
    settled = verify.settle_busy_look(QUIET_LOOK, busy_before=3, kept_batches=0)
    assert settled.kept and settled.check is None and not settled.failed
    record = TimingRecord()
    assert _settle(record, [QUIET_LOOK])
    assert record.checks == [QUIET_LOOK]


@pytest.mark.gpu
def test_a_look_lasts_as_long_as_asked_on_a_gpu_that_had_idled():
    # Sized by one spin on a GPU whose clock had dropped, a look lasted 570 us of the 3 ms asked:
    # shorter than the time slice a look must outlast.
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    looker = _Looker()
    time.sleep(2.0)  # let the clock drop
    reply = looker.op_quiet(Quiet(chunks=30, chunk_us=100.0))
    assert "error" not in reply, reply
    intervals = reply["intervals_us"]
    assert statistics.median(intervals) >= 80.0, intervals
    assert reply["wall_us"] >= 30 * 80.0, reply


class _Looker(TimedCalls):
    """The reference's look alone, in this process (a GPU test's process is the bot's own)."""

    def __init__(self) -> None:
        self.device = Device.CUDA
        self.cycles_per_us = None
