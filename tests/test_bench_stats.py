"""Statistics of the benchmark: A/A says 'no difference', a 2x slowdown is detected."""

from __future__ import annotations

import math
import random

import pytest

from bot.core.measurement import Measurement
from bot.core.stats import WorkerSpread, converged, geomean, speedup, worker_spread


def _noisy(median: float, n: int, rng: random.Random, spread: float = 0.03) -> Measurement:
    return Measurement(tuple(median * (1 + rng.gauss(0, spread)) for _ in range(n)))


def test_a_against_a_is_no_significant_difference():
    rng = random.Random(1)
    for _trial in range(20):
        a, b = _noisy(100.0, 60, rng), _noisy(100.0, 60, rng)
        result = speedup(a, b, min_speedup=1.05)
        assert result.significance == "no significant difference"
        assert result.ci_low < 1.0 < result.ci_high or abs(result.ratio - 1) < 0.02


def test_two_times_slower_is_detected_and_faster_is_claimed():
    rng = random.Random(2)
    base, slow, fast = _noisy(100.0, 40, rng), _noisy(200.0, 40, rng), _noisy(50.0, 40, rng)
    slower = speedup(base, slow)
    assert slower.significance == "slower" and slower.ci_high < 0.6
    faster = speedup(base, fast)
    assert faster.significance == "faster" and 1.8 < faster.ci_low <= faster.ratio <= faster.ci_high


def test_small_true_gain_below_threshold_is_not_claimed():
    rng = random.Random(3)
    result = speedup(_noisy(103.0, 200, rng, 0.01), _noisy(100.0, 200, rng, 0.01), min_speedup=1.05)
    assert result.significance == "no significant difference"


def test_measurement_keeps_raw_samples_and_derives_statistics():
    m = Measurement((1.0, 2.0, 3.0, 4.0, 100.0))
    assert m.samples_us == (1.0, 2.0, 3.0, 4.0, 100.0)
    assert m.median_us == 3.0 and m.iqr_us == pytest.approx(2.0)
    assert not converged(m, 0.01, 10)
    tight = Measurement(tuple(100.0 + 0.01 * i for i in range(50)))
    assert converged(tight, 0.01, 10)


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None


def _batched(
    median: float, batches: int, size: int, rng: random.Random, between: float = 0.06, within: float = 0.002
) -> Measurement:
    """Timings whose batches each sit at their own level (a clock or host state that lasts
    a batch), with little noise inside a batch: what a launch-bound GPU shape looks like."""
    samples = []
    for _ in range(batches):
        level = median * (1 + rng.gauss(0, between))
        samples.extend(level * (1 + rng.gauss(0, within)) for _ in range(size))
    return Measurement(tuple(samples), (size,) * batches)


def test_correlated_batches_make_no_false_claims_where_calls_alone_would():
    rng = random.Random(4)
    false_as_batches = false_as_calls = 0
    for _trial in range(20):
        a, b = _batched(100.0, 3, 50, rng, 0.08), _batched(100.0, 3, 50, rng, 0.08)
        if speedup(a, b).significance != "no significant difference":
            false_as_batches += 1
        # The same samples, treated as independent calls: the interval is far too narrow.
        flat = speedup(Measurement(a.samples_us), Measurement(b.samples_us))
        if flat.significance != "no significant difference":
            false_as_calls += 1
    assert false_as_batches <= 2
    assert false_as_calls >= 6  # why batches matter: the per-call bootstrap is fooled


def test_batched_speedup_still_detects_a_real_gain():
    rng = random.Random(5)
    result = speedup(_batched(150.0, 10, 30, rng, between=0.02), _batched(100.0, 10, 30, rng, between=0.02))
    assert result.significance == "faster" and result.ci_low > 1.3


def test_rel_se_counts_the_spread_between_batches():
    rng = random.Random(6)
    m = _batched(100.0, 8, 50, rng)
    assert m.rel_se > 0.01  # 6 % between batches, 8 batches: the median is not known to 1 %
    assert Measurement(m.samples_us).rel_se < 0.01  # the per-call estimate alone claims it is
    assert not converged(m, 0.01, 10, min_batches=6)
    steady = _batched(100.0, 8, 50, rng, between=0.001)
    assert converged(steady, 0.01, 10, min_batches=6)
    assert not converged(steady, 0.01, 10, min_batches=9)


def test_batch_sizes_must_cover_the_samples():
    with pytest.raises(ValueError):
        Measurement((1.0, 2.0, 3.0), (2, 2))


def test_a_single_call_on_either_side_claims_nothing():
    assert speedup(Measurement((1000.0,)), Measurement((1.0, 1.1, 0.9))).significance == "no significant difference"
    one_batch = Measurement((100.0, 101.0, 99.0, 100.5), (4,))  # falls back to the calls
    result = speedup(one_batch, Measurement((50.0, 50.5, 49.5, 50.2), (4,)))
    assert result.significance == "faster" and result.ci_low < result.ci_high


