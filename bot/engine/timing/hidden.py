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
# Batches a rejection needs. A worker's drawing of its inputs spikes now and then (on the H100,
# by 19 to 45 ms in one of five batches of three honest contenders of KernelBench's
# 11_4D_tensor_matrix_multiplication), and a median of two spiked batches is a spike: that
# problem's torch.compile default build, screened out after two, was called tampered. Fewer
# batches than this are charged what they hid in full instead (up to their gain over the
# baseline, counted_within_gain), which leaves them no claim: hiding in them pays nothing.
MIN_BATCHES_TO_REJECT = 3


@dataclass(frozen=True)
class HiddenTime:
    """Time per call that the parent's clock saw and a contender's report left out."""

    hidden_us: float  # median over batches, beyond the harness's work and the yardstick's
    claimed_us: float  # the worker's reported time per call (median over batches)
    harness_us: float
    noise_us: float  # of `hidden_us`, for rejection: calibration and batch-to-batch scatter
    allowed_us: float
    counted_us: float  # each part of `hidden_us` out of its noise: on CUDA added to the samples (the CPU's hold it)
    staging_us: float = 0.0  # of `hidden_us`: the part from inputs the worker drew itself
    batches: int = MIN_BATCHES_TO_REJECT  # kept batches behind the medians

    def details(self) -> dict[str, float]:
        return {
            "hidden_us_per_call": self.hidden_us,
            "allowed_us": self.allowed_us,
            "claimed_us": self.claimed_us,
            "harness_us": self.harness_us,
            "noise_us": self.noise_us,
            "counted_us": self.counted_us,
            "staging_us_per_call": self.staging_us,
        }


@dataclass(frozen=True)
class _Part:
    """One part of the parent's time beyond a worker's report (the window's, or the staging's
    where the worker drew its inputs): its median, its noise for rejection, and what of it is
    counted."""

    hidden_us: float
    noise_us: float
    counted_us: float


_NOTHING = _Part(0.0, 0.0, 0.0)


def spread(values: Sequence[float]) -> float:
    """A standard deviation robust to outliers: the median absolute deviation, scaled."""
    centre = statistics.median(values)
    return statistics.median(abs(v - centre) for v in values) * 1.4826


def _scatter(values: Sequence[float]) -> float:
    """How far the median of `values` may be off: their spread over the root of their count."""
    return spread(values) / math.sqrt(len(values))


def _part(values: Sequence[float], noise_us: Sequence[float], yardstick_us: Sequence[float]) -> _Part:
    """The median of `values` beyond the yardstick's, its noise (the calibration's spread, the
    batches' own scatter and the yardstick's, each of a median), and that median counted where
    it stands out of the noise the contender cannot touch: the calibration's and what the
    yardstick's scatter would give two medians of the same code (root 2 of it). The contender's
    own scatter widens the rejection bound, never what is counted: scattering its batches on
    purpose would otherwise let it hide more. Held to the yardstick's scatter, honest copies are
    not charged what a few noisy batches put between two medians (on an H100 a worker's drawing
    of its inputs scattered by 0.7 to 2.3 ms a call, docs/verifier.md)."""
    if not values:
        return _NOTHING
    usual = statistics.median(yardstick_us) if yardstick_us else 0.0
    hidden = statistics.median(values) - usual
    calibration = statistics.median(noise_us) / math.sqrt(len(noise_us)) if noise_us else 0.0
    yardstick = _scatter(yardstick_us) if yardstick_us else 0.0
    noise = math.hypot(calibration, _scatter(values), yardstick)
    counted = hidden if hidden > 3 * math.hypot(calibration, math.sqrt(2) * yardstick) else 0.0
    return _Part(hidden, noise, counted)


def hidden_time(
    unexplained_us: Sequence[float],
    reported_us: Sequence[float],
    harness_us: Sequence[float],
    noise_us: Sequence[float],
    yardstick_us: Sequence[float] = (),
    staging: tuple[Sequence[float], Sequence[float], Sequence[float]] = ((), (), ()),
) -> HiddenTime:
    """Per kept batch, per call: the window's wall time less the calls' reported time less the
    harness's own work for such a batch, as measured on the reference with calls that do nothing
    (`unexplained_us`), that work (`harness_us`) and its measurement's spread (`noise_us`). The
    baseline's own `unexplained_us` is the yardstick for the other contenders: real calls in worker
    processes timed in turn with them (on a loaded 2-vCPU machine such processes sat up to 60 us
    a call above the calibration's). Where the worker drew its own inputs, `staging` holds the
    same for that step (its time beyond the reference's drawing of as many, that drawing's
    spread, and the yardstick's), judged apart: its scatter is its own, and summed with the
    window's it would hide a window's shave under a staging's noise."""
    window = _part(unexplained_us, noise_us, yardstick_us)
    drawn = _part(*staging)
    hidden = window.hidden_us + drawn.hidden_us
    claimed = statistics.median(reported_us)
    harness = statistics.median(harness_us) if harness_us else 0.0
    noise = math.hypot(window.noise_us, drawn.noise_us)
    allowed = HIDDEN_SHARE * claimed + HARNESS_SHARE * harness + 3 * noise
    counted = max(window.counted_us + drawn.counted_us, 0.0)
    batches = len(unexplained_us)
    if batches < MIN_BATCHES_TO_REJECT and hidden > allowed:
        counted = hidden  # too few batches to reject on: all of it charged instead
    return HiddenTime(hidden, claimed, harness, noise, allowed, counted, drawn.hidden_us, batches)


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
    if found.batches < MIN_BATCHES_TO_REJECT:
        return CheckResult(
            name,
            True,
            f"{seen} in {found.batches} batch(es), too few to tell from a spike in its drawing of "
            "inputs: counted into its times up to its gain over the baseline",
            found.details(),
        )
    return CheckResult(name, False, f"{seen}: the worker's clocks were tampered with?", found.details())


