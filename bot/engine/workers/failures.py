"""How a worker's failure reads: GPU memory run out, a broken problem file, or the harness."""

from __future__ import annotations

from bot.core.domain import Problem
from bot.core.errors import BotError, GpuOutOfMemory, HarnessError, ProblemError
from bot.core.outcomes import ContenderOutcome
from bot.engine.workers.client import WorkerFailure
from bot.engine.workers.gpu_memory import says_out_of_memory


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