def _in_workers(
    median: float, offsets: list[float], rng: random.Random, batches: int = 6, size: int = 30, within: float = 0.003
) -> Measurement:
    """Batches from one worker process per offset, visited in turn: each process runs the
    kernel at its own level (what fresh processes did on the H200's 5 us gelu decode)."""
    samples, sizes, workers = [], [], []
    for _ in range(batches):
        for w, offset in enumerate(offsets):
            samples.extend(median * offset * (1 + rng.gauss(0, within)) for _ in range(size))
            sizes.append(size)
            workers.append(w)
    return Measurement(tuple(samples), tuple(sizes), tuple(workers) if len(offsets) > 1 else ())


def test_worker_spread_pools_the_log_spread_of_each_contenders_workers():
    rng = random.Random(8)
    pair = _in_workers(100.0, [1.0, 1.1], rng, within=0.0)
    same = _in_workers(50.0, [1.0, 1.0], rng, within=0.0)
    alone = _in_workers(70.0, [1.3], rng, within=0.0)  # one worker: says nothing about workers
    assert pair.worker_medians == pytest.approx((100.0, 110.0)) and alone.workers == 1
    spread = worker_spread([pair, same, alone])
    assert spread.df == 2
    assert spread.log_sd == pytest.approx(math.log(1.1) / 2)
    assert worker_spread([alone]) == WorkerSpread(0.0, 0)


def test_contenders_that_agree_exactly_cannot_narrow_the_spread_under_the_baselines():
    rng = random.Random(10)
    baseline = _in_workers(100.0, [1.0, 1.1], rng, within=0.0)
    exact = [_in_workers(50.0, [1.0, 1.0], rng, within=0.0) for _ in range(5)]
    pooled = worker_spread([baseline, *exact])
    assert pooled.df == 6 and pooled.log_sd < math.log(1.1) / 2  # pulled down by the others
    floored = worker_spread([baseline, *exact], trusted=baseline)
    assert floored.df == 6 and floored.log_sd == pytest.approx(math.log(1.1) / math.sqrt(2))


def test_per_worker_offsets_fool_one_worker_each_but_not_replicas_with_their_spread():
    rng = random.Random(7)
    offset = lambda: math.exp(rng.gauss(0, 0.04))  # 4 % between processes of the same code
    fooled_alone = fooled_with_replicas = 0
    for _trial in range(20):
        a, b = _in_workers(5.0, [offset()], rng), _in_workers(5.0, [offset()], rng)
        if speedup(a, b).significance != "no significant difference":
            fooled_alone += 1
        a, b = (_in_workers(5.0, [offset(), offset()], rng) for _ in range(2))
        if speedup(a, b, spread=worker_spread([a, b])).significance != "no significant difference":
            fooled_with_replicas += 1
    assert fooled_alone >= 4  # why replicas matter: tight batches, wrong answer
    assert fooled_with_replicas == 0


def test_replicas_with_their_spread_still_detect_a_real_gain():
    rng = random.Random(9)
    offset = lambda: math.exp(rng.gauss(0, 0.04))
    found = 0
    for _trial in range(20):
        # As in a run: the spread is pooled over every contender timed (here four, df 4).
        base, fast, *others = (_in_workers(m, [offset(), offset()], rng) for m in (7.5, 5.0, 6.0, 8.0))
        spread = worker_spread([base, fast, *others])
        found += speedup(base, fast, spread=spread).significance == "faster"
    assert found >= 18


def test_a_wide_spread_with_one_degree_of_freedom_gives_an_interval_not_an_overflow():
    # t with one degree of freedom is Cauchy: of 2000 draws, one of thousands is common, and
    # e^(0.5 * 3000) overflows a float. Every seed must give a finite, ordered interval.
    rng = random.Random(11)
    wide = WorkerSpread(log_sd=0.5, df=1)
    for _trial in range(30):
        a, b = _noisy(100.0, 30, rng), _noisy(100.0, 30, rng)
        result = speedup(a, b, spread=wide)
        assert math.isfinite(result.ci_low) and math.isfinite(result.ci_high)
        assert 0 < result.ci_low < result.ratio < result.ci_high
        assert result.significance == "no significant difference"


def test_batch_workers_must_match_the_batches():
    with pytest.raises(ValueError):
        Measurement((1.0, 2.0, 3.0), (2, 1), (0,))


