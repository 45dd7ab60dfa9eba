"""Timing statistics: pure functions over raw samples (the protocol lives in bot.engine.timing.interleaved).

Standard library only, so stage 1 needs nothing more on a bare GPU image. The publishing stage
re-derives every speedup and interval it publishes from the artifact's raw samples with a
vectorised twin of `speedup` (bot.github.bootstrap: the same draws, the same medians), held to
this one by tests/test_rederive_speed.py.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat, starmap
from operator import mul

from bot.core.measurement import Measurement, Speedup
from bot.core.settings import DEFAULTS


def converged(m: Measurement, target_rel_se: float, min_samples: int, min_batches: int = 1) -> bool:
    """Enough samples, spread over enough batches, that the median is known to within
    `target_rel_se`."""
    return m.n >= min_samples and len(m.sizes) >= min_batches and m.rel_se <= target_rel_se


# Batches every worker needs before the offset between workers is taken from neighbours in
# time (`_log_squares`).
NEIGHBOURED_BATCHES = 6


@dataclass(frozen=True)
class WorkerSpread:
    """How far worker processes running the same code disagree: the standard deviation of the
    log of each worker's median around its contender's mean, pooled over contenders, and its
    degrees of freedom (0: no contender had two workers, so nothing is known)."""

    log_sd: float = 0.0
    df: int = 0


def worker_spread(measurements: Iterable[Measurement], trusted: Measurement | None = None) -> WorkerSpread:
    """Pooled over `measurements`, and never under what `trusted` (the baseline, the
    repository's own code, also among the measurements) shows by itself: a candidate
    whose processes agree to the nanosecond must not narrow the intervals of the others."""
    squares, df = 0.0, 0
    for m in measurements:
        m_squares, m_df = _log_squares(m)
        squares, df = squares + m_squares, df + m_df
    pooled = math.sqrt(squares / df) if df else 0.0
    own_squares, own_df = _log_squares(trusted) if trusted is not None else (0.0, 0)
    floor = math.sqrt(own_squares / own_df) if own_df else 0.0
    return WorkerSpread(max(pooled, floor), df)


def _log_squares(m: Measurement) -> tuple[float, int]:
    """The offset between a contender's worker processes as squared deviations of logs, less
    what the batches' own scatter explains, and its degrees of freedom.

    - Neighbours in time (`_neighbours_apart`), once every worker has NEIGHBOURED_BATCHES
      batches: each batch against the batches just before and after it from the contender's
      other workers, tens of ms away in the same round, where the host's load is the same.
      Whole medians took the load for an offset: on a busy 2-vCPU host batches run at one of
      two speeds, 2x apart, in stretches, and the median of ten batches falls in either mode
      by chance; replicas of one code came out 1.7x apart, and their spread, with one degree
      of freedom, widened an honest 6x claim to [0.75, 25.7].
    - Before that, whole medians (`_medians_apart`): the scatter of three or four ratios can
      come out small by chance and call noise an offset, where the whole medians' scatter,
      the rounds' swings included, does not (a futility look after three rounds).
    """
    logs = [(w, math.log(v)) for w, v in zip(m.batch_workers, m.batch_medians) if v > 0]
    per = _by_worker(logs)
    if len(per) < 2:
        return 0.0, 0
    if min(len(v) for v in per) >= NEIGHBOURED_BATCHES and (near := _neighbours_apart(logs)) < math.inf:
        return near, len(per) - 1
    return _medians_apart(m, per), len(per) - 1


def _excess(offsets: list[float], variances: list[float]) -> float:
    """Squared deviations of the workers' `offsets` from their mean less what their sampling
    `variances` explain: E[sum (x_w - mean)^2] = (W - 1) spread^2 + (1 - 1/W) sum v_w. Never
    negative: a contender never subtracts from the others'."""
    mean = sum(offsets) / len(offsets)
    squares = sum((o - mean) ** 2 for o in offsets)
    return max(squares - (1 - 1 / len(offsets)) * sum(variances), 0.0)


def _by_worker(pairs: Iterable[tuple[int, float]]) -> list[list[float]]:
    per: dict[int, list[float]] = {}
    for worker, value in pairs:
        per.setdefault(worker, []).append(value)
    return [per[w] for w in sorted(per)]


def _medians_apart(m: Measurement, per: list[list[float]]) -> float:
    """Each worker's median of its calls, with a mean's sampling variance from its batches'
    logs (`per`, by worker)."""
    return _excess(
        [math.log(v) for v in m.worker_medians],
        [statistics.variance(v) / len(v) if len(v) >= 2 else 0.0 for v in per],
    )


def _neighbours_apart(logs: list[tuple[int, float]]) -> float:
    """sum_w (o_w - mean o)^2 = (1/W) sum over pairs of workers of (o_a - o_b)^2, each pair's
    difference the median log ratio of its batches next to each other in time. Pairs do not
    share a batch (walking the batches in order, a batch pairs with the next from another
    worker, and both are used up), so their ratios are independent draws, and the median's
    sampling variance comes off each pair's square."""
    ratios: dict[tuple[int, int], list[float]] = {}
    i = 0
    while i < len(logs) - 1:
        (a, x), (b, y) = logs[i], logs[i + 1]
        if a == b:
            i += 1
            continue
        key, ratio = ((a, b), y - x) if a < b else ((b, a), x - y)
        ratios.setdefault(key, []).append(ratio)
        i += 2
    workers = len({w for w, _ in logs})
    pairs = workers * (workers - 1) // 2
    if len(ratios) < pairs:
        return math.inf  # some pair of workers never ran next to each other: nothing to say
    squares = sum(max(statistics.median(r) ** 2 - _median_variance(r), 0.0) for r in ratios.values())
    return squares / workers


def _median_variance(values: list[float]) -> float:
    """Sampling variance of the median of `values`, pi/2 times a normal mean's, from their
    robust spread: a pair that straddles the start of a busy stretch is one ratio of 2x among
    ratios of a few %, and a plain variance would let it hide a real offset."""
    if len(values) < 2:
        return 0.0
    centre = statistics.median(values)
    sd = statistics.median(abs(v - centre) for v in values) * 1.4826
    return math.pi / 2 * sd * sd / len(values)


def seed_of(baseline: Measurement, candidate: Measurement, spread: WorkerSpread) -> int:
    """A seed that is a function of the inputs alone: anyone holding the raw samples (the
    publishing stage, a reviewer) re-derives the very same interval."""
    text = repr(
        (
            baseline.samples_us,
            baseline.batch_sizes,
            baseline.batch_workers,
            candidate.samples_us,
            candidate.batch_sizes,
            candidate.batch_workers,
            spread.log_sd,
            spread.df,
        )
    )
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _bootstrap_medians(m: Measurement, rng: random.Random, resamples: int) -> list[float]:
    """Medians of `resamples` block-bootstrap resamples: whole batches drawn with replacement
    (a batch's calls are not independent of each other, its moment is)."""
    # One batch says nothing about the spread between batches: then fall back to the calls.
    sizes = m.sizes if len(m.sizes) >= 2 else (1,) * m.n
    batches = len(sizes)
    batch_index = [b for b, size in enumerate(sizes) for _ in range(size)]
    order = sorted(range(m.n), key=m.samples_us.__getitem__)  # stable, as a mergesort
    ordered = [m.samples_us[i] for i in order]
    batch_of = [batch_index[i] for i in order]
    draw = rng.random
    # Weighted median of the sorted samples, each weighted by how often its batch was drawn:
    # the first sorted index whose cumulative weight reaches half the total. With prefix
    # counts per batch, that is a binary search of ~log2(n) dot products of B counts instead
    # of a running sum over all n samples (1,000 samples in 100 batches: 3x faster).
    prefix = _prefix_counts(batch_of, batches) if m.n * batches <= 400_000 else None
    out = []
    for _ in range(resamples):
        counts = [0] * batches
        # int(draw() * batches), `batches` times, looped in C (2x faster than in bytecode).
        for picked in map(int, map(mul, starmap(draw, repeat((), batches)), repeat(batches))):
            counts[picked] += 1
        if prefix is None:
            cum = list(accumulate(map(counts.__getitem__, batch_of)))
            out.append(ordered[bisect_left(cum, cum[-1] / 2)])
            continue
        half = sum(map(mul, counts, prefix[-1])) / 2
        lo, hi = 0, m.n - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(map(mul, counts, prefix[mid])) >= half:
                hi = mid
            else:
                lo = mid + 1
        out.append(ordered[lo])
    return out


def _prefix_counts(batch_of: list[int], batches: int) -> list[tuple[int, ...]]:
    """For each sorted index i, how many samples of each batch are at or before i."""
    running, out = [0] * batches, []
    for b in batch_of:
        running[b] += 1
        out.append(tuple(running))
    return out


# With one or two degrees of freedom t's tails are Cauchy-like: among 2000 draws one of some
# thousands comes up often, and exp() of it overflows. A factor of e^50 is past any interval's
# meaning, and capping the few draws beyond it moves no percentile the interval reads.
LOG_FACTOR_CAP = 50.0


def _capped(log_factor: float) -> float:
    return max(-LOG_FACTOR_CAP, min(LOG_FACTOR_CAP, log_factor))


def _student_t(rng: random.Random, df: int) -> float:
    """One draw of Student's t from `rng.random` alone (its stream is the same on every
    Python): a normal over the root of a chi-square / df, the chi-square summed for small df
    and by Wilson and Hilferty's cube above 30 (error under 1e-3 there)."""

    def normal() -> float:
        return math.sqrt(-2.0 * math.log(1.0 - rng.random())) * math.cos(2.0 * math.pi * rng.random())

    z = normal()
    if df <= 30:
        chi2 = sum(normal() ** 2 for _ in range(df))
    else:
        c = 2.0 / (9.0 * df)
        chi2 = df * max(1.0 - c + normal() * math.sqrt(c), 1e-6) ** 3
    return z / math.sqrt(max(chi2, 1e-300) / df)


def speedup(
    baseline: Measurement,
    candidate: Measurement,
    min_speedup: float = DEFAULTS.min_speedup,
    level: float = 0.95,
    resamples: int = 2000,
    spread: WorkerSpread = WorkerSpread(),
) -> Speedup:
    """Ratio of medians with a percentile (block-)bootstrap confidence interval.

    A speedup is claimed only when the whole interval clears `min_speedup`; a slowdown only
    when it lies below 1/min_speedup; anything else is 'no significant difference' (an A/A
    run of a kernel against itself lands there).

    Batches of one worker process share that process's offset, which no resampling of them
    can see: on the H200 the processes of one run timing a 5 us kernel have medians 2 % apart
    (docs/benchmark.md), enough to call a copy of a kernel faster than itself. So each
    resample is also moved by a draw of the offset between the two sides' workers, from the
    `spread` measured between workers of the same code, with Student's t for its few
    degrees of freedom.
    """
    rng = random.Random(seed_of(baseline, candidate, spread))
    ratio = baseline.median_us / candidate.median_us
    boots = [
        b / c
        for b, c in zip(_bootstrap_medians(baseline, rng, resamples), _bootstrap_medians(candidate, rng, resamples))
    ]
    if spread.df > 0 and spread.log_sd > 0:
        scale = spread.log_sd * math.sqrt(1 / baseline.workers + 1 / candidate.workers)
        boots = [b * math.exp(_capped(scale * _student_t(rng, spread.df))) for b in boots]
    boots.sort()
    low, high = percentile_interval(boots, level)
    verdict = significance(low, high, min_speedup, min(baseline.n, candidate.n))
    return Speedup(ratio, low, high, level, verdict, baseline, spread.log_sd, spread.df, resamples)


def percentile_interval(sorted_boots: Sequence[float], level: float) -> tuple[float, float]:
    """The `level` percentile interval of sorted bootstrap ratios (stage 2's vectorised twin,
    bot.github.bootstrap, reads its interval here too)."""
    last = len(sorted_boots) - 1
    tail = (1 - level) / 2
    return float(sorted_boots[int(math.floor(tail * last))]), float(sorted_boots[int(math.ceil((1 - tail) * last))])


def significance(low: float, high: float, min_speedup: float, fewest_samples: int) -> str:
    """ "faster" where the whole interval clears `min_speedup`, "slower" where it lies below
    1/min_speedup, else "no significant difference" (always, with one call on a side)."""
    if fewest_samples < 2:
        return "no significant difference"  # one call on a side bounds nothing
    if low >= min_speedup:
        return "faster"
    if high <= 1 / min_speedup:
        return "slower"
    return "no significant difference"


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None
