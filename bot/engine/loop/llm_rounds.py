"""The LLM's rounds on one problem: propose, judge, feed the verdicts back, until the budget,
the round limit, the token budget or the roofline floor says stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.core.domain import CandidateSource, Problem
from bot.core.errors import BotError
from bot.core.outcomes import ContenderOutcome
from bot.core.progress import Progress, RoundStarted
from bot.engine.loop.attempts import Attempt, OptimizeOptions
from bot.propose.base import BudgetExhausted, Feedback, Hardware, ProposalRequest, Proposer


def feedback_for(outcome: ContenderOutcome) -> Feedback:
    """What the next prompt learns about a candidate: the verifier's evidence, or its timing."""
    verdict = outcome.verdict
    if verdict.accepted:
        shape = outcome.shapes[0] if outcome.shapes else None
        return Feedback(
            outcome.candidate,
            "accepted",
            "passed every check",
            speedup=outcome.speedup,
            median_us=outcome.median_us,
            baseline_us=(
                shape.measurement.median_us / shape.speedup.ratio
                if shape and shape.speedup and shape.measurement
                else None
            ),
            floor_us=shape.floor_us if shape else None,
        )
    failed = [c for c in verdict.checks if not c.passed]
    first = failed[0]
    log_tail = str(first.details.get("log_tail", ""))[-1500:]
    if first.name == "import":
        status = "syntax_error" if "SyntaxError" in first.evidence else "compile_error"
    elif first.name in ("call", "construction", "start"):
        status = "runtime_error"
    else:
        status = "rejected"
    message = "\n".join(verdict.reasons) + (f"\n{log_tail}" if log_tail else "")
    return Feedback(outcome.candidate, status, message)


def near_roofline(attempts: list[Attempt], pct: float) -> bool:
    return any(
        a.outcome.verdict.accepted and a.outcome.shapes and all((s.pct_of_floor or 0) >= pct for s in a.outcome.shapes)
        for a in attempts
    )


@dataclass(frozen=True)
class Rounds:
    """What the LLM's rounds on one problem share: where they start, the budget, and how a
    round's candidates are judged (`run` adds their attempts to `attempts`)."""

    problem: Problem
    baseline: CandidateSource
    options: OptimizeOptions
    hardware: Hardware
    attempts: list[Attempt]
    run: Callable[[int, list[CandidateSource]], None]
    deadline: float  # time.monotonic()
    progress: Progress


def llm_rounds(rounds: Rounds, proposer: Proposer | None, info: dict[str, Any]) -> str:
    if proposer is None:
        from bot.propose.llm import LlmProposer

        if not rounds.options.model:
            raise BotError("the llm strategy needs --model (and OPENAI_API_KEY / OPENAI_BASE_URL)")
        proposer = LlmProposer(
            rounds.options.model, samples=rounds.options.samples, max_total_tokens=rounds.options.max_tokens
        )
    history: list[Feedback] = [feedback_for(a.outcome) for a in rounds.attempts][-6:]
    floor = next((s.floor_us for a in rounds.attempts for s in a.outcome.shapes if s.floor_us), None)
    current = rounds.baseline.source
    stopped = "max rounds"
    for round_ in range(1, rounds.options.max_rounds + 1):
        if time.monotonic() > rounds.deadline:
            stopped = "budget"
            break
        if near_roofline(rounds.attempts, rounds.options.roofline_stop_pct):
            stopped = "near the roofline floor"
            break
        request = ProposalRequest(
            rounds.problem,
            current,
            rounds.hardware,
            floor,
            round_,
            rounds.options.samples,
            tuple(history),
            rounds.options.backend,
        )
        rounds.progress(RoundStarted(rounds.problem.name, "llm", round_))
        try:
            cands = proposer.propose(request)
        except BudgetExhausted as exc:
            stopped = f"token budget: {exc}"
            break
        history.extend(getattr(proposer, "last_failures", []))
        if cands:
            before = len(rounds.attempts)
            rounds.run(round_, cands)
            history.extend(feedback_for(a.outcome) for a in rounds.attempts[before:])
            for a in rounds.attempts[before:]:
                if a.outcome.verdict.accepted:
                    floor = floor or next((s.floor_us for s in a.outcome.shapes if s.floor_us), None)
    info.update(
        {
            "tokens": getattr(proposer, "tokens_used", 0),
            "cost_usd": getattr(proposer, "cost_usd", 0.0),
            "transcript": [e.to_json() for e in getattr(proposer, "transcript", [])],
        }
    )
    return stopped