def test_batches_that_move_in_every_process_at_once_are_not_taken_for_a_process_offset():
    # On a busy 2-vCPU host whole stretches of batches ran 2x slower in every process at once:
    # the workers' medians then differ by chance, which the block bootstrap already counts.
    rng = random.Random(11)
    samples, sizes, workers = [], [], []
    for _ in range(8):
        for w in (0, 1):
            level = 100.0 * (2.0 if rng.random() < 0.3 else 1.0)
            samples.extend(level * (1 + rng.gauss(0, 0.01)) for _ in range(20))
            sizes.append(20)
            workers.append(w)
    m = Measurement(tuple(samples), tuple(sizes), tuple(workers))
    raw = abs(math.log(m.worker_medians[0] / m.worker_medians[1])) / math.sqrt(2)
    assert worker_spread([m]).log_sd < raw / 2


def test_a_process_offset_is_measured_through_stretches_of_load():
    # Workers 10 % apart, in rounds whose host load doubles every time for stretches of a few
    # rounds, at random: the offset comes from batches next to each other in time, where the
    # load is the same, not from medians that fall in either mode of the load by chance.
    rng = random.Random(12)
    samples, sizes, workers = [], [], []
    level = 1.0
    for _ in range(12):
        if rng.random() < 0.4:
            level = 3.0 - level  # 1 <-> 2
        for w in rng.sample([0, 1], 2):
            samples.extend(100.0 * level * (1.1 if w else 1.0) * (1 + rng.gauss(0, 0.01)) for _ in range(20))
            sizes.append(20)
            workers.append(w)
    m = Measurement(tuple(samples), tuple(sizes), tuple(workers))
    # Two workers, one degree of freedom: their logs sit log(1.1)/2 either side of the mean.
    assert worker_spread([m]).log_sd == pytest.approx(math.log(1.1) / math.sqrt(2), rel=0.35)


def _numpy_interval(baseline: Measurement, candidate: Measurement, resamples: int = 2000) -> tuple[float, float]:
    """The interval as bench.speedup computed it with numpy's generator (no worker spread)."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)

    def medians(m: Measurement):
        samples = np.asarray(m.samples_us, dtype=np.float64)
        sizes = m.sizes if len(m.sizes) >= 2 else (1,) * m.n
        order = np.argsort(samples, kind="stable")
        batch_of = np.repeat(np.arange(len(sizes)), sizes)[order]
        picks = rng.integers(0, len(sizes), size=(resamples, len(sizes)))
        counts = np.zeros((resamples, len(sizes)), dtype=np.int32)
        np.add.at(counts, (np.arange(resamples)[:, None], picks), 1)
        cum = np.cumsum(counts[:, batch_of], axis=1)
        return samples[order][(cum * 2 >= cum[:, -1:]).argmax(axis=1)]

    boots = np.sort(medians(baseline) / medians(candidate))
    return float(boots[int(math.floor(0.025 * (resamples - 1)))]), float(boots[int(math.ceil(0.975 * (resamples - 1)))])


def test_the_pure_python_interval_matches_the_numpy_one_it_replaced():
    # Different random streams, same estimator: bounds agree to Monte-Carlo error (a few % of the width).
    rng = random.Random(7)
    for _trial in range(5):
        base = Measurement(tuple(100 * (1 + rng.gauss(0, 0.03)) for _ in range(60)), (6,) * 10)
        cand = Measurement(tuple(80 * (1 + rng.gauss(0, 0.03)) for _ in range(60)), (6,) * 10)
        ours, theirs = speedup(base, cand), _numpy_interval(base, cand)
        width = theirs[1] - theirs[0]
        assert abs(ours.ci_low - theirs[0]) < 0.1 * width and abs(ours.ci_high - theirs[1]) < 0.1 * width, (
            ours,
            theirs,
        )


def test_the_interval_is_a_function_of_the_samples_alone(tmp_path):
    """Stage 2 re-derives stage 1's interval in another process, bit for bit."""
    import json
    import os
    import subprocess
    import sys

    rng = random.Random(3)
    base = Measurement(tuple(100 * (1 + rng.gauss(0, 0.03)) for _ in range(40)), (5,) * 8, (0, 1) * 4)
    cand = Measurement(tuple(70 * (1 + rng.gauss(0, 0.03)) for _ in range(40)), (5,) * 8, (0, 1) * 4)
    spread = worker_spread([base, cand], trusted=base)
    here = speedup(base, cand, spread=spread)
    code = (
        "import json, sys; from bot.core.stats import speedup, WorkerSpread; from bot.core.measurement import Measurement as M\n"  # noqa: E501
        "b, c, s = json.loads(sys.argv[1])\n"
        "r = speedup(M.from_samples_json(b), M.from_samples_json(c), spread=WorkerSpread(*s))\n"
        "print(json.dumps([r.ratio, r.ci_low, r.ci_high, 'numpy' in sys.modules]))"
    )
    arg = json.dumps([base.samples_json(), cand.samples_json(), [spread.log_sd, spread.df]])
    out = subprocess.run(
        [sys.executable, "-c", code, arg],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout
    assert json.loads(out) == [here.ratio, here.ci_low, here.ci_high, False]
