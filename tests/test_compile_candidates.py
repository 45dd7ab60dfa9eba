"""Compiled candidates on CPU: a C++ compiler error is a rejection carrying the compiler's
message; a Triton candidate runs through Triton's interpreter automatically."""

from __future__ import annotations

import os

import pytest
from conftest import CANDIDATES, PROBLEMS, ROOT

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem


@pytest.mark.slow
def test_cpp_compile_error_is_rejected_with_the_compiler_message(quick_options):
    result = evaluate(
        load_problem(PROBLEMS / "scale_add.py"),
        [load_candidate(CANDIDATES / "cpp_compile_error.py")],
        None,
        quick_options(),
    )
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


@pytest.mark.parametrize(
    "problem_name, candidate",
    [
        ("matmul_bias_gelu", "matmul_bias_gelu_triton.py"),  # bf16 tl.dot: see bot/harness/triton_interp.py
        ("gelu", "gelu_tanh_triton.py"),
    ],
)
def test_bf16_triton_candidates_are_accepted_through_the_interpreter(quick_options, problem_name, candidate):
    problem = load_problem(ROOT / "problems" / f"{problem_name}.py", root=ROOT)
    result = evaluate(problem, [load_candidate(CANDIDATES / candidate)], None, quick_options())
    assert result.candidates[0].verdict.accepted, result.candidates[0].verdict.reasons


def test_mended_interpreter_computes_bf16_dots_like_float32(tmp_path):
    """Triton's interpreter multiplies bf16 bit patterns in tl.dot (triton-lang/triton#11584);
    after the worker's repair the product equals float32's, and repairing twice is harmless."""
    import subprocess
    import sys

    script = tmp_path / "dot.py"
    script.write_text(
        "import torch, triton, triton.language as tl\n"
        "from bot.harness import triton_interp\n"
        "@triton.jit\n"
        "def k(a_ptr, b_ptr, c_ptr):\n"
        "    r = tl.arange(0, 16)\n"
        "    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])\n"
        "    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])\n"
        "    tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))\n"
        "assert triton_interp.needed()\n"
        "assert triton_interp.mend_bf16_dot() and triton_interp.mend_bf16_dot()\n"
        "a, b = (torch.randn(16, 16, dtype=torch.bfloat16) for _ in range(2))\n"
        "c = torch.empty(16, 16)\n"
        "k[(1,)](a, b, c)\n"
        "print((c - a.float() @ b.float()).abs().max().item())\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[-1]) < 1e-4
