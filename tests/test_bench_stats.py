"""Statistics of the benchmark: A/A says 'no difference', a 2x slowdown is detected."""

from __future__ import annotations

import random

import pytest

from bot.bench import converged, geomean, speedup
from bot.domain import Measurement


def _noisy(median: float, n: int, rng: random.Random, spread: float = 0.03) -> Measurement:
    return Measurement(tuple(median * (1 + rng.gauss(0, spread)) for _ in range(n)))


def test_a_against_a_is_no_significant_difference():
    rng = random.Random(1)
    for trial in range(20):
        a, b = _noisy(100.0, 60, rng), _noisy(100.0, 60, rng)
        result = speedup(a, b, min_speedup=1.05, seed=trial)
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
