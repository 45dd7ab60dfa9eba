"""How a worker's failure reads: GPU memory run out, a broken problem file, or the harness."""

from __future__ import annotations

from bot.core.domain import Problem
from bot.core.errors import BotError, GpuOutOfMemory, HarnessError, ProblemError
from bot.core.outcomes import ContenderOutcome
from bot.engine.workers.client import WorkerFailure
from bot.engine.workers.gpu_memory import says_out_of_memory

LAST_WORDS = 3  # lines of a dead reference's own output quoted in its problem's failure


def problem_failure(problem: Problem, exc: WorkerFailure) -> BotError:
    said = exc.reason + last_words(exc)
    if says_out_of_memory(said):
        # Before the phase: a reference can run out of memory while building its inputs beside
        # other workers; that is not a broken problem file.
        return GpuOutOfMemory(f"{problem.path}: reference worker ran out of GPU memory: {said}")
    if exc.phase in ("problem", "import", "construct"):
        return ProblemError(f"{problem.path}: {said}")
    return HarnessError(f"{problem.path}: reference worker failed: {said}")


def last_words(exc: WorkerFailure) -> str:
    """The last lines the worker wrote (its stderr, a traceback) that its reason does not
    already say: a reference that died "with code 1 without a result" left its cause there
    (KernelBench's 1_Conv2D_ReLU_BiasAdd on the H100 said nothing more). Where the reason says
    the traceback's last line, its exception, the frames above it add nothing: KernelBench's
    66_Matmul_Dropout_Softmax's one-line reason quoted the harness's own frames after it."""
    written = [line.strip() for line in exc.log_tail.splitlines() if line.strip()]
    if written and _says(exc.reason, written[-1]):
        return ""
    lines = [line for line in written if line not in exc.reason]
    return f" (its last words: {' | '.join(lines[-LAST_WORDS:])})" if lines else ""


def _says(reason: str, line: str) -> bool:
    """Whether `reason` says `line`, an exception's line as a traceback ends: itself, or its
    message after the exception's module-qualified name (`bot.harness.checked.DrawsInForward:`)."""
    name, colon, message = line.partition(": ")
    qualified = bool(colon) and all(part.isidentifier() for part in name.split("."))
    return line in reason or (qualified and f"{name.rsplit('.', 1)[-1]}: {message}" in reason)


def ran_out_of_gpu_memory(outcome: ContenderOutcome) -> bool:
    return not outcome.verdict.accepted and any(
        says_out_of_memory(c.evidence) for c in outcome.verdict.checks if not c.passed
    )
