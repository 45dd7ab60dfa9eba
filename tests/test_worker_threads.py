"""On CPU every worker computes with one thread: workers take turns on the cores, and a tiny
kernel split over threads that other processes share is timed by its slowest thread."""

from __future__ import annotations

from conftest import PROBLEMS

from bot.core.domain import CandidateSource, Origin
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.problems import load_problem

REPORTER = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        return torch.zeros_like(x) + float(torch.get_num_threads())
"""


def _threads_seen(**options) -> str:
    problem = load_problem(PROBLEMS / "scale_add.py")
    cand = CandidateSource("threads", REPORTER, Origin("test"))
    result = evaluate(
        problem,
        [cand],
        None,
        EvalOptions(device="cpu", use_cache=False, timing=TimingOptions(time_cap_s=0.2), **options),
    )
    return result.candidates[0].verdict.reasons[0]  # the values check quotes what it got


def test_cpu_workers_compute_with_one_thread_unless_told():
    assert " got 1, " in _threads_seen()
    assert " got 2, " in _threads_seen(threads=2)
