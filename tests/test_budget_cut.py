"""The problem's budget at a candidate's first call, where compilation and autotuning happen: a
call still running when the budget ends is stopped and its candidate not evaluated (not
rejected); the baseline's is never cut, and a call that starts late still gets FLOOR_S."""

from __future__ import annotations

import time

from conftest import CANDIDATES, PROBLEMS

from bot.engine.verification import budget_cut
from bot.engine.verification.budget_cut import BUDGET_CUT, FLOOR_S, FirstCallBudget
from bot.engine.workers.client import WorkerFailure

TIMED_OUT = WorkerFailure("call", "timed out after 12 s (killed; it kept using CPU: 11.8 s)")


def test_a_first_call_gets_what_is_left_of_the_budget_and_at_least_the_floor():
    budget = FirstCallBudget(ends=100.0, spared=frozenset({"c0"}))
    assert budget.timeout("c1", 900.0, now=40.0) == 60.0
    assert budget.timeout("c1", 900.0, now=99.0) == FLOOR_S  # late, yet tried
    assert budget.timeout("c1", 900.0, now=200.0) == FLOOR_S
    assert budget.timeout("c1", 20.0, now=40.0) == 20.0  # never beyond the workers' own limit
    assert budget.timeout("c0", 900.0, now=99.0) == 900.0  # the baseline is never cut
    assert FirstCallBudget().timeout("c1", 900.0, now=99.0) == 900.0  # no budget, no cut


def test_only_a_timeout_at_the_budgets_own_limit_is_a_cut():
    budget = FirstCallBudget(ends=100.0)
    cut = budget.cut(TIMED_OUT, 12.0, 900.0)
    assert cut is not None and cut.name == BUDGET_CUT and not cut.passed
    assert "ran past the problem's budget" in cut.evidence and "not evaluated" in cut.evidence
    assert budget.cut(TIMED_OUT, 900.0, 900.0) is None  # the workers' own limit: a hang, rejected
    crashed = WorkerFailure("call", "worker exited with code 1 without a result")
    assert budget.cut(crashed, 12.0, 900.0) is None


def test_a_first_call_past_the_budget_leaves_its_candidate_not_evaluated_and_the_rest_stand(monkeypatch, quick_options):
    from bot.engine.evaluation.evaluate import evaluate
    from bot.engine.timing.records import TimingOptions
    from bot.engine.workspace.candidates import default_baseline, load_candidate
    from bot.engine.workspace.problems import load_problem

    monkeypatch.setattr(budget_cut, "FLOOR_S", 1.0)
    problem = load_problem(PROBLEMS / "scale_add.py")
    slow, honest = (load_candidate(CANDIDATES / f"{n}.py") for n in ("slow_first_call_cpu", "honest"))
    timing = TimingOptions(time_cap_s=0.3, min_samples=3, min_batches=2, replicas=1)
    options = quick_options(timing=timing, deadline=time.monotonic() + 1.0)
    notes: list[str] = []
    result = evaluate(problem, [slow, honest], default_baseline(problem), options, lambda e: notes.append(e.line()))
    assert [c.name for c in result.not_evaluated] == [slow.name]
    assert [o.candidate.name for o in result.candidates] == [honest.name]
    assert result.candidates[0].verdict.accepted and result.baseline.verdict.accepted
    assert any("ran past the problem's budget: stopped after 1 s" in n for n in notes), notes
