"""Timing statistics: pure functions over raw samples (the protocol lives in bot.timing)."""

from __future__ import annotations

import math
import random
import statistics
from typing import Sequence

from bot.domain import Measurement, Speedup


def converged(m: Measurement, target_rel_se: float, min_samples: int) -> bool:
    """Enough samples that the median is known to within `target_rel_se`."""
    return m.n >= min_samples and m.rel_se <= target_rel_se


def _resampled_median(samples: Sequence[float], rng: random.Random) -> float:
    n = len(samples)
    return statistics.median(samples[rng.randrange(n)] for _ in range(n))


def speedup(baseline: Measurement, candidate: Measurement, min_speedup: float = 1.05,
            level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Speedup:
    """Ratio of medians with a percentile-bootstrap confidence interval.

    A speedup is claimed only when the whole interval clears `min_speedup`; a slowdown only
    when it lies below 1/min_speedup; anything else is 'no significant difference' (an A/A
    run of a kernel against itself lands there).
    """
    rng = random.Random(seed)
    ratio = baseline.median_us / candidate.median_us
    base, cand = list(baseline.samples_us), list(candidate.samples_us)
    boots = sorted(_resampled_median(base, rng) / _resampled_median(cand, rng)
                   for _ in range(resamples))
    tail = (1 - level) / 2
    low = boots[int(math.floor(tail * (resamples - 1)))]
    high = boots[int(math.ceil((1 - tail) * (resamples - 1)))]
    if low >= min_speedup:
        verdict = "faster"
    elif high <= 1 / min_speedup:
        verdict = "slower"
    else:
        verdict = "no significant difference"
    return Speedup(ratio, low, high, level, verdict)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
