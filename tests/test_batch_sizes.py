"""The parent's own samples and the batch sizes it draws from them (bot.engine.timing.outside_clock)."""

from __future__ import annotations

import random

import pytest

from bot.engine.timing.outside_clock import FLOOR_US, batch_sample_us, next_batch_size, per_call_estimate


def test_a_sample_is_the_span_less_the_harness_per_call_and_never_below_the_floor():
    assert batch_sample_us(span_us=1_300.0, harness_us=300.0, calls=10) == 100.0
    assert batch_sample_us(span_us=250.0, harness_us=300.0, calls=10) == FLOOR_US


def test_one_slowed_batch_sizes_no_more_than_the_batch_after_it():
    # A 0.3 s warm-up call, then calls of 40 us: the next batch's size follows the latter.
    samples = [300_000.0, 41.0]
    assert per_call_estimate(samples) == 41.0
    assert per_call_estimate([40.0, 41.0, 400.0, 42.0, 43.0, 44.0]) == 41.0  # the latest five
    sizes = {next_batch_size(per_call_estimate(samples), 10_000.0, 50, random.Random(s)) for s in range(20)}
    assert min(sizes) >= 25, sizes


def test_batch_sizes_are_drawn_around_the_target_and_within_the_cap():
    rng = random.Random(7)
    below_cap = [next_batch_size(1_000.0, 10_000.0, 50, rng) for _ in range(400)]
    assert set(below_cap) <= set(range(5, 16)) and len(set(below_cap)) >= 8, sorted(set(below_cap))
    at_cap = [next_batch_size(10.0, 10_000.0, 50, rng) for _ in range(400)]
    assert set(at_cap) <= set(range(25, 51)) and len(set(at_cap)) >= 15, sorted(set(at_cap))
    assert {next_batch_size(50_000.0, 10_000.0, 50, rng) for _ in range(50)} == {1}
    assert {next_batch_size(1.0, 10_000.0, 1, rng) for _ in range(50)} == {1}


def test_what_is_subtracted_from_samples_is_the_fastest_calibration_not_a_busy_moments():
    from bot.engine.timing.harness_cost import Calibration

    low, usual = Calibration(low=True), Calibration()
    for calibration in (low, usual):
        calibration.set_fixed([100.0, 5_000.0, 110.0])  # one busy single
        for measured in (300.0, 20_100.0, 400.0):  # one busy round of 10 calls
            calibration.add_round(10, measured)
    # A batch the size of the rounds is expected to cost what the chosen round cost.
    assert low.of(10)[0] == 300.0
    assert usual.of(10)[0] == 400.0


def test_a_batch_of_a_few_slow_calls_is_expected_to_cost_what_its_rounds_cost():
    # tall_matmul on an H100: the harness's work was 1,600 us around one call and 6,100 us
    # around four. Batches of one to four calls must be expected at those costs, or a contender's
    # hidden time drowns under the difference (the part per call was divided by n, not n - 1).
    from bot.engine.timing.harness_cost import Calibration

    calibration = Calibration()
    calibration.set_fixed([1_600.0, 1_610.0, 1_590.0])
    for measured in (6_100.0, 6_070.0, 6_130.0):
        calibration.add_round(4, measured)
    assert calibration.of(1)[0] == 1_600.0
    assert calibration.of(4)[0] == 6_100.0
    assert calibration.of(2)[0] == 3_100.0
    with pytest.raises(ValueError):
        calibration.add_round(1, 2_230.0)  # one call measures the fixed part again, not a slope


class _Reference:
    device = "cpu"


def test_no_batch_is_costed_before_the_harness_has_measured_its_part_per_call():
    # Rounds come among the contenders' batches in random order: a batch costed before the
    # first one was charged one call's harness work whatever its calls (scale_add on 2 vCPUs:
    # 30 us a call where the rounds said 140), and its sample rose by as much.
    from bot.engine.timing.harness_cost import HarnessCost

    class Stubbed(HarnessCost):
        asked: list[int] = []

        def _stub_batch(self, n: int) -> tuple[float, float, float]:
            self.asked.append(n)
            cost = 100.0 + 50.0 * (n - 1)
            return cost, 10.0 * n, cost + 10.0 * n

    meta = [{"shape": [4], "dtype": "float32"}]
    harness = Stubbed(_Reference(), meta, 16, "latency", random.Random(1), 10.0)
    assert harness.span_of(4)[0] == pytest.approx(110.0 + 3 * 60.0)  # a single, and three calls more
    assert harness.of(4)[0] == pytest.approx(250.0)
    assert harness.staging_of(4)[0] == pytest.approx(40.0)
    assert harness.asked == [1] * HarnessCost.REPEATS + [4]  # the singles, then one round
    harness.measure_round(8)  # later rounds come as the timing visits them, not per batch
    harness.of(8)
    assert harness.asked[-1] == 8 and len(harness.asked) == HarnessCost.REPEATS + 2
