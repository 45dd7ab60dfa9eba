"""Compiled candidates on CPU: a C++ compiler error is a rejection carrying the compiler's
message; a Triton candidate runs through Triton's interpreter automatically."""

from __future__ import annotations

import pytest

from bot.candidates import load_candidate
from bot.evaluate import evaluate
from bot.problems import load_problem
from conftest import CANDIDATES, PROBLEMS, ROOT


@pytest.mark.slow
def test_cpp_compile_error_is_rejected_with_the_compiler_message(quick_options):
    result = evaluate(load_problem(PROBLEMS / "scale_add.py"),
                      [load_candidate(CANDIDATES / "cpp_compile_error.py")], None, quick_options())
    verdict = result.candidates[0].verdict
    assert not verdict.accepted
    assert "import" in verdict.reasons[0]
    assert "undefined_symbol_xyz" in verdict.reasons[0]  # the compiler's own words


def test_triton_candidate_runs_through_the_interpreter_on_cpu(quick_options):
    problem = load_problem(PROBLEMS / "big_add.py")
    result = evaluate(problem, [load_candidate(CANDIDATES / "big_add_triton.py")], None, quick_options())
    outcome = result.candidates[0]
    assert outcome.verdict.accepted, outcome.verdict.reasons
    assert [s.shape for s in outcome.shapes] == ["small"]


def test_bundled_triton_target_is_accepted_on_cpu(quick_options):
    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    result = evaluate(problem, [load_candidate(problem.target)], None, quick_options())
    assert result.candidates[0].verdict.accepted, result.candidates[0].verdict.reasons
