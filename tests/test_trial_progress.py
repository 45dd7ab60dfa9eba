"""Verification says where its time goes trial by trial (bot.core.progress.TrialDone): on the
H100 a shape's trials on ten contenders took two minutes with no line between their start and
their verdict, which the first trial's compiles filled."""

from __future__ import annotations

import random
import time

from conftest import CANDIDATES, PROBLEMS
from test_worker_reference_prints import _LoggedWorker

from bot.core.distributions import DISTRIBUTIONS
from bot.core.progress import TrialDone
from bot.engine.verification.trials import TrialRun, run_trials
from bot.engine.workspace.problems import load_problem

SLOW_S = 0.3


def test_each_trial_says_how_many_pass_and_whose_call_was_slowest():
    problem = load_problem(PROBLEMS / "scale_add.py")
    log: list[tuple[str, str]] = []
    files = {"honest": "honest", "wrong": "cheat_distribution", "slow": "honest"}  # wrong beyond standard inputs
    contenders = {n: _LoggedWorker(n, log, str(CANDIDATES / f"{f}.py"), "ModelNew", "native") for n, f in files.items()}
    slow = contenders["slow"].harness
    real_run = slow.op_run
    slow.op_run = lambda msg: time.sleep(SLOW_S) or real_run(msg)  # noqa: E731  a compile's stand-in
    contenders["slow"].owner = "scale_add slow_file"  # as the bot names a worker: problem and candidate
    events = []
    reference = _LoggedWorker("reference", log)
    trial = TrialRun(problem, problem.shapes_for("cpu")[0], reference, random.Random(0), 1, (20.0, 20.0), 1)
    _, checks, _ = run_trials(trial, contenders, events.append)
    done = [e for e in events if isinstance(e, TrialDone)]
    assert [e.number for e in done] == list(range(1, len(DISTRIBUTIONS) + 1))
    assert all(e.of == len(DISTRIBUTIONS) and e.shape == problem.shapes_for("cpu")[0].name for e in done)
    assert all(e.slowest == "slow_file" and e.seconds >= SLOW_S for e in done)  # the candidate, not a label
    assert not all(c.passed for c in checks["wrong"]) and all(c.passed for c in checks["honest"])
    counts = [(e.contenders, e.passing) for e in done]
    failed_at = next(i for i, (took, passing) in enumerate(counts) if passing < took)
    assert counts[failed_at] == (3, 2) and all(c == (3, 3) for c in counts[:failed_at])
    assert all(c == (2, 2) for c in counts[failed_at + 1 :])
    assert done[0].line() == (
        f"scale_add [{done[0].shape}] trial 1/{len(DISTRIBUTIONS)}: {done[0].passing} of 3 contender(s) pass; "
        f"slowest call slow_file, {done[0].seconds:.1f} s"
    )
