"""CUDA-only (skipped on CPU machines): with samples from the parent's clock (docs/benchmark.md,
"A sample is the parent's"), a kernel timed against a copy of itself still says "no significant
difference" with a ratio near 1 in every timing mode, and the per-call spread cheat is never
claimed on the GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.judge import significant
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits

pytestmark = pytest.mark.gpu


def _options(mode: str) -> EvalOptions:
    return EvalOptions(
        device="cuda",
        use_cache=False,
        limits=Limits(memory_mb=32768, call_timeout_s=60),
        timing=TimingOptions(time_cap_s=3.0, mode=mode),
        cache_root=Path("/tmp/kernel-bot-gpu-cache"),
    )


@pytest.mark.parametrize("mode", ["latency", "graph"])
def test_a_kernel_against_a_copy_of_itself_is_no_difference(tmp_path, mode):
    problem = load_problem(PROBLEMS / "tall_matmul.py")
    copy = tmp_path / "copy.py"
    copy.write_text((CANDIDATES / "tall_matmul_honest.py").read_text())
    result = evaluate(
        problem,
        [load_candidate(CANDIDATES / "tall_matmul_honest.py"), load_candidate(copy)],
        default_baseline(problem),
        _options(mode),
    )
    for outcome in result.candidates:
        assert outcome.verdict.accepted, outcome.verdict.reasons
        assert not significant(outcome, 1.05), (mode, outcome.speedup, outcome.speedup_ci)
        assert 0.95 < outcome.speedup < 1.05, (mode, outcome.speedup, outcome.speedup_ci)


def test_per_call_times_spread_within_a_batch_are_never_claimed_on_the_gpu():
    problem = load_problem(PROBLEMS / "scale_add.py")
    result = evaluate(
        problem,
        [load_candidate(CANDIDATES / "cheat_spread_clock.py"), load_candidate(CANDIDATES / "honest.py")],
        default_baseline(problem),
        _options("latency"),
    )
    for outcome in result.candidates:
        if outcome.verdict.accepted:
            assert not significant(outcome, 1.05), (outcome.candidate.name, outcome.speedup, outcome.speedup_ci)
