"""One problem's optimisation: its options, and each candidate it tried with the round that
proposed it (the loop in bot.engine.loop.optimize and the LLM's rounds in bot.engine.loop.llm_rounds both
read and add to them)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bot.core.judge import Thresholds, judge
from bot.core.outcomes import BASELINE_LOST, ContenderOutcome
from bot.core.results_contenders import ContenderResult
from bot.core.settings import DEFAULTS, Backend, Strategy
from bot.engine.evaluation.options import EvalOptions


@dataclass(frozen=True)
class OptimizeOptions:
    strategy: Strategy = DEFAULTS.strategy
    model: str | None = DEFAULTS.model
    backend: Backend = DEFAULTS.backend
    samples: int = DEFAULTS.samples
    budget_s: float = DEFAULTS.budget_s
    max_rounds: int = DEFAULTS.max_rounds
    max_tokens: int | None = DEFAULTS.max_tokens  # the LLM's token budget per problem
    min_speedup: float = DEFAULTS.min_speedup
    max_plausible_speedup: float = DEFAULTS.max_plausible_speedup  # above it: flagged, never claimed
    roofline_stop_pct: float = 90.0  # stop refining once the best reaches this % of the floor
    exclude: tuple[str, ...] = DEFAULTS.exclude  # fnmatch patterns of search candidate names to leave out
    evaluation: EvalOptions = field(kw_only=True)  # no default: its device is resolved, never assumed

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(self.min_speedup, self.max_plausible_speedup)


@dataclass(frozen=True)
class Attempt:
    round: int
    outcome: ContenderOutcome
    # Its results.json form, built once: what the judge (bot.core.judge) reads, for selection and
    # for the document alike.
    result: ContenderResult = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", ContenderResult.of(self.outcome, self.round, self.reason))

    @property
    def status(self) -> str:
        return self.outcome.verdict.status

    @property
    def reason(self) -> str:
        if not self.outcome.verdict.accepted:
            return "; ".join(self.outcome.verdict.reasons)
        if self.outcome.not_timed:
            return f"correct; not timed: {self.outcome.not_timed}"
        ci = self.outcome.speedup_ci
        if ci is None:
            lost = [c.evidence for c in self.outcome.verdict.checks if c.name == BASELINE_LOST]
            return "accepted (not timed against a baseline" + "".join(f"; {why}" for why in lost) + ")"
        slower = self.outcome.slower_shapes()
        return f"accepted: {self.outcome.speedup:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}]" + (
            f"; significantly slower on {', '.join(slower)}" if slower else ""
        )

    def judged(self, thresholds: Thresholds) -> ContenderResult:
        """Its entry in results.json, with the judge's word on its significance."""
        return replace(self.result, significant=judge(self.result, thresholds).significant)
