"""What a CPU run may claim: nothing timed under a simulator (Triton's interpreter), and no
implausible speedup, in any title, comment, check run or chart."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS, typed

from bot.core.domain import CandidateSource, Origin, Trigger, Verdict
from bot.core.judge import Thresholds, judge
from bot.core.measurement import Measurement, Speedup
from bot.core.outcomes import ContenderOutcome, ShapeOutcome
from bot.core.results import Results
from bot.engine.evaluation.simulated import simulated_reason
from bot.engine.loop.attempts import Attempt, OptimizeOptions
from bot.engine.loop.optimize import flagged, optimize, select_best
from bot.engine.loop.outputs import results_document
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import load_problem
from bot.report.chart import results_chart
from bot.report.data import chart_bars
from bot.report.markdown import render_comment, render_step_summary
from bot.report.plan import plan_pull_request

pytestmark = pytest.mark.timing  # asserts what real timing claims: run alone, not beside other tests

PR = Trigger(
    kind="pull_request",
    repo="acme/kernels",
    action="labeled",
    pr_number=7,
    base_ref="main",
    base_sha="b" * 40,
    head_ref="feature",
    head_sha="a" * 40,
    head_repo="acme/kernels",
    default_branch="main",
)
INTERPRETER = "runs in Triton's interpreter on this CPU"


def _repo_with_target(tmp_path: Path, target: Path) -> Path:
    """big_add.py as a problem whose TARGET is `target`, in a repository of its own."""
    (tmp_path / "problems").mkdir()
    (tmp_path / "kernels").mkdir()
    source = (PROBLEMS / "big_add.py").read_text()
    (tmp_path / "problems" / "big_add.py").write_text(
        source.replace(
            'CPU_SHAPES = {"small": {"N": 4096}}', 'CPU_SHAPES = {"small": {"N": 4096}}\nTARGET = "kernels/add.py"'
        )
    )
    shutil.copy(target, tmp_path / "kernels" / "add.py")
    return tmp_path / "problems" / "big_add.py"


def _optimize(problem_path: Path, quick_options, exclude: tuple[str, ...] = ()) -> tuple:
    problem = load_problem(problem_path, root=problem_path.parent.parent)
    # The eager reference and the Triton knob variants: enough contenders, no minutes of compiling.
    opts = OptimizeOptions(exclude=("compile-*", "cuda-graph*", *exclude), budget_s=300, evaluation=quick_options())
    result = optimize(problem, default_baseline(problem), opts).result
    return result, results_document([result], PR, opts.min_speedup)


def _claims_nothing(results: Results, repo: Path) -> str:
    """Every rendering of `results` without a ratio; returns the step summary."""
    plan = plan_pull_request(
        results,
        PR,
        repo,
        lambda p: p.startswith("kernels/"),
        results_chart(results),
        "bot optimize problems/big_add.py --device cpu",
    )
    assert "faster" not in plan.title and "no significant improvement" in plan.title
    assert plan.check_run.title == "no significant improvement" and not plan.files
    # A ratio appears in the comment only as the guard's evidence, on the line that flags it.
    assert all("implausible; check the baseline" in line for line in plan.comment_body.splitlines() if "x [" in line)
    return render_step_summary(results)


def test_source_scan_names_the_simulator_on_cpu_only():
    triton = (CANDIDATES / "big_add_triton.py").read_text()
    assert simulated_reason(triton, "cpu") == INTERPRETER
    assert simulated_reason(triton, "cuda") is None
    assert simulated_reason("import torch\nx = torch.ones(3)\n", "cpu") is None
    assert simulated_reason("from numba import cuda\n", "cpu") == "runs in Numba's CUDA simulator on this CPU"


@pytest.mark.slow
def test_interpreted_triton_baseline_yields_no_claim_on_cpu(tmp_path, quick_options):
    problem_path = _repo_with_target(tmp_path, CANDIDATES / "big_add_triton.py")
    result, payload = _optimize(problem_path, quick_options)
    assert result.best is None and result.outcome == "not timed"
    assert result.baseline.not_timed == INTERPRETER and result.baseline.is_accepted
    accepted = [a for a in result.attempts if a.is_accepted]
    assert any(a.name == "eager-reference" for a in accepted)  # verified ...
    assert all(o.speedup is None and o.not_timed for o in accepted)  # ... and never timed
    assert all(s.measurement is None for o in accepted for s in o.shapes)
    summary = _claims_nothing(payload, tmp_path)
    assert f"**big_add**: correct; not timed: {INTERPRETER}" in summary
    bars = chart_bars(payload)
    assert [(b.problem, b.speedup, b.note) for b in bars] == [("big_add", None, f"not timed: {INTERPRETER}")]


@pytest.mark.slow
def test_interpreted_triton_candidate_is_verified_not_timed(quick_options):
    from bot.engine.evaluation.evaluate import evaluate

    problem = load_problem(PROBLEMS / "big_add.py")
    base = default_baseline(problem)
    result = evaluate(problem, [load_candidate(CANDIDATES / "big_add_triton.py")], base, quick_options())
    outcome = result.candidates[0]
    assert outcome.verdict.accepted, outcome.verdict.reasons
    assert outcome.not_timed == INTERPRETER and outcome.speedup is None
    assert result.baseline.not_timed is None
    assert result.baseline.shapes[0].measurement is not None  # the plain baseline was timed
    from bot.report.tables import render_table

    assert f"big_add_triton: correct; not timed: {INTERPRETER}" in render_table(result)


@pytest.mark.slow
def test_hidden_interpreter_baseline_is_flagged_implausible_not_claimed(tmp_path, quick_options):
    # The source scan misses this baseline's Triton: it is timed, and loses by hundreds of times.
    # Its knob variants ("tune-*") hide the same kernel: interpreter against interpreter, a ratio
    # of a few times that neither the scan nor the bound can tell from a real one (a known limit).
    problem_path = _repo_with_target(tmp_path, CANDIDATES / "cheat_hidden_triton_baseline.py")
    result, payload = _optimize(problem_path, quick_options, exclude=("tune-*",))
    assert result.baseline.not_timed is None and result.baseline.is_accepted
    assert result.best is None and result.outcome == "implausible"
    top = result.implausible[0]
    assert top.speedup > 100 and "above the 100x bound" in top.evidence and "baseline" in top.evidence
    summary = _claims_nothing(payload, tmp_path)
    assert "**big_add**: implausible; check the baseline:" in summary
    assert not [b for b in chart_bars(payload) if b.speedup and b.speedup > 100]
    # With the bound raised above it, the same run's win is claimed: the guard is what held it back.
    assert any(judge(a, Thresholds(1.05, 1e9)).claimed for a in result.attempts)


def _outcome(ratio: float, median_us: float, floor_us: float | None = None) -> ContenderOutcome:
    m = Measurement(samples_us=(median_us,) * 5)
    sp = Speedup(ratio, ratio * 0.95, ratio * 1.05, 0.95, "faster")
    shape = ShapeOutcome("small", "float32[4096]", "float32", m, sp, floor_us, 0.0, 0.0)
    cand = CandidateSource(name=f"c{ratio}", source="class ModelNew: pass", origin=Origin("search"))
    return ContenderOutcome(cand, "candidate", Verdict("accepted", ()), (shape,))


def test_plausibility_guard_bound_and_roofline():
    plain, huge, under_floor = _outcome(3.0, 10.0), _outcome(150.0, 10.0), _outcome(2.0, 1.0, floor_us=4.0)
    attempts = [Attempt(0, o) for o in (plain, huge, under_floor)]

    def implausibility(attempt: Attempt, bound: float):
        return judge(attempt.result, Thresholds(1.05, bound)).implausible

    assert implausibility(attempts[0], 100.0) is None
    assert (
        "150.0x is above the 100x bound (baseline 1500 us, candidate 10 us)"
        in implausibility(attempts[1], 100.0).evidence
    )
    assert implausibility(attempts[1], 200.0) is None  # the bound is a setting
    assert "below the roofline floor of 4 us" in implausibility(attempts[2], 100.0).evidence
    assert select_best(attempts, Thresholds(1.05)) is plain
    assert [f.name for f in flagged(attempts, Thresholds(1.05, 100.0))] == ["c150.0", "c2.0"]


def test_renderers_refuse_an_implausible_or_simulated_best_from_untrusted_results(tmp_path):
    best = {
        "name": "x",
        "accepted": True,
        "source": "class ModelNew: pass",
        "speedup": 4675.27,
        "speedup_ci": [4600.0, 4700.0],
        "shapes": [
            {"shape": "small", "speedup": 4675.27, "speedup_ci": [4600.0, 4700.0], "measurement": {"median_us": 39.0}}
        ],
    }
    problem = {
        "problem": "rmsnorm",
        "target": "kernels/rmsnorm_triton.py",
        "best": best,
        "attempts": [best],
        "min_speedup": 1.05,
        "environment": {"device": "cpu", "device_name": "Xeon"},
    }
    for variant in ({}, {"not_timed": INTERPRETER}):
        payload = {
            "schema_version": 1,
            "problems": [{**problem, **variant, "max_plausible_speedup": 1e9 if variant else None}],
        }
        summary = _claims_nothing(typed(payload), tmp_path)
        assert "4675" not in render_comment(typed(payload), None, None).split("### How it was verified")[0]
        assert not [b for b in chart_bars(typed(payload)) if b.speedup]
        # The check run's detail shows an implausible ratio only beside its flag, a simulated one never.
        row = next(line for line in summary.splitlines() if line.startswith("| – | x |"))
        assert ("4675" not in row) if variant else ("4675" in row and "implausible; check the baseline" in row)
