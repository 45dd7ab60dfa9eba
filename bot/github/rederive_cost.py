"""What re-deriving an artifact's speedups will cost, known before any of it runs.

Each speedup is a block bootstrap over both sides' samples (`bot.core.stats.speedup`), so its
cost follows from the artifact's sizes alone: per resample and side, one random draw per
batch and a weighted median (a binary search over per-batch prefix counts, or one pass over
the samples where those would be too large), plus the draws of Student's t for the spread
between workers. The model below counts those steps in "units" as stage 1's pure-Python
function takes them (21 to 38 million a second on the CI machine, 2 vCPUs AMD EPYC, shared):
the caps admit every honest artifact seen (a nightly of twelve problems is 216 million) and an
artifact over them is refused before any bootstrap starts. Stage 2 itself re-derives with the
vectorised twin (bot.github.bootstrap), about four to eight times faster: the costliest
artifacts the caps admit, values and bytes included (bot.core.results_schema.MAX_VALUES,
bot.github.untrusted.MAX_RESULTS_BYTES), are read and re-derived in under 3 s there
(tests/test_publish_bounds.py, docs/security.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Weights of one step of each kind, fitted so that every artifact shape at the cap costs stage 1's
# function at most ~12 s of CPU (benchmarks/rederive_cost.py): a random draw weighs three steps
# of the median's binary search, a step of the running sum over all samples two.
_DRAW_UNITS = 3
_PREFIX_LIMIT = 400_000  # bench._bootstrap_medians keeps prefix counts up to n * batches of this
_PASS_UNITS = 2
_T_DRAW_UNITS = 4  # one normal draw (two uniforms, a log, a root and a cosine)
_FIXED_UNITS = 250  # per resample of any speedup: the ratio, its spread draw, the sort
# 250 million units: at most 11.5 s of CPU for stage 1's function, under 3 s for stage 2's. An
# honest artifact of 30 timed candidates with 1,000 samples a side in 100 batches is 185 million.
MAX_UNITS = 250_000_000
# One speedup: about half the budget at most.
MAX_UNITS_PER_SPEEDUP = 120_000_000
MAX_SPEEDUPS = 2_000  # shapes with a speedup in one artifact: each also costs its fixed set-up


class Sides(Protocol):
    """Raw samples (a Measurement): all the cost depends on."""

    @property
    def samples_us(self) -> Sequence[float]: ...
    @property
    def batch_sizes(self) -> Sequence[int]: ...


@dataclass(frozen=True)
class Cost:
    """The bootstrap work an artifact asks for."""

    speedups: int
    units: int
    largest_units: int  # of its costliest speedup


def _side_units(samples: Sides) -> int:
    n = len(samples.samples_us)
    batches = len(samples.batch_sizes) if len(samples.batch_sizes) >= 2 else n
    if n * batches <= _PREFIX_LIMIT:  # a binary search of dot products over the batch counts
        median = batches * max(1, math.ceil(math.log2(max(n, 2))))
    else:  # a running sum over every sample, then a bisection: two steps a sample
        median = _PASS_UNITS * n
    return _DRAW_UNITS * batches + median


def speedup_units(baseline: Sides, candidate: Sides, resamples: int, spread_df: int) -> int:
    """Units of one `bench.speedup` of these sides."""
    t_draws = (min(spread_df, 30) + 2) if spread_df > 0 else 0  # _student_t: df normals up to 30
    return resamples * (_side_units(baseline) + _side_units(candidate) + _T_DRAW_UNITS * t_draws + _FIXED_UNITS)


def total_cost(tasks: Sequence[tuple[Sides, Sides, int, int]]) -> Cost:
    """The cost of (baseline, candidate, resamples, spread_df) speedups."""
    units = [speedup_units(*task) for task in tasks]
    return Cost(len(units), sum(units), max(units, default=0))


def over_budget(cost: Cost) -> str | None:
    """Why re-deriving `cost` is refused; None when it fits."""
    if cost.speedups > MAX_SPEEDUPS:
        return f"{cost.speedups} speedups to re-derive, over the cap of {MAX_SPEEDUPS}"
    if cost.largest_units > MAX_UNITS_PER_SPEEDUP:
        return (
            f"one of its speedups would take {cost.largest_units / 1e6:,.0f} million bootstrap steps to "
            f"re-derive, over the cap of {MAX_UNITS_PER_SPEEDUP / 1e6:,.0f} million for one (fewer samples or "
            "batches per measurement)"
        )
    if cost.units > MAX_UNITS:
        return (
            f"re-deriving its {cost.speedups} speedups would take {cost.units / 1e6:,.0f} million bootstrap "
            f"steps, over the cap of {MAX_UNITS / 1e6:,.0f} million (fewer samples or batches per measurement)"
        )
    return None
