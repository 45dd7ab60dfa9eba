"""What an evaluation found: per contender its verdict and, per shape, its measurement,
speedup against the baseline and distance to the roofline floor."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core import stats as bench
from bot.core.domain import CandidateSource, Environment, Problem, Verdict
from bot.core.measurement import Measurement, Speedup

# The name of a passed check of a candidate whose run's baseline failed: why it has no speedup
# (bot.engine.evaluation.evaluate adds it; a candidate's line in the report quotes it).
BASELINE_LOST = "no baseline timed beside it"


@dataclass(frozen=True)
class ShapeOutcome:
    shape: str
    inputs: str  # e.g. "bfloat16[8192, 4096], bfloat16[4096]"
    output_dtype: str | None
    measurement: Measurement | None
    speedup: Speedup | None
    floor_us: float | None
    max_abs_err: float | None
    norm_rel_err: float | None
    # What the floor is computed from with the device's peaks (bot.core.roofline): the problem's
    # bytes moved and flops at this shape, so stage 2 recomputes it with its own peaks.
    nbytes: int | None = None
    flops: int | None = None

    @property
    def pct_of_floor(self) -> float | None:
        if self.floor_us is None or self.measurement is None:
            return None
        return 100.0 * self.floor_us / self.measurement.median_us


@dataclass(frozen=True)
class ContenderOutcome:
    candidate: CandidateSource
    role: str  # "baseline" | "candidate"
    verdict: Verdict
    shapes: tuple[ShapeOutcome, ...]
    # Why its times say nothing of the code (bot.engine.evaluation.simulated): verified, never timed for a claim.
    not_timed: str | None = None

    @property
    def speedup(self) -> float | None:
        ratios = [s.speedup.ratio for s in self.shapes if s.speedup]
        return bench.geomean(ratios) if ratios and len(ratios) == len(self.shapes) else None

    @property
    def speedup_ci(self) -> tuple[float, float] | None:
        """Geometric mean of the per-shape bounds (each shape counts equally)."""
        speedups = [s.speedup for s in self.shapes]
        if self.speedup is None or any(s is None for s in speedups):
            return None
        low = bench.geomean([s.ci_low for s in speedups if s is not None])
        high = bench.geomean([s.ci_high for s in speedups if s is not None])
        return None if low is None or high is None else (low, high)

    @property
    def median_us(self) -> float | None:
        return self.shapes[0].measurement.median_us if self.shapes and self.shapes[0].measurement else None

    def slower_shapes(self) -> list[str]:
        """Shapes on which this contender is significantly slower than the baseline: the same
        rule as a slowdown claim (the interval under 1/min_speedup), so a loss must be as
        clear as a gain. "Under 1" would refuse a 4.7x-on-prefill split for 0.93x [0.92, 0.96]
        on decode, where its wrapper costs a few microseconds of Python."""
        return [s.shape for s in self.shapes if s.speedup is not None and s.speedup.significance == "slower"]


@dataclass(frozen=True)
class Evaluation:
    problem: Problem
    environment: Environment
    baseline: ContenderOutcome | None
    candidates: tuple[ContenderOutcome, ...]
    # Candidates never run: evaluated a few at a time (too large for the GPU together), the
    # budget ran out before their turn.
    not_evaluated: tuple[CandidateSource, ...] = ()
