"""Stage 2's vectorised re-derivation (bot.github.bootstrap) is stage 1's `bot.core.stats.speedup`:
the same draws, the same medians to the bit, the same intervals to rounding, the same verdicts."""

from __future__ import annotations

import math
import random

from stage_two_artifacts import honest_results

from bot.core import stats as bench
from bot.core.measurement import Measurement
from bot.core.results import Results
from bot.github import bootstrap


def _measurement(rng: random.Random, batches: int, per_batch: int, workers: int, ties: bool) -> Measurement:
    sizes = [rng.randint(1, per_batch) for _ in range(batches)]
    if ties:  # one value a batch, as the parent's clock gives them on the CPU
        samples = [v for size in sizes for v in [round(rng.uniform(90, 110), 1)] * size]
    else:
        samples = [rng.uniform(50, 150) for _ in range(sum(sizes))]
    return Measurement(tuple(samples), tuple(sizes), tuple(i % workers for i in range(batches)))


def _cases(count: int):
    rng = random.Random(20261206)
    for k in range(count):
        ties = k % 3 == 0
        base = _measurement(rng, rng.choice([1, 2, 3, 8, 50, 300]), rng.choice([1, 5, 40]), rng.choice([1, 2, 3]), ties)
        cand = _measurement(rng, rng.choice([1, 2, 8, 100]), rng.choice([1, 5, 30]), 2, ties)
        yield base, cand, bench.WorkerSpread(rng.choice([0.0, 0.005, 0.03]), rng.choice([0, 2, 5, 30, 31, 400]))


def test_the_medians_are_stage_ones_to_the_bit_and_leave_the_generator_where_it_would_be():
    big = Measurement(tuple(float(i % 997) for i in range(40_000)), (20,) * 2_000, (0, 1) * 1_000)  # n * B > 400k
    for m in [c[0] for c in _cases(12)] + [big]:
        pure, fast = random.Random(7), random.Random(7)
        assert bootstrap.bootstrap_medians(m, fast, 300).tolist() == bench._bootstrap_medians(m, pure, 300)
        assert fast.getstate() == pure.getstate()


def test_the_vectorised_speedup_is_stage_ones():
    for base, cand, spread in _cases(40):
        try:
            pure = bench.speedup(base, cand, 1.05, spread=spread)
        except OverflowError:  # stage 1 could not have written this one: tested below
            continue
        fast = bootstrap.speedup(base, cand, 1.05, spread=spread)
        assert fast.significance == pure.significance and fast.ratio == pure.ratio
        for got, want in ((fast.ci_low, pure.ci_low), (fast.ci_high, pure.ci_high)):
            assert math.isclose(got, want, rel_tol=1e-12), (got, want)


def test_a_spread_of_cauchy_tails_gives_stage_ones_interval():
    """One degree of freedom and a 14x log scale: t's tails would overflow exp(); both stages
    cap the factor alike, and stage 2 re-derives the interval stage 1 wrote."""
    results = honest_results()
    shape = results["problems"][0]["attempts"][0]["shapes"][0]
    shape["derivation"].update(spread_log_sd=10.0, spread_df=1)
    parsed = Results.from_json(results).problems[0].attempts[0].shapes[0]
    args = (parsed.derivation.baseline, parsed.measurement.samples)
    wide = bench.WorkerSpread(10.0, 1)
    stage_one, stage_two = bench.speedup(*args, spread=wide), bootstrap.speedup(*args, spread=wide)
    assert math.isfinite(stage_one.ci_high) and stage_one.ci_low > 0
    assert stage_two.ratio == stage_one.ratio
    for got, want in ((stage_two.ci_low, stage_one.ci_low), (stage_two.ci_high, stage_one.ci_high)):
        assert math.isclose(got, want, rel_tol=1e-12), (got, want)
