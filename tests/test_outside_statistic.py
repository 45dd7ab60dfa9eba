"""Claims made of the parent's own clock (docs/benchmark.md, "what a sample is"; docs/security.md):
one sample per timed batch, its window and staging on the parent's clock less the harness's
calibrated work, batch sizes the parent draws from its own measurements. Each hostile
candidate here got a claim when per-call samples were the worker's word; its honest twin is
accepted, and claimed where it is really faster."""

from __future__ import annotations

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.judge import significant
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # claims from real timing: run alone

# A memory-bound problem with a 2 MiB output: allocating and first touching the output is a
# large share of a call (CPU: about half), the share a candidate would gain by moving it
# out of the timed window.
WIDE_SCALE_ADD = """
import torch
import torch.nn as nn

N = 256
D = 2048
SHAPES = {"wide": {"N": 256, "D": 2048}}


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d))
        self.b = nn.Parameter(torch.randn(d))

    def forward(self, x):
        return torch.relu(x * self.w + self.b) + x.mean(-1, keepdim=True)


def get_inputs():
    return [torch.randn(N, D)]


def get_init_inputs():
    return [D]
"""


def _bench(problem_path, names: list[str], cap_s: float = 3.0, **timing):
    problem = load_problem(problem_path)
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        limits=Limits(memory_mb=4096, call_timeout_s=30),
        timing=TimingOptions(time_cap_s=cap_s, min_samples=8, min_batches=8, **timing),
    )
    result = evaluate(
        problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], default_baseline(problem), options
    )
    return result.baseline, {o.candidate.name: o for o in result.candidates}


def _not_claimed(outcome) -> None:
    if outcome.verdict.status == "accepted":
        assert not significant(outcome, 1.05), (outcome.speedup, outcome.speedup_ci)


def test_per_call_times_spread_within_a_batch_are_never_claimed():
    baseline, outcomes = _bench(PROBLEMS / "scale_add.py", ["cheat_spread_clock", "honest"], batch_target_us=40_000)
    cheat = outcomes["cheat_spread_clock"]
    _not_claimed(cheat)
    assert cheat.speedup is None or cheat.speedup < 2.0, (cheat.speedup, cheat.speedup_ci)
    for outcome in (baseline, outcomes["honest"]):
        assert outcome.verdict.status == "accepted", outcome.verdict.reasons


def test_outputs_faulted_in_while_inputs_are_staged_are_never_claimed(tmp_path):
    path = tmp_path / "wide_scale_add.py"
    path.write_text(WIDE_SCALE_ADD)
    baseline, outcomes = _bench(path, ["cheat_fault_in_staging", "honest_fresh_outputs"])
    cheat, honest = outcomes["cheat_fault_in_staging"], outcomes["honest_fresh_outputs"]
    # Its twin can be faster than the baseline in earnest (2.37x [2.01, 2.83] on 2 vCPUs): the
    # cheat may be claimed as much as the twin, never more.
    assert honest.verdict.status == "accepted", honest.verdict.reasons
    # The cheat does the same work as its twin, only earlier: its time is the twin's, never
    # significantly faster (point estimates of two 2-vCPU runs differ by 1.5x under load).
    if cheat.speedup_ci is not None and honest.speedup_ci is not None:
        assert cheat.speedup_ci[0] <= honest.speedup_ci[1], (cheat.speedup_ci, honest.speedup_ci)


def test_a_slow_warm_up_call_does_not_decide_the_batch_sizes():
    baseline, outcomes = _bench(PROBLEMS / "scale_add.py", ["cheat_slow_warmup", "honest"])
    _not_claimed(outcomes["cheat_slow_warmup"])
    assert outcomes["honest"].verdict.status == "accepted", outcomes["honest"].verdict.reasons
