"""Time the parent's clock saw that a contender's report left out (`hidden_time`), and the
check that rejects gross hiding and counts the rest into its times (`check_hidden_time`).

The harness's clocks run in the candidate's process, which can rebind them; the parent's
clock around each timed batch cannot be, so what the worker reports is held against it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bot.core.domain import CheckResult

# Time per call the parent's clock saw beyond the report, the harness's measured work and the
# yardstick's, before a contender is rejected for it: half its reported time, a quarter of the
# harness's work (a real call leaves the caches colder for the work after it than the
# calibration's do-nothing call: 8 us of gelu's 62 us on a 2-vCPU CPU), and three times the
# noise of the medians compared. Less than that is reported as counted: honest code
# also leaves work for after its return (an interpreted Triton kernel's garbage, 3.9 ms on a
# 68 ms call). The contender's times are the parent's own (bot.engine.timing.outside_clock), so they
# hold whatever a report left out: this check is evidence of tampering, never a time.
HIDDEN_SHARE = 0.5
HARNESS_SHARE = 0.25


@dataclass(frozen=True)
class HiddenTime:
    """Time per call that the parent's clock saw and a contender's report left out."""

    hidden_us: float  # median over batches, beyond the harness's work and the yardstick's
    claimed_us: float  # the worker's reported time per call (median over batches)
    harness_us: float
    noise_us: float  # of `hidden_us`, for rejection: calibration and batch-to-batch scatter
    allowed_us: float
    counted_us: float  # `hidden_us` out of the calibration's noise: on CUDA added to the samples (the CPU's hold it)

    def details(self) -> dict[str, float]:
        return {
            "hidden_us_per_call": self.hidden_us,
            "allowed_us": self.allowed_us,
            "claimed_us": self.claimed_us,
            "harness_us": self.harness_us,
            "noise_us": self.noise_us,
            "counted_us": self.counted_us,
        }


def spread(values: Sequence[float]) -> float:
    """A standard deviation robust to outliers: the median absolute deviation, scaled."""
    centre = statistics.median(values)
    return statistics.median(abs(v - centre) for v in values) * 1.4826


def _scatter(values: Sequence[float]) -> float:
    """How far the median of `values` may be off: their spread over the root of their count."""
    return spread(values) / math.sqrt(len(values))


def hidden_time(
    unexplained_us: Sequence[float],
    reported_us: Sequence[float],
    harness_us: Sequence[float],
    noise_us: Sequence[float],
    yardstick_us: Sequence[float] = (),
) -> HiddenTime:
    """Per kept batch, per call: the window's wall time less the calls' reported time less the
    harness's own work for such a batch, as measured on the reference with calls that do nothing
    (`unexplained_us`), that work (`harness_us`) and its measurement's spread (`noise_us`). The
    baseline's own `unexplained_us` is the yardstick for the other contenders: real calls in worker
    processes timed in turn with them (on a loaded 2-vCPU machine such processes sat up to 60 us
    a call above the calibration's). The contender's own scatter widens the rejection bound,
    never what is counted."""
    usual = statistics.median(yardstick_us) if yardstick_us else 0.0
    hidden = statistics.median(unexplained_us) - usual
    claimed = statistics.median(reported_us)
    harness = statistics.median(harness_us) if harness_us else 0.0
    calibration = statistics.median(noise_us) / math.sqrt(len(noise_us)) if noise_us else 0.0
    noise = math.hypot(calibration, _scatter(unexplained_us), _scatter(yardstick_us) if yardstick_us else 0.0)
    allowed = HIDDEN_SHARE * claimed + HARNESS_SHARE * harness + 3 * noise
    counted = hidden if hidden > 3 * calibration else 0.0
    return HiddenTime(hidden, claimed, harness, noise, allowed, max(counted, 0.0))


def check_hidden_time(found: HiddenTime, rejects: bool) -> CheckResult:
    """The parent's wall clock must account for a worker's calls. The harness reads clocks it
    captured before the candidate was imported, but the candidate runs in that process and can
    rebind them (`bot.harness.shared.perf_ns`); the time it hides from its own report is still on
    the parent's clock. Where the samples are the worker's events (CUDA, `rejects`), gross
    hiding rejects and below that bound it is counted into them (`HiddenTime.counted_us`).
    Where the samples are the parent's own spans (the CPU) they hold it already, and the figure
    is evidence, never a verdict: on 2 busy shared vCPUs an honest contender's unexplained time
    reached 1.8x its call (2.4 ms beside a 1.3 ms call), past any bound a halved clock exceeds."""
    name = "hidden time"
    if found.hidden_us <= found.allowed_us:
        return CheckResult(name, True, details=found.details())
    seen = (
        f"the parent's clock saw {found.hidden_us:.1f} us per call more "
        f"than this worker reported ({found.claimed_us:.1f} us a call) beyond the "
        f"harness's own {found.harness_us:.1f} us (allowed {found.allowed_us:.1f} us)"
    )
    if not rejects:
        return CheckResult(name, True, f"{seen}: in its times, which are the parent's own", found.details())
    return CheckResult(name, False, f"{seen}: the worker's clocks were tampered with?", found.details())


def _batch_totals(record: Any) -> list[tuple[int, float]]:
    """Per kept batch: its calls and the unexplained time of the whole batch."""
    sizes = getattr(record, "batch_sizes", None) or [1] * len(record.unexplained_us)
    return [(n, u * n) for n, u in zip(sizes, record.unexplained_us)]


def _per_batch_and_per_call(totals: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """The baseline's unexplained time of a batch as a part per batch and a part per call: a
    Theil-Sen line through (calls, total) where its batches differ in size (the parent draws
    them so), else all of it per batch. The part per batch (waking a worker on a busy host:
    2 to 3 ms a batch on 2 shared vCPUs) must not be charged per call to a contender timed in
    batches of other sizes: per call it is 25x larger in a batch of 2 than in one of 50. The
    part per call is never negative: time unexplained does not shrink as calls are added, and
    a falling line (a replica's first, small batches carrying more of the parent's time, on the
    H100) charged a twin timed in larger batches the fall, per call."""
    slopes = [(t2 - t1) / (n2 - n1) for i, (n1, t1) in enumerate(totals) for n2, t2 in totals[i + 1 :] if n2 != n1]
    per_call = max(statistics.median(slopes), 0.0) if slopes else 0.0
    return statistics.median(t - per_call * n for n, t in totals), per_call


def hidden_time_checks(records: Mapping[str, Any], baseline: str | None) -> dict[str, HiddenTime]:
    """`hidden_time` of every contender with kept batches (TimingRecord-like objects), each but
    the baseline against what the baseline's unexplained time would be in batches of its sizes
    (`_per_batch_and_per_call`), where the baseline was timed; the baseline against the
    calibration alone."""
    timed = {n: r for n, r in records.items() if r.unexplained_us}
    if baseline not in timed:
        return {n: hidden_time(r.unexplained_us, r.reported_us, r.harness_us, r.noise_us) for n, r in timed.items()}
    base_totals = _batch_totals(timed[baseline])
    fixed, per_call = _per_batch_and_per_call(base_totals)
    residuals = [(t - fixed - per_call * n) / n for n, t in base_totals]
    found = {}
    for name, r in timed.items():
        if name == baseline:
            found[name] = hidden_time(r.unexplained_us, r.reported_us, r.harness_us, r.noise_us)
            continue
        beyond = [(t - fixed - per_call * n) / n for n, t in _batch_totals(r)]
        found[name] = hidden_time(beyond, r.reported_us, r.harness_us, r.noise_us, residuals)
    if baseline in found:  # the yardstick counts nothing into its own times: what it hides makes
        # it faster, which no candidate's claim can gain from
        found[baseline] = replace(found[baseline], counted_us=0.0)
    return found
