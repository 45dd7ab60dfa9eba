"""The check list: pure functions from observations to `CheckResult`s, and `judge`.

Nothing here runs candidate code or times anything; the observations come from workers
(see `bot.engine.verification.trials` and `bot.engine.timing.interleaved`), the reference from a different process.
Outputs are compared with the reference's in bot.engine.verification.compare, the parent's clock held
against the worker's report in bot.engine.timing.hidden.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.core.domain import CheckResult, Verdict


def check_output_meta(expected: Sequence[Mapping[str, Any]], got: Sequence[Mapping[str, Any]]) -> CheckResult:
    """Exact `torch.Tensor` type, number of outputs, shape, dtype and device."""
    if len(expected) != len(got):
        return CheckResult("output structure", False, f"returned {len(got)} outputs, expected {len(expected)}")
    for i, (e, g) in enumerate(zip(expected, got)):
        if g.get("type") != "Tensor":
            return CheckResult(
                "output structure", False, f"output {i} is a {g.get('type')}, expected exactly torch.Tensor"
            )
        for key in ("shape", "dtype", "device"):
            if e.get(key) != g.get(key):
                return CheckResult(
                    "output structure", False, f"output {i} {key} is {g.get(key)}, expected {e.get(key)}"
                )
    return CheckResult("output structure", True)


def check_inputs_unchanged(
    reference_hashes: Sequence[str], before: Sequence[str], after: Sequence[str], label: str
) -> CheckResult:
    name = "inputs unchanged"
    if list(before) != list(reference_hashes):
        return CheckResult(
            name,
            False,
            f"{label}: the worker's inputs differ from the reference's "
            "before the call (get_inputs() was tampered with?)",
        )
    changed = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    if changed:
        return CheckResult(name, False, f"{label}: input(s) {changed} were modified by the call")
    return CheckResult(name, True)


def check_threads(new_threads: Sequence[str], where: str) -> CheckResult:
    if new_threads:
        return CheckResult(
            "no new threads",
            False,
            f"{len(new_threads)} thread(s) alive after {where} that the harness did not start: "
            f"{', '.join(new_threads[:5])}",
        )
    return CheckResult("no new threads", True)


def check_stream_timing(host_us: Sequence[float], event_us: Sequence[float], overhead_us: float) -> CheckResult:
    """Device-wide synchronised time must agree with event time on the current stream."""
    name = "stream timing"
    gap = statistics.median(h - e for h, e in zip(host_us, event_us))
    ev = statistics.median(event_us)
    allowed = 2 * overhead_us + 0.25 * ev + 10.0
    details = {"median_gap_us": gap, "allowed_us": allowed, "median_event_us": ev}
    if gap > allowed:
        return CheckResult(
            name,
            False,
            f"device-synchronised time exceeds event time by {gap:.1f} us "
            f"(allowed {allowed:.1f} us, event median {ev:.1f} us): work on another "
            "stream or left running after the call?",
            details,
        )
    return CheckResult(name, True, details=details)


def check_roofline(median_us: float, floor_us: float | None) -> CheckResult:
    name = "roofline"
    if floor_us is None:
        return CheckResult(name, True, "no roofline known for this device", {"floor_us": None})
    if median_us < floor_us:
        return CheckResult(
            name,
            False,
            f"median {median_us:.2f} us is below the physical floor "
            f"{floor_us:.2f} us (bytes / peak bandwidth, flops / peak rate): implausible",
            {"floor_us": floor_us},
        )
    return CheckResult(name, True, details={"floor_us": floor_us})


def check_wall_clock(reported_us: float, parent_wall_us: float) -> CheckResult:
    """The worker's own timings cannot exceed what the parent saw pass (timer patching)."""
    name = "wall clock"
    if reported_us > parent_wall_us * 1.02 + 100.0:
        return CheckResult(
            name,
            False,
            f"worker reported {reported_us:.0f} us of calls within {parent_wall_us:.0f} us of the parent's wall clock",
        )
    return CheckResult(name, True)


