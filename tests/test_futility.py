"""Futility: a candidate stops being timed once it can no longer be selected, never before,
and what it is then credited with comes from the batches that stopped it."""

from __future__ import annotations

import random
import time

import pytest
from test_timing_protocol import _time, _Worker, parent_clock  # noqa: F401  (the stand-ins' clock)

from bot.core import stats as bench
from bot.engine.timing.futility import Futility, bar, first_batches
from bot.engine.timing.records import TimingOptions, TimingRecord

pytestmark = pytest.mark.timing  # asserts what real timing claims: run alone, not beside other tests


def _round(
    records: dict[str, TimingRecord],
    medians: dict[str, float],
    rng: random.Random,
    workers: int = 2,
    calls: int = 20,
    noise: float = 0.10,
) -> None:
    """One interleaved round: a batch from every worker of every contender, all batches of the
    round moved by one shared factor (a busy host) and each by its own noise."""
    moment = 1 + rng.uniform(0, 0.5)
    for name, median in medians.items():
        for w in range(workers):
            level = median * moment * (1 + rng.gauss(0, noise / 2))
            records[name].samples_us.extend(level * (1 + rng.gauss(0, noise)) for _ in range(calls))
            records[name].batch_sizes.append(calls)
            records[name].batch_workers.append(w)


def _run(medians: dict[str, float], seed: int, below: float, rounds: int = 30):
    """The rounds each contender was timed for, with the futility look after each round."""
    rng = random.Random(seed)
    records = {n: TimingRecord() for n in medians}
    futility = Futility("base", below, 1.05)
    active = {n: (None, None) for n in medians}
    timed = dict.fromkeys(medians, 0)
    for _ in range(rounds):
        if not active:
            break
        _round(records, {n: medians[n] for n in active}, rng)
        for n in active:
            timed[n] += 1
        for n in futility(records, active):
            del active[n]
    return timed, futility


def test_a_clear_loser_stops_at_the_first_look_and_a_winner_never_does():
    for seed in range(20):
        timed, futility = _run({"base": 100.0, "loser": 140.0, "winner": 80.0}, seed, bar(1.05, 1))
        assert timed["loser"] == 3, (seed, timed)  # six batches on two workers: the first look
        assert timed["winner"] == 30 and timed["base"] == 30  # a 1.25x candidate is timed to the end
        assert set(futility.stopped) == {"loser"}


def test_a_candidate_just_past_the_bar_is_timed_to_the_end():
    # A true 1.10x gain against a 1.05 bar, with 10 % noise per call and per batch.
    stopped = sum(bool(_run({"base": 110.0, "gain": 100.0}, seed, bar(1.05, 1))[1].stopped) for seed in range(20))
    assert stopped == 0


def test_with_several_shapes_only_a_significant_loss_stops_a_candidate():
    # 5 % slower on this shape: alone it can never clear 1.05, so it stops; with several shapes
    # the others could still pay for it (it is not significantly slower), so it is timed on.
    assert bar(1.05, 1) == 1.05 and abs(bar(1.05, 3) - 1 / 1.05) < 1e-12
    runs = {
        shapes: sum(
            bool(_run({"base": 100.0, "behind": 100 / 0.95}, seed, bar(1.05, shapes))[1].stopped) for seed in range(20)
        )
        for shapes in (1, 2)
    }
    assert runs[1] >= 15 and runs[2] <= 1, runs


def test_the_baseline_stops_when_no_candidate_is_left():
    timed, _ = _run({"base": 100.0, "loser": 200.0}, 0, bar(1.05, 1))
    assert timed == {"base": 3, "loser": 3}
    timed, _ = _run({"base": 100.0}, 0, bar(1.05, 1))  # nothing to compare: never a look
    assert timed == {"base": 30}


def test_a_stopped_candidate_is_compared_with_the_baseline_of_its_own_rounds():
    rng = random.Random(1)
    records = {n: TimingRecord() for n in ("base", "loser")}
    futility = Futility("base", bar(1.05, 1), 1.05)
    active = {"base": (None, None), "loser": (None, None)}
    for _ in range(3):
        _round(records, {"base": 100.0, "loser": 150.0}, rng)
    assert futility(records, active) == {"loser", "base"}
    # The host then slows down 3x for the baseline's later rounds (had it gone on timing):
    for _ in range(10):
        _round(records, {"base": 300.0}, rng)
    base = records["base"].measurement()
    against = futility.baseline_for("loser", base)
    assert against.batch_sizes == base.batch_sizes[:6] and against.samples_us == base.samples_us[:120]
    assert futility.baseline_for("someone else", base) is base
    sp = bench.speedup(against, records["loser"].measurement(), 1.05)
    assert 0.6 < sp.ratio < 0.75 and sp.significance == "slower" and sp.ci_high < 1.05
    assert bench.speedup(base, records["loser"].measurement(), 1.05).ratio > 1.5  # what it would have claimed


def test_first_batches_keeps_samples_sizes_and_workers_together():
    record = TimingRecord(samples_us=[1.0, 2.0, 3.0, 4.0, 5.0], batch_sizes=[2, 3], batch_workers=[0, 1])
    m = first_batches(record.measurement(), 1)
    assert m.samples_us == (1.0, 2.0) and m.batch_sizes == (2,) and m.batch_workers == (0,)


def test_the_protocol_stops_timing_a_loser_and_times_a_winner_to_the_cap():
    options = TimingOptions(time_cap_s=0.6, min_batches=6, target_rel_se=-1.0, batch_target_us=2_000)
    futility = Futility("base", bar(1.05, 1), 1.05)
    workers = {
        "base": (_Worker(400.0), _Worker(400.0)),
        "fast": (_Worker(200.0), _Worker(200.0)),
        "slow": (_Worker(800.0), _Worker(800.0)),
    }
    records = _time(workers, options, keep=frozenset({"base"}), stop=futility)
    batches = {n: len(r.batch_sizes) for n, r in records.items()}
    assert batches["slow"] == 6 and set(futility.stopped) == {"slow"}
    assert batches["fast"] == batches["base"] > 6  # the claim's rounds: the cap, as without a look


def test_the_protocol_ends_as_soon_as_its_only_candidate_is_stopped():
    options = TimingOptions(time_cap_s=5.0, min_batches=6, target_rel_se=-1.0, batch_target_us=2_000)
    workers = {"base": (_Worker(400.0), _Worker(400.0)), "slow": (_Worker(800.0), _Worker(800.0))}
    started = time.monotonic()
    records = _time(workers, options, keep=frozenset({"base"}), stop=Futility("base", bar(1.05, 1), 1.05))
    assert time.monotonic() - started < 2.0  # not the 5 s cap
    assert {n: len(r.batch_sizes) for n, r in records.items()} == {"base": 6, "slow": 6}
