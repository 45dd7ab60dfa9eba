"""Timing statistics: pure functions over raw samples (the protocol lives in bot.timing)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from bot.domain import Measurement, Speedup


def converged(m: Measurement, target_rel_se: float, min_samples: int, min_batches: int = 1) -> bool:
    """Enough samples, spread over enough batches, that the median is known to within
    `target_rel_se`."""
    return m.n >= min_samples and len(m.sizes) >= min_batches and m.rel_se <= target_rel_se


def _bootstrap_medians(m: Measurement, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` block-bootstrap resamples: whole batches drawn with replacement
    (a batch's calls are not independent of each other, its moment is)."""
    samples = np.asarray(m.samples_us, dtype=np.float64)
    # One batch says nothing about the spread between batches: then fall back to the calls.
    sizes = m.sizes if len(m.sizes) >= 2 else (1,) * m.n
    order = np.argsort(samples, kind="stable")
    batch_of = np.repeat(np.arange(len(sizes)), sizes)[order]
    picks = rng.integers(0, len(sizes), size=(resamples, len(sizes)))
    counts = np.zeros((resamples, len(sizes)), dtype=np.int32)
    np.add.at(counts, (np.arange(resamples)[:, None], picks), 1)
    # Weighted median of the sorted samples, each weighted by how often its batch was drawn.
    cum = np.cumsum(counts[:, batch_of], axis=1)
    first_half = (cum * 2 >= cum[:, -1:]).argmax(axis=1)
    return samples[order][first_half]


def speedup(baseline: Measurement, candidate: Measurement, min_speedup: float = 1.05,
            level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Speedup:
    """Ratio of medians with a percentile (block-)bootstrap confidence interval.

    A speedup is claimed only when the whole interval clears `min_speedup`; a slowdown only
    when it lies below 1/min_speedup; anything else is 'no significant difference' (an A/A
    run of a kernel against itself lands there).
    """
    rng = np.random.default_rng(seed)
    ratio = baseline.median_us / candidate.median_us
    boots = np.sort(_bootstrap_medians(baseline, rng, resamples)
                    / _bootstrap_medians(candidate, rng, resamples))
    tail = (1 - level) / 2
    low = float(boots[int(math.floor(tail * (resamples - 1)))])
    high = float(boots[int(math.ceil((1 - tail) * (resamples - 1)))])
    if min(baseline.n, candidate.n) < 2:
        verdict = "no significant difference"  # one call on a side bounds nothing
    elif low >= min_speedup:
        verdict = "faster"
    elif high <= 1 / min_speedup:
        verdict = "slower"
    else:
        verdict = "no significant difference"
    return Speedup(ratio, low, high, level, verdict)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
