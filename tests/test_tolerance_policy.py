"""The tolerance policy: the problem's own result passes by construction, a candidate as accurate
as it passes, and one clearly worse, or a zero, stale or skipped result, still fails; and
KernelBench's rule, exactly.

The end-to-end tests run real workers on `loose_matmul`, a float32 problem whose own product
rounds its operands to bfloat16, as a TF32 convolution under cuDNN's defaults does on a GPU."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import CANDIDATES, PROBLEMS

from bot.core.domain import CheckResult
from bot.core.settings import TolerancePolicy
from bot.core.tolerance import (
    DEFAULT_TOLERANCES,
    NORM_CEILING,
    OWN_ERROR_MULTIPLE,
    AllClose,
    Tolerance,
    distribution_rules,
    noise_notes,
    shape_rules,
    timed_rules,
    widening_notes,
)
from bot.engine.verification.compare import (
    REUSED_OUTPUT,
    check_commitment,
    compare_fingerprints,
    compare_outputs,
)
from bot.harness import own_error as own_error_module
from bot.harness.own_error import own_error
from bot.protocol.measures import hash_tensor
from bot.protocol.values import compare_values

FLOAT32 = [{"dtype": "float32", "shape": [64, 96]}]


def _round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """float32 values rounded to `bits` explicit mantissa bits (TF32: 10, bfloat16: 7)."""
    drop = 23 - bits
    i = x.view(torch.int32)
    rounded = (i + (1 << (drop - 1))) & ~((1 << drop) - 1)
    return rounded.view(torch.float32)


def _product(bits: int | None, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 oracle, float32 product with operands rounded to `bits`) of one random matmul."""
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(64, 512, generator=gen), torch.randn(512, 96, generator=gen)
    oracle = a.double() @ b.double()
    if bits is None:
        return oracle, a @ b
    return oracle, _round_mantissa(a, bits) @ _round_mantissa(b, bits)


def _rules(oracle: torch.Tensor, native: torch.Tensor, overrides=None) -> tuple:
    return shape_rules(FLOAT32, overrides, [[own_error(native, oracle)]], TolerancePolicy.STRICT)


# --- the problem's own error, as the reference worker measures it ----------------------------


def test_own_error_is_the_normwise_error_and_the_worst_element_over_its_rows_max():
    oracle, native = _product(7, 0)
    norm, worst = own_error(native, oracle)
    diff = native.double() - oracle
    assert norm == pytest.approx(float(diff.norm() / oracle.norm()), rel=1e-9)
    assert worst == pytest.approx(float((diff.abs().amax(1) / oracle.abs().amax(1)).max()), rel=1e-9)


def test_own_error_in_chunks_is_the_same_as_in_one_piece(monkeypatch):
    oracle, native = _product(7, 1)
    whole = own_error(native, oracle)
    monkeypatch.setattr(own_error_module, "CHUNK_ELEMENTS", 96 * 5)  # 5 rows a chunk, 13 chunks
    assert own_error(native, oracle) == pytest.approx(whole, rel=1e-12)


