"""Stage 2's vectorised re-derivation (bot.github.bootstrap) is stage 1's `bot.core.stats.speedup`:
the same draws, the same medians to the bit, the same intervals to rounding, the same verdicts."""

from __future__ import annotations

import math
import random

import pytest
from stage_two_artifacts import honest_results

from bot.core import stats as bench
from bot.core.errors import BotError
from bot.core.measurement import Measurement
from bot.core.results import Results
from bot.github import bootstrap
from bot.github.publish import stage_two_plan


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


def test_a_spread_stage_one_would_overflow_on_is_inconsistent():
    results = honest_results()
    shape = results["problems"][0]["attempts"][0]["shapes"][0]
    shape["derivation"].update(spread_log_sd=10.0, spread_df=1)  # Cauchy draws times a 14x log scale
    derivation = Results.from_json(results).problems[0].attempts[0].shapes[0].derivation
    with pytest.raises(OverflowError):  # stage 1's own function fails on these inputs
        bench.speedup(
            derivation.baseline,
            Results.from_json(results).problems[0].attempts[0].shapes[0].measurement.samples,
            spread=bench.WorkerSpread(10.0, 1),
        )
    staged = stage_two_plan(Results.from_json(results), _trigger(), _NoReader(), _settings(), lambda _: True)
    assert staged.plan is None and staged.reason == (
        "results.problems[0].attempts[0].shapes[0]: its samples and worker spread give no finite interval"
    )


def _trigger():
    from bot.core.domain import Trigger

    return Trigger(kind="pull_request", repo="o/r", pr_number=1, head_sha="a" * 40, head_ref="x", head_repo="o/r")


def _settings():
    from bot.core.settings import Settings

    return Settings()


class _NoReader:
    def file_at(self, path: str, ref: str) -> bytes | None:
        raise BotError("no file is read for an inconsistent artifact")

    def tree_modes(self, path: str, ref: str) -> tuple[str, ...] | None:
        raise BotError("no tree is read for an inconsistent artifact")
