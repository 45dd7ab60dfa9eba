"""CUDA-only (skipped on CPU machines): the reference's measured footprint reaches the memory
budget, and a problem's outputs larger than one channel frame pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.memory_budget import MemoryBudget, Reservation, device_budget
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits

pytestmark = pytest.mark.gpu


class _Recording(MemoryBudget):
    def __init__(self, budget: MemoryBudget):
        super().__init__(budget.free_bytes, budget.free_bytes, budget.where, budget.context_bytes)
        self.margin, self.usable = budget.margin, budget.usable
        self.grown: list[tuple[int, int, int]] = []

    def grow(self, reservation: Reservation, reference_bytes: int, contender_bytes: int, wanted: int) -> int:
        at_once = super().grow(reservation, reference_bytes, contender_bytes, wanted)
        self.grown.append((reference_bytes, contender_bytes, at_once))
        return at_once


def _options(budget: MemoryBudget | None = None) -> EvalOptions:
    return EvalOptions(
        device="cuda",
        use_cache=False,
        limits=Limits(memory_mb=32768, call_timeout_s=60),
        timing=TimingOptions(time_cap_s=1.0, min_samples=10),
        cache_root=Path("/tmp/kernel-bot-gpu-cache"),
        memory=budget,
    )


def test_the_gpu_budget_reads_free_memory_and_the_reference_measures_the_footprint():
    budget = _Recording(device_budget("cuda", 0))
    assert 0 < budget.free_bytes and budget.usable < budget.free_bytes
    problem = load_problem(PROBLEMS / "big_add.py")  # 64 Mi float32: 256 MiB in, 256 MiB out
    result = evaluate(problem, [load_candidate(CANDIDATES / "big_add_triton.py")], None, _options(budget))
    assert result.candidates[0].verdict.accepted, result.candidates[0].verdict.reasons
    ((reference, contender, at_once),) = budget.grown
    assert reference >= (512 + 1024) << 20  # inputs and outputs, and the float64 copies
    assert contender >= 2 * (512 << 20) and at_once == 1
    assert budget.held_bytes() == 0  # given back when the evaluation ended


def test_outputs_larger_than_a_frame_pass_on_the_gpu():
    problem = load_problem(PROBLEMS / "large_output.py")  # float64 reference outputs: 4 frames
    result = evaluate(problem, [load_candidate(CANDIDATES / "honest_large_output.py")], None, _options())
    assert result.candidates[0].verdict.accepted, result.candidates[0].verdict.reasons


# A CUDA worker's harness, then a freed 2 GiB tensor's segment with a small tensor carved from
# it still held, then the cache given back after an op: what stays reserved, in bytes.
PINNED = r"""
import torch
import bot.harness.worker as worker
h = worker.Harness(None, "cuda", 1)
big = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
del big
small = torch.ones(4 << 20, dtype=torch.uint8, device="cuda")  # from the freed segment's cache
h.give_back_cache()
print(torch.cuda.memory_reserved())
"""


def test_a_small_tensor_held_does_not_keep_a_freed_input_reserved():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", PINNED], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) < 1 << 30  # the 2 GiB went back; only what is in use stays
