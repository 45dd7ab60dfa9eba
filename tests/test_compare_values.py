"""compare_values: the numbers it reports are the float64 ones, whatever precision it works in."""

from __future__ import annotations

import re

import torch

from bot.protocol.values import compare_values


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


def _rows_of_scales(scales, width=256, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return torch.cat([torch.randn(1, width, generator=gen, dtype=torch.float64) * s for s in scales])


def test_a_tiny_row_is_judged_at_its_own_scale_not_the_outputs():
    # GELU-like output: rows of 128 beside rows of 1e-6. Flushing the tiny rows to zero is
    # 100 % wrong there, yet within 1 % of the output's max |ref|.
    ref = _rows_of_scales([128.0, 2.0**-20, 1.0, 0.0] * 4)
    flushed = ref.clone()
    flushed[ref.abs() < 1e-4] = 0
    result = compare_values(ref, flushed.to(torch.bfloat16), "bfloat16", None, "shape s, rows inputs")
    assert not result.passed
    assert "rows inputs" in result.evidence and "its row's max |ref|" in result.evidence
    row = int(re.search(r"element \((\d+),", result.evidence).group(1))
    assert row % 4 == 1, result.evidence  # one of the 1e-6 rows
    # The same error judged against the whole output's max (a row of one element each) passes.
    whole = compare_values(ref.reshape(-1, 1), flushed.reshape(-1, 1).to(torch.bfloat16), "bfloat16", None, "x")
    assert whole.passed


def test_honest_rounding_passes_in_every_row_and_an_all_zero_output_matches_zero():
    ref = _rows_of_scales([128.0, 2.0**-20, 1.0, 2.0**-10, 0.0] * 4)
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float32, "float32")):
        assert compare_values(ref, ref.to(dtype), name, None, "x").passed, name
    zeros = torch.zeros(16, 64, dtype=torch.float64)
    assert compare_values(zeros, zeros.float(), "float32", None, "x").passed
    # One step of float16's subnormals (6e-8) off an all-zero reference: what the dtype resolves.
    step = torch.full((16, 64), 2.0**-24, dtype=torch.float16)
    assert compare_values(zeros, step, "float16", None, "x").passed
    nonzero = compare_values(zeros, step * 16, "float16", None, "zeros inputs")
    assert not nonzero.passed and "zeros inputs" in nonzero.evidence
    assert not compare_values(zeros, torch.full((16, 64), 1e-30), "float32", None, "x").passed


def test_underflow_residue_passes_and_an_error_above_it_does_not():
    # An attention row whose every visible key is far below its max: the float64 reference is a
    # subnormal 1.2e-40, a bfloat16 kernel that keeps P in float32 until it rounds gets ~1.1e-38,
    # the smallest normal. Below 2^-100 no kernel's error is a mistake.
    ref = torch.full((4, 64), 1.0, dtype=torch.float64)
    ref[1] = 1.23311e-40
    out = ref.clone()
    out[1, 18] = 1.14794e-38
    for name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        assert compare_values(ref, out.to(dtype), name, None, "rows inputs").passed, name
    # Rows of 2^-20 (the smallest scale the inputs give a row) are judged at their own scale.
    small = ref.clone()
    small[1] = 2.0**-20
    off = small.clone()
    off[1, 18] *= 1.1
    assert not compare_values(small, off.float(), "float32", None, "rows inputs").passed
    # float64 outputs keep float64's own floor.
    assert not compare_values(ref, out, "float64", None, "x").passed


def test_rows_narrower_than_eight_are_judged_against_the_whole_output():
    # A per-row scale ([T, 1]) near zero by cancellation: its error is relative to the others'.
    ref = torch.tensor([[1.0], [2.0], [1e-6], [3.0]], dtype=torch.float64)
    out = ref.float() + torch.tensor([[0.0], [0.0], [1e-6], [0.0]])
    assert compare_values(ref, out, "float32", None, "x").passed
    # Eight wide, a row of 1e-6 off by 100 % is judged at its own scale.
    wide_ref = torch.cat([torch.full((1, 8), 3.0), torch.full((1, 8), 1e-6)]).double()
    wide_out = wide_ref.float() * torch.tensor([[1.0], [2.0]])
    assert not compare_values(wide_ref, wide_out, "float32", None, "x").passed
    assert compare_values(wide_ref.reshape(16, 1), wide_out.reshape(16, 1), "float32", None, "x").passed


def test_rmsnorm_without_eps_is_caught_on_tiny_rows():
    from bot.harness.inputs import transform

    gen = torch.Generator().manual_seed(3)
    x = transform([torch.randn(64, 256, generator=gen).to(torch.bfloat16)], "rows", 11)[0]
    nonzero = x.float().abs().amax(-1) > 0
    x = x[nonzero]  # zero rows give NaN without eps, caught by position; here the 1e-3 rows
    xf = x.double()
    ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
    no_eps = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True))).to(torch.bfloat16)
    with_eps = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16)
    assert compare_values(ref, with_eps, "bfloat16", None, "x").passed
    result = compare_values(ref, no_eps, "bfloat16", None, "shape small, rows inputs")
    assert not result.passed and "rows inputs" in result.evidence
    scale = x.float().abs().amax(-1)
    tiny = (scale < 2e-2) & (scale > 1e-4)  # the 2^-10 rows
    rel = ((no_eps.double() - ref).abs().amax(-1) / ref.abs().amax(-1))[tiny]
    assert float(rel.min()) > 0.4, rel  # each of them is off by far more than bfloat16 allows


