"""How a worker's failure reads: GPU memory run out, a broken problem file, or the harness."""

from __future__ import annotations

import re

from bot.core.domain import Problem
from bot.core.errors import BotError, GpuOutOfMemory, HarnessError, ProblemError
from bot.core.outcomes import ContenderOutcome
from bot.engine.workers.client import WorkerFailure

# The last alternative: when an allocation fails, torch's caching allocator asks NVML which
# processes hold the GPU's memory, for the OutOfMemoryError's message (reportProcessMemoryInfo).
# Where NVML does not start in the worker, an assertion in that report is what the caller sees
# instead (tests/test_gpu_memory_retry.py has the message an H200 printed).
OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED"
    r'|nvml\w*\(\) INTERNAL ASSERT FAILED at "[^"]*CUDACachingAllocator\.cpp"'
)


def says_out_of_memory(text: str) -> bool:
    return OUT_OF_MEMORY.search(text) is not None


def problem_failure(problem: Problem, exc: WorkerFailure) -> BotError:
    if says_out_of_memory(exc.reason):
        # Before the phase: a reference can run out of memory while building its inputs beside
        # other workers; that is not a broken problem file.
        return GpuOutOfMemory(f"{problem.path}: reference worker ran out of GPU memory: {exc.reason}")
    if exc.phase in ("problem", "import", "construct"):
        return ProblemError(f"{problem.path}: {exc.reason}")
    return HarnessError(f"{problem.path}: reference worker failed: {exc.reason}")


def ran_out_of_gpu_memory(outcome: ContenderOutcome) -> bool:
    return not outcome.verdict.accepted and any(
        says_out_of_memory(c.evidence) for c in outcome.verdict.checks if not c.passed
    )
