"""Times and timed outputs bounded from outside the candidate's process (docs/verifier.md,
"hidden time" and "timed calls"): the parent's own clock around each batch, calibrated by the
reference's do-nothing calls, and full outputs of calls the parent picks after the batch."""

from __future__ import annotations

import logging

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.judge import significant
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits

pytestmark = pytest.mark.slow


def _bench(problem_file: str, names: list[str], cap_s: float = 3.0, sandbox: str = "process"):
    problem = load_problem(PROBLEMS / problem_file)
    # Batches of about 40 ms: the harness's fixed cost per batch spread over some 25 calls.
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        sandbox=sandbox,
        limits=Limits(memory_mb=4096, call_timeout_s=30),
        timing=TimingOptions(time_cap_s=cap_s, min_samples=5, min_batches=8, batch_target_us=40_000),
    )
    result = evaluate(
        problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], default_baseline(problem), options
    )
    return result.baseline, {o.candidate.name: o for o in result.candidates}


def _check(outcome, name):
    return next(c for c in outcome.verdict.checks if c.name == name)


def test_hiding_five_percent_of_a_compute_bound_call_from_the_workers_clock_is_never_claimed():
    baseline, outcomes = _bench("tall_matmul.py", ["cheat_shave_clock", "tall_matmul_honest"])
    cheat, honest = outcomes["cheat_shave_clock"], outcomes["tall_matmul_honest"]
    # The samples are the parent's spans, which hold the 5 % it hid from its report: never
    # claimed at the default bar. The check names what the parent saw (evidence on the CPU:
    # 28 to 131 us a call beside a 1.7 ms call, within the batches' scatter on a busy host).
    hidden = _check(cheat, "hidden time")
    assert hidden.passed and "hidden_us_per_call" in hidden.details, hidden
    assert not significant(cheat, 1.05), (cheat.speedup, cheat.speedup_ci)
    for outcome in (baseline, honest):  # honest twins: never rejected for hidden time
        assert outcome.verdict.status == "accepted", outcome.verdict.reasons


def test_work_moved_into_the_commitment_is_never_called_faster():
    baseline, outcomes = _bench("scale_add.py", ["cheat_commit_hook", "honest"])
    cheat = outcomes["cheat_commit_hook"]
    # Rejected, or accepted with the hidden work counted: either way no speedup is claimed.
    if cheat.verdict.status == "accepted":
        assert not significant(cheat, 1.05), (cheat.speedup, cheat.speedup_ci)
    else:
        assert "hidden time" in [c.name for c in cheat.verdict.checks if not c.passed]
    assert outcomes["honest"].verdict.status == "accepted", outcomes["honest"].verdict.reasons


@pytest.mark.parametrize("sandbox", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_answers_computed_while_inputs_are_staged_never_reach_the_timed_calls(sandbox):
    # The inputs a contender stages are empty buffers; the parent fills them from the reference's
    # while the contender is frozen, so answers computed at staging are answers to nothing.
    baseline, outcomes = _bench("tall_matmul.py", ["cheat_precompute_on_stage", "tall_matmul_honest"], sandbox=sandbox)
    cheat = outcomes["cheat_precompute_on_stage"]
    assert cheat.verdict.status == "rejected", (cheat.speedup, cheat.speedup_ci)
    assert "timed-call outputs" in [c.name for c in cheat.verdict.checks if not c.passed]
    for outcome in (baseline, outcomes["tall_matmul_honest"]):
        assert outcome.verdict.status == "accepted", outcome.verdict.reasons


OPAQUE_INPUT = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, dtype):
        return (x * 2).to(dtype)

def get_inputs():
    return [torch.randn(64, 128), torch.float64]

def get_init_inputs():
    return []
"""


def test_inputs_the_parent_cannot_lay_out_are_staged_in_the_worker_and_said_so(tmp_path):
    path = tmp_path / "opaque_input.py"
    path.write_text(OPAQUE_INPUT)
    problem = load_problem(path)
    lines: list[str] = []
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        limits=Limits(memory_mb=4096, call_timeout_s=30),
        timing=TimingOptions(time_cap_s=1.0, min_samples=5, min_batches=3),
    )
    result = evaluate(
        problem, [], default_baseline(problem), options, progress=lambda event: lines.append(event.line())
    )
    assert result.baseline.verdict.status == "accepted", result.baseline.verdict.reasons
    assert all(s.measurement is not None for s in result.baseline.shapes), "timed all the same"
    assert any("inputs staged in each worker: an input of type dtype" in line for line in lines), lines


def test_bot_v_logs_each_contenders_hidden_time_batch_by_batch(caplog):
    # What a count or a rejection of hidden time rested on must be readable after a run
    # (`bot -v`): per contender, every kept batch's calls, replica, the parent's wall time, the
    # worker's report and the time left unexplained, which the check's medians cannot show.
    with caplog.at_level(logging.DEBUG, logger="bot.engine.evaluation.shape_run"):
        baseline, by_name = _bench("scale_add.py", ["honest"], cap_s=1.0)
    logged = {(r.args[1], r.args[2]): r for r in caplog.records if "hidden time" in r.getMessage()}
    for outcome in (baseline, by_name["honest"]):
        shape = outcome.shapes[0]
        record = logged[(shape.shape, outcome.candidate.name)]
        hidden, figures = record.args[3], record.args[4]
        sizes = shape.measurement.batch_sizes
        assert [f[0] for f in figures] == list(sizes)  # one entry per kept batch, in order
        for calls, _, wall_us, _, reported_us, unexplained_us, harness_us, _ in figures:
            # the parent's wall time holds the calls' report, the harness's work and the rest
            assert wall_us == pytest.approx(calls * (reported_us + unexplained_us + harness_us), abs=0.2 * calls)
        assert hidden["claimed_us"] > 0
