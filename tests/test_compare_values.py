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


def test_hidden_time_is_measured_against_the_baseline_or_the_lower_median_of_the_others():
    from bot.verify import hidden_time_checks

    host = {n: [100.0] * 4 for n in ("base", "a", "b", "cheat")}
    unexplained = {"base": [300.0] * 4, "a": [310.0, 290.0, 320.0, 305.0], "b": [330.0] * 4,
                   "cheat": [300.0 + 400.0] * 4}
    with_base = hidden_time_checks(unexplained, host, "base")
    assert "base" not in with_base and with_base["a"].passed and with_base["b"].passed
    # allowed: a quarter of the claimed 100 us, half the usual 300 us, and 50 us
    assert with_base["cheat"].details["allowed_us"] == 25.0 + 150.0 + 50.0
    assert not with_base["cheat"].passed and with_base["cheat"].details["hidden_us_per_call"] == 400.0
    # Without a baseline the yardstick is the lower median: two cheats of four cannot lift it.
    unexplained["b"] = [700.0] * 4
    alone = hidden_time_checks(unexplained, host, None)
    assert set(alone) == {"base", "a", "b", "cheat"}
    assert alone["base"].passed and alone["a"].passed
    assert not alone["b"].passed and not alone["cheat"].passed
    assert hidden_time_checks({"x": []}, {"x": []}, None) == {}