def _in_chunks_and_whole(monkeypatch, ref, out, dtype, rule=None):
    """compare_values of the same output in chunks of a few rows and as one chunk."""
    from bot.protocol import values as compare

    whole = compare_values(ref, out, dtype, rule, "x")
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 3 * 64)
    chunked = compare_values(ref, out, dtype, rule, "x")
    monkeypatch.undo()
    return whole, chunked


def _same(whole, chunked):
    assert (chunked.passed, chunked.evidence) == (whole.passed, whole.evidence)
    for key in ("max_abs_err", "norm_rel_err", "mismatches"):
        if key in whole.details:
            assert abs(chunked.details[key] - whole.details[key]) <= 1e-6 * abs(whole.details[key]), (
                key
            )  # float32 sums: rounding


def test_an_output_compared_in_chunks_of_rows_gets_the_verdict_and_evidence_of_one_compared_whole(monkeypatch):
    from bot.core.tolerance import AllClose

    torch.manual_seed(3)
    ref = torch.randn(40, 64) * torch.logspace(-6, 2, 40)[:, None]
    honest = (ref + 1e-7 * ref.abs().amax(1, keepdim=True) * torch.randn(40, 64)).float()
    off_in_a_late_row = honest.clone()
    off_in_a_late_row[31, 7] += 1e-3 * ref[31].abs().max()
    coarse = (ref * (1 + 1e-3 * torch.randn(40, 64))).float()  # every element within bounds, not the norm
    nan_late = honest.clone()
    nan_late[37, 1] = float("nan")
    ref_nan = ref.clone()
    ref_nan[[2, 33], [5, 9]] = float("nan")
    nan_both = honest.clone()
    nan_both[[2, 33], [5, 9]] = float("nan")
    nan_both[33, 10] += 1e-3 * ref[33].abs().max()
    cases = [
        (ref, honest, "float32", None),
        (ref, off_in_a_late_row, "float32", None),
        (ref, coarse, "float32", {"elem_rtol": 1.0, "elem_atol_rel": 1.0}),
        (ref, nan_late, "float32", None),
        (ref_nan, nan_both, "float32", None),
        (ref.reshape(-1), off_in_a_late_row.reshape(-1), "float32", None),  # no rows: the output's scale
        (ref.float(), off_in_a_late_row, "float32", AllClose(atol=1e-4, rtol=1e-4, norm_abs=1e-4 * 64)),
        (torch.arange(40 * 64).reshape(40, 64), torch.arange(40 * 64).reshape(40, 64) % 2000, "int64", None),
    ]
    outcomes = []
    for ref_i, out_i, dtype, rule in cases:
        whole, chunked = _in_chunks_and_whole(monkeypatch, ref_i, out_i, dtype, rule)
        _same(whole, chunked)
        outcomes.append(whole.passed)
    assert outcomes == [True, False, False, False, False, False, False, False]


def test_a_large_output_is_compared_in_bounded_memory():
    # 32 M elements held to a tight float32 rule (worked in float64): whole-output buffers cost
    # a gigabyte beside the two 128 MiB tensors compared (1,023 MiB grown); in chunks of 4 M elements, 152 to 188 MiB.
    script = (
        "import resource, torch\n"
        "from bot.protocol.values import compare_values\n"
        "ref = torch.randn(8192, 4096); out = ref + 1e-9 * ref.abs()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "assert compare_values(ref, out, 'float32', None, 'x').passed\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    import subprocess
    import sys

    from conftest import ROOT

    grown_mib = int(
        subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    assert grown_mib < 512, grown_mib


def test_a_rule_past_the_dtypes_range_leaves_the_normwise_bound_to_decide():
    # A rule held to the problem's own error can ask for an elementwise multiple that float32
    # cannot hold (KernelBench's 4_Conv2d_Mish_Mish asked for 8e46 of a row's maximum): the
    # elementwise bound is then inf, and the normwise one decides; before, the comparison raised.
    from bot.core.tolerance import Tolerance

    rule = Tolerance(norm_rel=1e-3, elem_rtol=1e-4, elem_atol_rel=8e46)
    ref = torch.randn(16, 64, dtype=torch.float64)
    with_nan = ref.clone()
    with_nan[3, 5] = float("nan")  # the masked path: a non-finite reference element
    for expected in (ref, with_nan):
        close = expected * (1 + 1e-5)
        assert compare_values(expected, close.float(), "float32", rule, "x").passed
        far = expected + 0.01 * expected.nan_to_num().norm() / expected.numel() ** 0.5
        result = compare_values(expected, far.float(), "float32", rule, "x")
        assert not result.passed and "norm" in result.evidence, result.evidence
