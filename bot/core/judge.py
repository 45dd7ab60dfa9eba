"""The one judge of what a contender's numbers claim: significantly faster, implausible, claimed.

Everything that decides whether a contender counts asks here: the selection in stage 1
(bot.engine.loop.optimize), the result cache (bot.engine.evaluation.cache, through bot.core.conclusive), stage 2's
re-derivation (bot.github.rederive) and the reports (bot.report.data, `ProblemResult.improved`).
They all read a contender in its results.json form (bot.core.results_contenders): what stage 1
writes is what stage 2 re-derives, so the rule cannot differ between the stages.

- **Significant**: accepted, its interval (the geometric mean of the shapes' bounds, each shape
  counting equally) clears `min_speedup`, and no shape is significantly slower: that shape's
  verdict, set by bot.core.stats.speedup, is "slower" (its upper bound under 1/min_speedup), so
  a gain on decode does not pay for a clear loss on prefill.
- **Implausible**: a ratio above `max_plausible_speedup` or a median under the roofline floor
  (bot.core.plausible): it says more about the baseline or the clock than about the code.
- **Claimed**: significant and not implausible: the only improvement the bot publishes.

A problem's one word (results.json's `outcome`) follows from what its selection found, by
`problem_outcome`: "improved" means the selection kept a best, which it does only where claimed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.core.outcomes import ContenderOutcome
from bot.core.plausible import Implausible, shape_reasons
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.results_shapes import ShapeResult
from bot.core.settings import DEFAULTS

Contender = ContenderResult | BestResult


@dataclass(frozen=True)
class Thresholds:
    """The bars a claim must clear: the run's own in stage 1, the default branch's in stage 2."""

    min_speedup: float = DEFAULTS.min_speedup
    max_plausible_speedup: float = DEFAULTS.max_plausible_speedup  # above it: flagged, never claimed


@dataclass(frozen=True)
class Judgement:
    accepted: bool
    significant: bool  # accepted, the interval clears min_speedup, no shape significantly slower
    slower_shapes: tuple[str, ...]
    implausible: Implausible | None  # why its timing cannot be claimed; None where it can
    not_timed: str | None  # why its times say nothing of the code (a simulator), if they don't

    @property
    def claimed(self) -> bool:
        """A significant gain, timed and let through by the plausibility guard: what counts as improved."""
        return self.significant and self.plausible

    @property
    def plausible(self) -> bool:
        """Its ratios may be shown as a speedup, claimed or not: timed, and not implausible."""
        return self.not_timed is None and self.implausible is None


def slower_shapes(shapes: Iterable[ShapeResult]) -> tuple[str, ...]:
    """The shapes whose verdict is "slower" (bot.core.stats.speedup)."""
    return tuple(s.shape for s in shapes if s.significance == "slower")


def _implausible(c: Contender, max_plausible: float) -> Implausible | None:
    reasons = [
        reason
        for s in c.shapes
        for reason in shape_reasons(
            s.shape, s.speedup, s.measurement.median_us if s.measurement else None, s.floor_us, max_plausible
        )
    ]
    # Only an inconsistent document has an overall ratio above every shape's; it is not let through.
    if c.speedup is not None and c.speedup > max_plausible and not reasons:
        reasons.append(f"{c.speedup:,.1f}x overall is above the {max_plausible:g}x bound")
    return Implausible(c.name, c.speedup, c.speedup_ci, "; ".join(reasons)) if reasons else None


def judge(contender: Contender, thresholds: Thresholds, not_timed: str | None = None) -> Judgement:
    """What `contender`'s numbers claim against `thresholds`. A best is the accepted attempt it
    was selected from (stage 2 checks that attempt's verdict itself); `not_timed` is why the
    problem's times say nothing (its baseline ran under a simulator), which holds for every
    contender of it."""
    accepted = True if isinstance(contender, BestResult) else contender.is_accepted
    untimed = not_timed or (None if isinstance(contender, BestResult) else contender.not_timed)
    slower = slower_shapes(contender.shapes)
    ci = contender.speedup_ci
    significant = accepted and ci is not None and ci[0] >= thresholds.min_speedup and not slower
    return Judgement(
        accepted,
        significant,
        slower,
        _implausible(contender, thresholds.max_plausible_speedup),
        untimed,
    )


def problem_outcome(
    *, error: str | None, best: BestResult | None, not_timed: str | None, implausible: Sequence[Implausible]
) -> str:
    """A problem's outcome: "failed" (it could not be evaluated: `error`), "improved" (a `best`
    was selected: only a claimed contender is), "not timed" (its baseline's times say nothing of
    the code: `not_timed`), "implausible" (the guard flagged a win), else "no significant improvement"."""
    if error:
        return "failed"
    if best is not None:
        return "improved"
    if not_timed:
        return "not timed"
    return "implausible" if implausible else "no significant improvement"


def significant(outcome: ContenderOutcome, min_speedup: float) -> bool:
    """The judge's word on an evaluated contender, read in its results.json form: accepted, its
    interval (over shapes) clears `min_speedup`, and no shape got slower."""
    return judge(ContenderResult.of(outcome), Thresholds(min_speedup)).significant