def counted_within_gain(counted_us: float, own_median_us: float, baseline_median_us: float | None) -> float:
    """What of a contender's counted hidden time goes into its samples: no more than its
    report's gain over the baseline (per call, the medians' difference), which already takes
    every gain it shows away. Work it hid (moved into its drawing, or shaved off a clock) that is
    charged up to that leaves it no faster than the baseline, so no claim; below it, it is
    charged in full. What lies beyond is the harness's noise on honest code: on the H100 a copy
    of gelu's 5 us decode call was charged 3,060 us a call, and a torch.compile build of
    19_ReLU as fast as eager 14.7 ms of its 5.2 ms call, both out of their drawing of inputs
    (docs/verifier.md, "Hidden time: the parent's clock"). Uncapped where no baseline was timed."""
    if baseline_median_us is None:
        return counted_us
    return min(counted_us, max(baseline_median_us - own_median_us, 0.0))


def counts_within_gain(
    records: Mapping[str, Any], found: Mapping[str, HiddenTime], baseline: str | None
) -> dict[str, HiddenTime]:
    """`found` (hidden_time_checks') with each contender's count held to its gain over the
    baseline (`counted_within_gain`), by the medians of its samples (TimingRecord-like objects,
    before anything is counted into them)."""
    base = records[baseline].measurement() if baseline in found else None
    held = dict(found)
    for name, hidden in found.items():
        own = records[name].measurement()
        if own is not None and base is not None:
            held[name] = replace(
                hidden, counted_us=counted_within_gain(hidden.counted_us, own.median_us, base.median_us)
            )
    return held


def _batch_totals(sizes: Sequence[int], per_call_us: Sequence[float]) -> list[tuple[int, float]]:
    """Per kept batch: its calls and its time of one part (per call in `per_call_us`) in all."""
    return [(n, u * n) for n, u in zip(sizes, per_call_us)]


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


def _line(base: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """The baseline's (part per batch, part per call) of one part; nothing where it has none."""
    return _per_batch_and_per_call(base) if base else (0.0, 0.0)


def _against(line: tuple[float, float], totals: Sequence[tuple[int, float]]) -> list[float]:
    """Per batch of `totals`, per call: its time beyond `line` at its size."""
    fixed, per_call = line
    return [(t - fixed - per_call * n) / n for n, t in totals]


def _parts(record: Any) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """A record's window and staging totals per kept batch (the staging's empty where the
    parent filled the inputs from outside)."""
    sizes = getattr(record, "batch_sizes", None) or [1] * len(record.unexplained_us)
    staging = getattr(record, "staging_us", None) or []
    return _batch_totals(sizes, record.unexplained_us), _batch_totals(sizes, staging)


def hidden_time_checks(records: Mapping[str, Any], baseline: str | None) -> dict[str, HiddenTime]:
    """`hidden_time` of every contender with kept batches (TimingRecord-like objects), each but
    the baseline against what the baseline's time would be in batches of its sizes
    (`_per_batch_and_per_call`), window and staging apart, where the baseline was timed; the
    baseline against the calibration alone."""
    timed = {n: r for n, r in records.items() if r.unexplained_us}
    base = _parts(timed[baseline]) if baseline in timed else ([], [])
    lines = [_line(part) for part in base]  # fitted once, for every contender
    yardstick = [_against(line, part) for line, part in zip(lines, base)]
    found = {}
    for name, r in timed.items():
        # the baseline, or any contender where no baseline was timed: against the calibration alone
        on_its_own = name == baseline or baseline not in timed
        fits, held_to = ([(0.0, 0.0)] * 2, ([], [])) if on_its_own else (lines, yardstick)
        window, staging = _parts(r)
        staging_noise = getattr(r, "staging_noise_us", None) or []
        found[name] = hidden_time(
            _against(fits[0], window),
            r.reported_us,
            r.harness_us,
            r.noise_us,
            held_to[0],
            (_against(fits[1], staging), staging_noise, held_to[1]),
        )
    if baseline in found:  # the yardstick counts nothing into its own times: what it hides makes
        # it faster, which no candidate's claim can gain from
        found[baseline] = replace(found[baseline], counted_us=0.0)
    return found