# A look at the GPU (the reference's row of spin kernels, bot.engine.timing.harness_cost) may take this much longer
# than on an idle GPU, or wait this much between two of its kernels, for the GPU's switch from
# another process's context: on an H100, up to 250 us after an honest batch of memory-bound
# work; a kernel left running costs a time slice instead (2.4 ms).
GPU_SWITCH_US = 1500.0
GPU_GAP_US = 1000.0


def check_gpu_quiet(wall_us: float, idle_wall_us: float, intervals_us: Sequence[float]) -> CheckResult:
    """Right after a contender's batch, with every contender frozen, the GPU must be the
    reference's: GPU work a contender left running after its own window (a kernel on a stream of
    its own, its synchronise rebound) ran outside its window's clock and on into the next
    contender's. Frozen processes queue no new work, so what the look finds was left by the
    contender timed last."""
    name = "GPU left busy"
    typical = statistics.median(intervals_us) if intervals_us else 0.0
    longest = max(intervals_us, default=0.0)
    details = {"wall_us": wall_us, "idle_wall_us": idle_wall_us, "longest_gap_us": longest, "typical_gap_us": typical}
    if wall_us > idle_wall_us + GPU_SWITCH_US or longest > typical + GPU_GAP_US:
        return CheckResult(
            name,
            False,
            f"after this contender's batch the GPU was still busy: a "
            f"look at it took {wall_us:.0f} us against {idle_wall_us:.0f} us idle, "
            f"waiting up to {longest:.0f} us between kernels: work left running "
            "into the next contender's window?",
            details,
        )
    return CheckResult(name, True, details=details)


# A batch after which the GPU was still busy is not kept but timed again, up to one such batch
# and one more for every BATCHES_PER_RETIME kept; past that the contender fails. Honest work met
# busy looks on the H100: 40_LayerNorm's baseline reference after one of its batches, a
# torch.compile build of 47_Sum after one of its 12, a copy of gelu in an A/A run. A contender
# that leaves work running after the batches it chooses (its slowest, known from its own
# events) drops at most that share of them: its median moves by that many ranks at most.
BATCHES_PER_RETIME = 20
BUSY_RETIMED = "GPU busy after a batch"


@dataclass(frozen=True)
class BusyLookSettled:
    """What a look after a batch decides: whether the batch's figures are kept, the check it
    leaves (None where the look was quiet), and whether the contender fails."""

    kept: bool
    check: CheckResult | None
    failed: bool


def settle_busy_look(found: CheckResult, busy_before: int, kept_batches: int) -> BusyLookSettled:
    """A look after a batch (check_gpu_quiet's `found`), given the contender's earlier busy
    looks and its kept batches so far."""
    if found.passed:
        return BusyLookSettled(True, None, False)
    allowed = 1 + kept_batches // BATCHES_PER_RETIME
    if busy_before >= allowed:
        why = f"{busy_before + 1} of its batches left the GPU busy, past the {allowed} timed again: "
        return BusyLookSettled(False, replace(found, evidence=why + found.evidence), True)
    timed_again = CheckResult(
        BUSY_RETIMED,
        True,
        f"a batch not kept and timed again ({busy_before + 1} of {allowed} allowed so far): {found.evidence}",
        found.details,
    )
    return BusyLookSettled(False, timed_again, False)


def judge(checks: Sequence[CheckResult]) -> Verdict:
    """Accepted only when every check passed and the values were actually compared."""
    merged: dict[str, CheckResult] = {}
    for check in checks:
        prior = merged.get(check.name)
        if prior is None or (prior.passed and not check.passed):
            merged[check.name] = check
    ok = bool(merged) and all(c.passed for c in merged.values()) and "values" in merged
    return Verdict("accepted" if ok else "rejected", tuple(merged.values()))
