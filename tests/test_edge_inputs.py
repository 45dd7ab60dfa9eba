"""Edge-case inputs through the whole verifier, on the bundled problems (CPU): kernels that drop
eps, skip the max subtraction, flush tiny values or special-case zero rows are rejected, each by
the distribution named in its rejection; their honest twins pass. A problem that opts out of a
distribution says why, and the opt-out is real."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, ROOT

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem

BUNDLED = ROOT / "problems"


def verdicts(problem_path: Path, names: list[str], options, lines: list[str] | None = None):
    problem = load_problem(problem_path, root=ROOT)
    result = evaluate(
        problem,
        [load_candidate(CANDIDATES / f"{n}.py") for n in names],
        None,
        options,
        (lambda event: lines.append(event.line())) if lines is not None else (lambda _: None),
    )
    return {o.candidate.name: o.verdict for o in result.candidates}


def values_failure(verdict) -> str:
    failed = [c for c in verdict.checks if not c.passed]
    assert [c.name for c in failed] == ["values"], [(c.name, c.evidence) for c in failed]
    return failed[0].evidence


@pytest.mark.parametrize(
    "problem,cheats,twin",
    [
        # cheat -> the distribution its rejection names
        ("rmsnorm", {"cheat_rmsnorm_no_eps": "zeros"}, "honest_rmsnorm"),
        ("softmax", {"cheat_softmax_no_max": "large", "cheat_softmax_no_max_float64": "limits"}, "honest_softmax"),
        ("layernorm", {"cheat_layernorm_no_eps": "zeros", "cheat_layernorm_zero_rows": "zeros"}, "honest_layernorm"),
        ("gelu", {"cheat_gelu_flush_tiny": "rows"}, "honest_gelu"),
    ],
)
def test_edge_case_cheats_are_rejected_naming_the_distribution(quick_options, problem, cheats, twin):
    found = verdicts(BUNDLED / f"{problem}.py", [*cheats, twin], quick_options())
    assert found[twin].accepted, found[twin].reasons
    for name, distribution in cheats.items():
        assert not found[name].accepted, name
        evidence = values_failure(found[name])
        assert f"{distribution} inputs" in evidence, (name, evidence)
    if problem == "rmsnorm":
        assert "NaN positions differ" in values_failure(found["cheat_rmsnorm_no_eps"])
    if problem == "gelu":  # judged at its row's scale: 1 % of the output's max passes it
        assert "its row's max |ref|" in values_failure(found["cheat_gelu_flush_tiny"])


def test_rows_alone_catch_a_dropped_eps_and_opting_out_of_both_lets_it_through(quick_options, tmp_path):
    source = (BUNDLED / "rmsnorm.py").read_text()
    no_zeros = tmp_path / "rmsnorm_no_zeros.py"
    no_zeros.write_text(source + 'SKIP_DISTRIBUTIONS = {"zeros": "padding never reaches this norm"}\n')
    lines: list[str] = []
    found = verdicts(no_zeros, ["cheat_rmsnorm_no_eps"], quick_options(), lines)
    assert "rows inputs" in values_failure(found["cheat_rmsnorm_no_eps"])
    assert any("rmsnorm_no_zeros: no zeros inputs: padding never reaches this norm" in line for line in lines), lines
    neither = tmp_path / "rmsnorm_no_small_rows.py"
    neither.write_text(source + 'SKIP_DISTRIBUTIONS = {"zeros": "no padding", "rows": "no small rows"}\n')
    found = verdicts(neither, ["cheat_rmsnorm_no_eps"], quick_options())
    # What the two distributions are for: without them nothing sees the missing eps.
    assert found["cheat_rmsnorm_no_eps"].accepted, found["cheat_rmsnorm_no_eps"].reasons