def test_own_error_skips_what_is_not_finite_and_what_is_compared_exactly():
    oracle = torch.tensor([[1.0, float("inf"), 2.0, 4.0, 1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    native = torch.tensor([[1.0, float("inf"), 2.0, 4.5, 1.0, 1.0, 1.0, 1.0]])
    assert own_error(native, oracle)[1] == pytest.approx(0.5 / 4.0)
    assert own_error(torch.arange(8), torch.arange(8)) == [0.0, 0.0]


def test_own_error_counts_no_underflow_residue_as_error():
    # A row of the oracle at 1e-40 that the problem's float32 code gets as 1e-38: no error of
    # its code's to widen the bound by; the same 100 % off a row of 2^-20 is one.
    oracle = torch.ones(2, 8, dtype=torch.float64)
    oracle[1] = 1e-40
    native = oracle.float()
    native[1, 3] = 1e-38
    assert own_error(native, oracle)[1] == 0.0
    oracle[1], native[1] = 2.0**-20, 2.0**-19
    assert own_error(native, oracle)[1] == pytest.approx(1.0)


# --- the rule of a shape -----------------------------------------------------------------------


def test_the_bound_is_the_default_plus_a_multiple_of_the_problems_own_error():
    base = DEFAULT_TOLERANCES["float32"]
    (rule,) = shape_rules(FLOAT32, None, [[[3e-4, 1e-3]], [[2e-4, 2e-3]]], TolerancePolicy.STRICT)
    k = OWN_ERROR_MULTIPLE
    assert rule == Tolerance(base.norm_rel + k * 3e-4, base.elem_rtol, base.elem_atol_rel + k * 2e-3)
    # Wide enough for another algorithm of the same precision, narrower than one class worse.
    assert 2.0 <= OWN_ERROR_MULTIPLE < 8.0
    # The problem's own overrides are the floor it widens from; no measure, no widening.
    (tight,) = shape_rules(FLOAT32, {"norm_rel": 1e-6}, [None], TolerancePolicy.STRICT)
    assert tight == Tolerance(1e-6, base.elem_rtol, base.elem_atol_rel)


def test_a_reference_far_from_its_oracle_widens_normwise_no_further_than_the_ceiling_and_says_so():
    (rule,) = shape_rules(FLOAT32, None, [[[0.3, 0.9]]], TolerancePolicy.STRICT)
    assert rule.norm_rel == NORM_CEILING
    # Elementwise there is no cap: a row that one rounding moves as a whole must still pass.
    assert rule.elem_atol_rel == DEFAULT_TOLERANCES["float32"].elem_atol_rel + OWN_ERROR_MULTIPLE * 0.9
    notes = widening_notes(FLOAT32, None, (rule,))
    assert len(notes) == 2 and "its baseline may fail the values check" in notes[1]
    assert widening_notes(FLOAT32, None, shape_rules(FLOAT32, None, [None], TolerancePolicy.STRICT)) == []
    # Only the normwise ceiling is worth the warning: a whole row off passes its own baseline.
    (row_only,) = shape_rules(FLOAT32, None, [[[1e-4, 1.0]]], TolerancePolicy.STRICT)
    assert len(widening_notes(FLOAT32, None, (row_only,))) == 1
    # Float rounding widens every bound a little: said only where it is more than the default.
    rounding = shape_rules(FLOAT32, None, [[[2e-6, 2e-6]]], TolerancePolicy.STRICT)
    assert rounding[0] != DEFAULT_TOLERANCES["float32"] and widening_notes(FLOAT32, None, rounding) == []


def _cancelling(oracle: torch.Tensor, row: int) -> torch.Tensor:
    """The float32 result of a problem that is exact but for one element, whose sum cancels
    (a GEMM on inputs near the dtype's range): it is off by its row's whole max."""
    native = oracle.float().clone()
    native[row, 0] += float(oracle[row].abs().max())
    return native


def test_a_row_off_by_its_whole_max_passes_its_own_baseline_but_loosens_no_other_distribution():
    standard, _ = _product(None, 0)
    limits, _ = _product(None, 1)
    on_limits = _cancelling(limits, 5)
    own = [[own_error(standard.float(), standard)], [own_error(on_limits, limits)]]
    rules = distribution_rules(FLOAT32, None, own, ["standard", "limits"], TolerancePolicy.STRICT)
    # The problem as written passes by construction, on the trial that cancels too.
    assert compare_values(limits, on_limits, "float32", rules["limits"][0], "x").passed
    # A candidate wrong on one element of a standard draw, by 5 % of its row's max: the shape's
    # rule (every distribution's own error) lets it through; its own distribution's does not.
    cheat = standard.float().clone()
    cheat[3, 7] += 0.05 * float(standard[3].abs().max())
    (loosest,) = shape_rules(FLOAT32, None, own, TolerancePolicy.STRICT)
    assert compare_values(standard, cheat, "float32", loosest, "x").passed
    found = compare_values(standard, cheat, "float32", rules["standard"][0], "x")
    assert not found.passed and "(3, 7)" in found.evidence
    # Two trials of one distribution: the larger own error of the two widens its rule.
    both = distribution_rules(FLOAT32, None, own, ["limits", "limits"], TolerancePolicy.STRICT)
    assert both["limits"] == (loosest,)


def _batchnorm_of_a_constant(rows: int = 256, cols: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 oracle, float32 answer) of a training-mode batch norm of columns that are each
    one constant, as a linear layer gives on all-zero inputs: rounding, divided by sqrt(eps)."""
    bias = torch.randn(cols, generator=torch.Generator().manual_seed(0)).expand(rows, cols).contiguous()
    norm = torch.nn.functional.batch_norm
    return norm(bias.double(), None, None, training=True), norm(bias, None, None, training=True)


def test_where_the_problems_answer_is_its_rounding_noise_its_trials_pass_and_garbage_fails():
    oracle, native = _batchnorm_of_a_constant()
    standard, _ = _product(None, 0)
    noise = own_error(native, oracle)
    assert noise[0] > 1e6  # its error is a million times its whole answer: rounding noise
    own = [[own_error(standard.float(), standard)], [noise]]
    rules = distribution_rules(FLOAT32, None, own, ["standard", "zeros"], TolerancePolicy.STRICT)
    # Capped at the ceiling (as it was), the problem fails its own baseline on those inputs.
    (capped,) = shape_rules(FLOAT32, None, [[noise]], TolerancePolicy.STRICT)
    assert not compare_values(oracle, native, "float32", capped, "x").passed
    assert compare_values(oracle, native, "float32", rules["zeros"][0], "x").passed
    # Zero is the answer there; anything of the scale of a real output is not.
    assert compare_values(oracle, torch.zeros_like(native), "float32", rules["zeros"][0], "x").passed
    stale = torch.randn(native.shape, generator=torch.Generator().manual_seed(1))  # a real answer's scale
    for wrong in (torch.ones_like(native), native * 8, stale):
        found = compare_values(oracle, wrong, "float32", rules["zeros"][0], "x")
        assert not found.passed and "element" in found.evidence
    # The other distribution keeps its own tight bound, and the timed calls, which never draw
    # all-zero inputs, are held to the timed distributions' error alone.
    assert rules["standard"][0].norm_rel < 1e-4
    (timed,) = timed_rules(FLOAT32, None, own, ["standard", "zeros"], TolerancePolicy.STRICT)
    assert timed == rules["standard"][0]
    # Noise on a distribution the timed calls draw leaves their bound at the ceiling.
    (drawn,) = timed_rules(FLOAT32, None, [[noise]], ["standard"], TolerancePolicy.STRICT)
    assert drawn.norm_rel == NORM_CEILING
    # Between the ceiling and its whole answer a reference is loose, not noise: capped as before.
    half = distribution_rules(FLOAT32, None, [[[0.5, 0.5]]], ["zeros"], TolerancePolicy.STRICT)
    assert half["zeros"][0].norm_rel == NORM_CEILING


def test_noise_is_said_once_per_output_and_distribution():
    oracle, native = _batchnorm_of_a_constant()
    noise, fine = own_error(native, oracle), [1e-7, 1e-7]
    notes = noise_notes(FLOAT32, [[fine], [noise], [noise]], ["standard", "zeros", "zeros"])
    assert len(notes) == 1 and "output 0 (float32) on zeros inputs" in notes[0]
    assert "rounding noise" in notes[0] and "timed calls" not in notes[0]
    (drawn,) = noise_notes(FLOAT32, [[noise]], ["standard"])
    assert "its timed calls draw such inputs and stay capped" in drawn
    assert noise_notes(FLOAT32, [None, [fine]], ["zeros", "standard"]) == []


def test_integer_outputs_stay_exact_under_both_policies():
    ints = [{"dtype": "int64", "shape": [8]}]
    for policy in TolerancePolicy:
        assert shape_rules(ints, None, [[[0.0, 0.0]]], policy) == (None,)


@pytest.mark.parametrize("bits", [None, 10, 7])  # float32 itself, TF32, bfloat16 operands
@pytest.mark.parametrize("seed", range(4))
def test_the_problems_own_result_passes_by_construction(bits, seed):
    oracle, native = _product(bits, seed)
    (rule,) = _rules(oracle, native)
    assert compare_values(oracle, native, "float32", rule, "x").passed
    if bits is not None:  # and without the widening it would not have
        assert not compare_values(oracle, native, "float32", None, "x").passed


@pytest.mark.parametrize("seed", range(4))
def test_as_accurate_passes_and_one_precision_class_worse_fails(seed):
    oracle, tf32 = _product(10, seed)
    (rule,) = _rules(oracle, tf32)
    _, other_tf32 = _product(10, seed)  # same precision, another rounding order
    gen = torch.Generator().manual_seed(100 + seed)
    assert compare_values(oracle, other_tf32.T.contiguous().T, "float32", rule, "x").passed
    # Another TF32 product's error (operands rounded the other way) is within the multiple.
    a_b = _product(None, seed)[1]
    shuffled = a_b + (tf32 - a_b)[torch.randperm(64, generator=gen)]
    assert compare_values(oracle, shuffled, "float32", rule, "x").passed
    _, bf16 = _product(7, seed)  # bf16 compute of this fp32 problem: 8x TF32's unit roundoff
    assert not compare_values(oracle, bf16, "float32", rule, "x").passed


def test_zero_stale_and_skipped_results_fail_however_loose_the_reference():
    oracle, native = _product(7, 0)
    (rule,) = _rules(oracle, native)
    other, _ = _product(7, 1)
    assert not compare_values(oracle, torch.zeros(64, 96), "float32", rule, "x").passed
    assert not compare_values(oracle, other.float(), "float32", rule, "x").passed
    # Even at the normwise ceiling: a zero output is 100 % off normwise.
    (loosest,) = shape_rules(FLOAT32, None, [[[1.0, 1.0]]], TolerancePolicy.STRICT)
    assert not compare_values(oracle, torch.zeros(64, 96), "float32", loosest, "x").passed
    # The timed calls' fingerprints are held to the same widened bound.
    ref_print = [[0.0, float(oracle.norm()), 0.0]]
    assert not compare_fingerprints(ref_print, [[0.0, 0.0, 0.0]], ["float32"], (rule,), "x").passed
    honest = [[0.0, float(native.double().norm()), 0.0]]
    assert compare_fingerprints(ref_print, honest, ["float32"], (rule,), "x").passed


def test_rules_of_another_length_are_a_bug_not_fewer_comparisons():
    with pytest.raises(ValueError, match="2 tolerance rules for 1 outputs"):
        compare_fingerprints([[0.0, 1.0, 0.0]], [[0.0, 1.0, 0.0]], ["float32"], (None, None), "x")


# --- KernelBench's rule ------------------------------------------------------------------------


def test_kernelbench_rule_is_allclose_by_dtype_and_ignores_the_problems_overrides():
    metas = [
        {"dtype": "float32", "shape": [10, 10]},
        {"dtype": "bfloat16", "shape": [4]},
        {"dtype": "float16", "shape": [4]},
    ]
    rules = shape_rules(metas, {"norm_rel": 1.0}, [None], TolerancePolicy.KERNELBENCH)
    assert rules == (AllClose(1e-4, 1e-4, 1e-4 * 10), AllClose(1e-2, 1e-2, 2e-2), AllClose(1e-2, 1e-2, 2e-2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernelbench_rule_agrees_with_torch_allclose_element_for_element(dtype):
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    rule = AllClose(tol, tol, 0.0)
    gen = torch.Generator().manual_seed(3)
    ref = (torch.randn(32, 64, generator=gen) * 4).to(dtype)
    for scale in (0.3, 0.9, 1.1, 3.0):  # around the bound, both sides
        noise = torch.randn(32, 64, generator=gen) * scale * (tol + tol * ref.float().abs())
        out = (ref.float() + noise).to(dtype)
        result = compare_values(ref.double(), out, str(dtype).removeprefix("torch."), rule, "x")
        assert result.passed == torch.allclose(ref, out, atol=tol, rtol=tol), scale
    # Its argument order: rtol scales |out|, as in torch.allclose(reference, out).
    ref, out = torch.ones(8), torch.tensor([1.0] * 7 + [2.0])
    assert torch.allclose(ref, out, atol=1e-4, rtol=0.6) and not torch.allclose(out, ref, atol=1e-4, rtol=0.6)
    assert compare_values(ref.double(), out, "float32", AllClose(1e-4, 0.6, 0.0), "x").passed
    assert not compare_values(out.double(), ref, "float32", AllClose(1e-4, 0.6, 0.0), "x").passed


def test_kernelbench_rule_matches_nan_positions_and_names_the_element():
    ref = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
    assert compare_values(ref.double(), ref.clone(), "float32", AllClose(1e-4, 1e-4, 0.0), "x").passed
    moved = torch.tensor([1.0, 2.0, 3.0, float("inf")])
    assert (
        "NaN positions differ" in compare_values(ref.double(), moved, "float32", AllClose(1e-4, 1e-4, 0), "x").evidence
    )
    off = torch.tensor([1.0, float("nan"), 3.01, float("inf")])
    result = compare_values(ref.double(), off, "float32", AllClose(1e-4, 1e-4, 0.0), "x")
    assert not result.passed and "element (2,)" in result.evidence and "KernelBench's torch.allclose" in result.evidence


def test_kernelbench_fingerprint_bound_admits_what_allclose_admits():
    ref = torch.randn(1000, dtype=torch.float64)
    out = ref + 1e-4 * (1 + 1e-4 * ref.abs()) * torch.sign(torch.randn(1000, dtype=torch.float64))
    rule = AllClose(1e-4, 1e-4, 1e-4 * math.sqrt(1000))
    prints = [[0.0, float(ref.norm()), 0.0]], [[0.0, float(out.norm()), 0.0]]
    assert compare_fingerprints(*prints, ["float32"], (rule,), "x").passed
    assert not compare_fingerprints(
        prints[0], [[0.0, float((ref * 1.01).norm()), 0.0]], ["float32"], (rule,), "x"
    ).passed


# --- an output valid only until the next call ----------------------------------------------------


def test_a_revealed_output_a_later_call_committed_to_is_called_a_reused_buffer():
    first, last = torch.ones(4), torch.full((4,), 2.0)
    digests = [[hash_tensor(first)], [hash_tensor(torch.zeros(4))], [hash_tensor(last)]]
    reused = check_commitment(digests[0], [last], [], ["float32"], None, "call 1", later=digests[1:])
    assert not reused.passed and REUSED_OUTPUT in reused.evidence
    forged = check_commitment(digests[0], [torch.full((4,), 9.0)], [], ["float32"], None, "call 1", later=digests[1:])
    assert not forged.passed and "computed after the timed window?" in forged.evidence
    assert check_commitment(digests[0], [first], [], ["float32"], None, "call 1", later=digests[1:]).passed


def test_on_cuda_a_fingerprint_that_matched_and_a_reveal_that_does_not_is_a_reused_buffer():
    ref = torch.randn(8, 16, dtype=torch.float64)
    matched = CheckResult("timed-call outputs", True, details={"commitment": "fingerprint"})
    (changed,) = compare_outputs([ref], [torch.zeros(8, 16)], ["float32"], None, "call 3", matched)
    assert not changed.passed and "valid only until the next call" in changed.evidence
    assert "CUDA graph trees reuse output memory" in changed.evidence
    (wrong,) = compare_outputs([ref], [torch.zeros(8, 16)], ["float32"], None, "call 3", None)
    assert not wrong.passed and REUSED_OUTPUT not in wrong.evidence
    (right,) = compare_outputs([ref], [ref.float()], ["float32"], None, "call 3", matched)
    assert right.passed


# --- real workers --------------------------------------------------------------------------------


def _evaluate(policy: TolerancePolicy, names: list[str], problem_file: str = "loose_matmul.py"):
    from pathlib import Path

    from bot.engine.evaluation.evaluate import evaluate
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions
    from bot.engine.workspace.candidates import default_baseline, load_candidate
    from bot.engine.workspace.problems import load_problem
    from bot.sandbox import Limits

    problem = load_problem(PROBLEMS / problem_file)
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        limits=Limits(memory_mb=4096, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=0.5, min_samples=3, min_batches=2, replicas=1),
        cache_root=Path("/tmp/kernel-bot-test-cache"),
        tolerance=policy,
    )
    notes: list[str] = []
    cands = [load_candidate(CANDIDATES / f"{n}.py") for n in names]
    result = evaluate(problem, cands, default_baseline(problem), options, lambda event: notes.append(event.line()))
    return result, {o.candidate.name: o for o in result.candidates}, notes


def _values(outcome) -> CheckResult:
    return next(c for c in outcome.verdict.checks if c.name == "values" and not c.passed)


def test_a_loose_reference_is_accepted_and_the_candidates_judged_by_it():
    result, by_name, notes = _evaluate(TolerancePolicy.STRICT, ["honest_loose_matmul", "cheat_loose_matmul_fp8"])
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons
    assert by_name["honest_loose_matmul"].verdict.accepted, by_name["honest_loose_matmul"].verdict.reasons
    cheat = by_name["cheat_loose_matmul_fp8"]
    assert not cheat.verdict.accepted and "abs err" in _values(cheat).evidence
    assert any("the problem's own result is off its oracle" in n for n in notes), notes
    widened = next(c for c in result.baseline.verdict.checks if c.name == "values").details["tolerance"]
    assert 2e-3 < widened["norm_rel"] < 2e-2  # 1e-5 plus twice bfloat16 operands' ~2.4e-3


def test_under_kernelbench_the_problems_own_model_in_its_dtype_is_the_reference():
    result, by_name, notes = _evaluate(TolerancePolicy.KERNELBENCH, ["honest_loose_matmul", "cheat_loose_matmul_fp8"])
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons
    base = next(c for c in result.baseline.verdict.checks if c.name == "values")
    assert base.details["max_abs_err"] == 0.0 and base.details["tolerance"] == {"atol": 1e-4, "rtol": 1e-4}
    # KernelBench's 1e-4 is tighter than the bfloat16 rounding of the honest twin's result.
    assert "KernelBench's torch.allclose" in _values(by_name["honest_loose_matmul"]).evidence
    assert not by_name["cheat_loose_matmul_fp8"].verdict.accepted
    assert not any("off its oracle" in n for n in notes)


def test_a_problem_whose_answer_on_zeros_is_its_rounding_noise_passes_its_baseline_and_no_cheat():
    result, by_name, notes = _evaluate(
        TolerancePolicy.STRICT, ["cheat_constant_batchnorm_garbage"], "constant_batchnorm.py"
    )
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons
    assert any("on zeros inputs: the problem's own answer is its rounding noise" in n for n in notes), notes
    cheat = by_name["cheat_constant_batchnorm_garbage"]
    assert not cheat.verdict.accepted and "zeros" in _values(cheat).evidence
