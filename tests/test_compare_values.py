"""compare_values: the numbers it reports are the float64 ones, whatever precision it works in."""

from __future__ import annotations

import torch

from bot.verify import compare_values


def _float64_errors(ref: torch.Tensor, out: torch.Tensor) -> tuple[float, float]:
    r, o = ref.double(), out.double()
    return float((o - r).abs().max()), float((o - r).norm() / r.norm())


def test_half_precision_errors_match_a_float64_computation():
    torch.manual_seed(0)
    ref = torch.randn(256, 512) * 3 + 1
    out = (ref + 2e-3 * torch.randn(256, 512)).to(torch.bfloat16)
    result = compare_values(ref, out, "bfloat16", None, "x")
    max_abs, norm_rel = _float64_errors(ref, out)
    assert result.passed
    assert abs(result.details["max_abs_err"] - max_abs) <= 1e-6 * max_abs
    assert abs(result.details["norm_rel_err"] - norm_rel) <= 1e-5 * norm_rel


def test_a_tight_override_on_a_half_output_is_judged_in_float64():
    torch.manual_seed(1)
    ref = torch.randn(4096, dtype=torch.float64)
    out = (ref.float() + 1e-8).to(torch.bfloat16).to(torch.float32)  # exact values of bf16
    tight = {"norm_rel": 1e-9, "elem_rtol": 1e-9, "elem_atol_rel": 1e-9}
    result = compare_values(ref, out.to(torch.bfloat16), "bfloat16", tight, "x")
    assert not result.passed
    _, norm_rel = _float64_errors(ref, out)
    assert abs(result.details["norm_rel_err"] - norm_rel) <= 1e-9 * norm_rel


def test_nonfinite_positions_must_agree_and_are_excluded_from_errors():
    ref = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
    same = compare_values(ref, ref.to(torch.bfloat16), "bfloat16", None, "x")
    assert same.passed and same.details["max_abs_err"] == 0.0
    moved = ref.clone()
    moved[1], moved[2] = 2.0, float("nan")
    result = compare_values(ref, moved.to(torch.bfloat16), "bfloat16", None, "x")
    assert not result.passed and "NaN positions differ" in result.evidence and "(1,)" in result.evidence


def test_gross_hiding_rejects_and_less_is_counted_into_the_times():
    from bot.verify import check_hidden_time, hidden_time

    reported, harness, noise = [100.0] * 9, [40.0] * 9, [3.0] * 9
    honest = hidden_time([1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 0.0, 1.5, -0.5], reported, harness, noise)
    assert check_hidden_time(honest).passed and honest.counted_us == 0.0
    # half the 100 us call, a quarter of the harness's 40 us, three times the noise of a median of nine
    assert 60.0 + 3 * 1.0 < honest.allowed_us < 60.0 + 3 * 2.5
    halved = hidden_time([100.0, 102.0, 99.0, 101.0, 100.0, 98.0, 103.0, 100.0, 100.0], reported, harness, noise)
    check = check_hidden_time(halved)
    assert not check.passed and check.details["hidden_us_per_call"] == 100.0 and "tampered" in check.evidence
    # A thin slice out of the calibration's noise: not rejected, counted into the times instead.
    shaved = hidden_time([5.0] * 9, reported, harness, noise)
    assert check_hidden_time(shaved).passed and shaved.counted_us == 5.0


def test_a_contender_cannot_widen_what_is_counted_by_scattering_its_batches():
    from bot.verify import hidden_time

    scattered = hidden_time([0.0, 200.0, 40.0, 180.0, 40.0, 10.0, 190.0, 40.0, 40.0], [1000.0] * 9,
                            [40.0] * 9, [3.0] * 9)
    assert scattered.noise_us > 10.0  # its own scatter widens the rejection bound ...
    assert scattered.counted_us == 40.0  # ... not what is counted


def test_candidates_are_held_to_the_baselines_unexplained_time_and_the_baseline_counts_nothing():
    from types import SimpleNamespace

    from bot.verify import hidden_time_checks

    def record(unexplained):
        return SimpleNamespace(unexplained_us=unexplained, reported_us=[100.0] * 6,
                               harness_us=[40.0] * 6, noise_us=[2.0] * 6)

    found = hidden_time_checks({"base": record([30.0] * 6), "twin": record([31.0, 29.0, 30.0, 32.0, 30.0, 28.0]),
                                "cheat": record([55.0] * 6)}, "base")
    assert found["base"].hidden_us == 30.0 and found["base"].counted_us == 0.0
    assert abs(found["twin"].hidden_us) < 1.0 and found["twin"].counted_us == 0.0
    assert found["cheat"].hidden_us == 25.0 and found["cheat"].counted_us == 25.0
    assert hidden_time_checks({"x": record([])}, None) == {}
