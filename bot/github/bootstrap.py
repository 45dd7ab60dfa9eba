"""`bot.core.stats.speedup`, vectorised with numpy for stage 2's re-derivation.

Stage 1 computes every interval with `bot.core.stats.speedup` (pure Python, so a bare GPU image
needs nothing more); stage 2 must recompute every one an artifact claims, and in pure Python a
nightly sweep's two hundred intervals take about 10 s of CPU. This is the same computation on
the same random stream: the generator's state is handed to numpy's legacy Mersenne Twister
(which draws the very same doubles) and back, each resample's batch counts and weighted median
are found exactly (integer counts, the first sorted sample whose cumulative weight reaches
half), and only the draws of the spread between workers go through numpy's `log`, `cos` and
`exp`, which may differ from the `math` module's in the last bit: the intervals agree with
stage 1's to about 1e-15, far inside the tolerance stage 2 compares claims with
(tests/test_rederive_speed.py holds the two together).

numpy comes with matplotlib, which the publish job installs for the chart (ci/publish.lock).
"""

from __future__ import annotations

import math
import random

import numpy as np

from bot.core import stats as bench
from bot.core.measurement import Measurement, Speedup
from bot.core.settings import DEFAULTS

_BLAS_RATIO = 50


def _uniforms(rng: random.Random, count: int) -> np.ndarray:
    """The next `count` values of `rng.random()`, drawn by numpy; `rng` is left where drawing
    them one by one would have left it."""
    version, internal, gauss = rng.getstate()
    twister = np.random.RandomState()
    key = np.asarray(internal[:-1], dtype=np.uint32)
    twister.set_state(
        {"bit_generator": "MT19937", "state": {"key": key, "pos": internal[-1]}, "has_gauss": 0, "gauss": 0.0}
    )
    values = twister.random_sample(count)
    state = twister.get_state(legacy=False)["state"]
    rng.setstate((version, (*state["key"].tolist(), int(state["pos"])), gauss))
    return values


def bootstrap_medians(m: Measurement, rng: random.Random, resamples: int) -> np.ndarray:
    """`bot.core.stats._bootstrap_medians`: the same medians from the same draws.

    A resample's median is the first sorted sample whose cumulative weight (the draws of its
    batch) reaches half the total. It is found in two steps, both exact (every weight is an
    integer well under 2**53, so float64 sums of them are exact in any order): the cumulative
    weight at the end of each block of sorted samples (`block_size`), a matrix product of the
    batch counts with the blocks' prefix counts, picks the block; a running sum inside that
    block picks the sample."""
    sizes = m.sizes if len(m.sizes) >= 2 else (1,) * m.n
    batches, n = len(sizes), m.n
    samples = np.asarray(m.samples_us, dtype=np.float64)
    order = np.argsort(samples, kind="stable")  # ties in their original order, as `sorted` keeps them
    ordered = samples[order]
    batch_of = np.repeat(np.arange(batches), sizes)[order]
    # int(draw() * batches) for each of `batches` draws a resample, resample after resample.
    picked = (_uniforms(rng, resamples * batches) * batches).astype(np.int64).reshape(resamples, batches)
    picked += np.arange(resamples, dtype=np.int64)[:, None] * batches
    counts = np.bincount(picked.ravel(), minlength=resamples * batches).reshape(resamples, batches)
    counts = counts.astype(np.float64)
    block = block_size(n, batches)
    starts = np.arange(0, n, block)
    # prefix[j, b]: samples of batch b among the sorted samples up to the end of block j.
    per_block = np.bincount(np.arange(n) // block * batches + batch_of, minlength=len(starts) * batches)
    per_block = per_block.reshape(len(starts), batches)
    prefix = np.cumsum(per_block, axis=0).astype(np.float64)
    ends = counts @ prefix.T  # cumulative weight at each block's end, one row a resample
    half = ends[:, -1] / 2  # the total weight over two, a float as in the pure version
    first = np.argmax(ends >= half[:, None], axis=1)  # the block holding the median
    rows = np.arange(resamples)
    before = np.where(first > 0, ends[rows, np.maximum(first - 1, 0)], 0.0)
    inside = starts[first][:, None] + np.arange(block)  # the block's sorted indices
    valid = inside < n
    weights = np.where(valid, counts[rows[:, None], batch_of[np.minimum(inside, n - 1)]], 0.0)
    cum = before[:, None] + np.cumsum(weights, axis=1)
    at = np.argmax((cum >= half[:, None]) & valid, axis=1)
    medians: np.ndarray = ordered[starts[first] + at]
    return medians


def block_size(samples: int, batches: int) -> int:
    """Sorted samples a block. The first step costs batches x samples / block multiply-adds a
    resample (a BLAS product, some fifty times cheaper each than the second step's gathered
    sums), the second a block: sqrt(samples x batches / 50) balances them."""
    return max(1, min(samples, math.isqrt(samples * batches // _BLAS_RATIO)))


def _normals(uniforms: np.ndarray) -> np.ndarray:
    """`_student_t`'s normal(), from its two draws (the last axis)."""
    return np.sqrt(-2.0 * np.log(1.0 - uniforms[..., 0])) * np.cos(2.0 * math.pi * uniforms[..., 1])


def student_t(rng: random.Random, df: int, count: int) -> np.ndarray:
    """`count` draws of `bot.core.stats._student_t(rng, df)`, in order."""
    per = 1 + (df if df <= 30 else 1)  # normals a draw takes
    normals = _normals(_uniforms(rng, count * per * 2).reshape(count, per, 2))
    z = normals[:, 0]
    if df <= 30:
        chi2 = np.zeros(count)
        for k in range(1, per):  # summed left to right, as `sum` does
            chi2 = chi2 + normals[:, k] ** 2
    else:
        c = 2.0 / (9.0 * df)
        chi2 = df * np.maximum(1.0 - c + normals[:, 1] * math.sqrt(c), 1e-6) ** 3
    return z / np.sqrt(np.maximum(chi2, 1e-300) / df)


def speedup(
    baseline: Measurement,
    candidate: Measurement,
    min_speedup: float = DEFAULTS.min_speedup,
    level: float = 0.95,
    resamples: int = 2000,
    spread: bench.WorkerSpread = bench.WorkerSpread(),  # noqa: B008 (frozen, as in bot.core.stats)
) -> Speedup:
    """`bot.core.stats.speedup`, step for step."""
    rng = random.Random(bench.seed_of(baseline, candidate, spread))
    ratio = baseline.median_us / candidate.median_us
    boots = bootstrap_medians(baseline, rng, resamples) / bootstrap_medians(candidate, rng, resamples)
    if spread.df > 0 and spread.log_sd > 0:
        scale = spread.log_sd * math.sqrt(1 / baseline.workers + 1 / candidate.workers)
        cap = bench.LOG_FACTOR_CAP  # stage 1's cap on t's Cauchy-like tails
        boots = boots * np.exp(np.clip(scale * student_t(rng, spread.df, resamples), -cap, cap))
    boots.sort()
    low, high = bench.percentile_interval(boots, level)
    verdict = bench.significance(low, high, min_speedup, min(baseline.n, candidate.n))
    return Speedup(ratio, low, high, level, verdict, baseline, spread.log_sd, spread.df, resamples)
