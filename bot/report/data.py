"""Views of a results.json payload for the renderers, and the one set of number formats.

Every renderer (PR body, sticky comment, step summary, JUnit, plan title) reads results through
these helpers so that a number is spelled the same way everywhere. They read the typed document
(bot.core.results), which stage 2 builds only after schema validation; text that candidate code
could influence goes through `cell` before it reaches markdown.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bot.core.domain import Environment
from bot.core.results import ProblemResult, Results
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.results_shapes import ShapeResult

MISSING = "–"  # en dash: one glyph for "absent" in every table
_WHITESPACE = re.compile(r"\s+")


# -- number formats ------------------------------------------------------------------------


def fmt_us(value: float | None) -> str:
    """Microseconds with 3-4 significant digits: 3.21, 45.6, 1,234."""
    if value is None:
        return MISSING
    if abs(value) < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if abs(value) < 100 else f"{value:,.0f}"


def fmt_ratio(value: float | None) -> str:
    """A speedup factor without its `x`: two decimals, two significant digits below 0.1."""
    if value is None:
        return MISSING
    return f"{value:.2f}" if abs(value) >= 0.1 else f"{value:#.2g}"  # 0.0040, not 0.004


def fmt_speedup(value: float | None, ci: Iterable[float] | None = None) -> str:
    """`1.42x [1.38, 1.47]` (the interval only when known)."""
    if value is None:
        return MISSING
    bounds = list(ci or ())
    text = f"{fmt_ratio(value)}x"
    if len(bounds) == 2:
        text += f" [{fmt_ratio(bounds[0])}, {fmt_ratio(bounds[1])}]"
    return text


def fmt_err(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1e}"


def fmt_pct(value: float | None) -> str:
    """Percent of the roofline floor; `n/a` where the device has no known floor (CPUs)."""
    return "n/a" if value is None else f"{value:.0f}%"


def cell(text: Any, limit: int = 200) -> str:
    """Text safe inside a markdown table cell: one line, no HTML, no `|`, no @-mentions.

    Names and rejection evidence can carry strings printed by candidate code, which an LLM
    wrote from PR content; they must not be able to inject markup or ping people.
    """
    if text is None or text == "":
        return MISSING
    flat = _WHITESPACE.sub(" ", str(text)).strip()
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    flat = html.escape(flat, quote=False).replace("|", "\\|").replace("`", "'")
    return flat.replace("@", "@\u200b")  # a zero-width space breaks the mention


def fence(text: str, lang: str = "") -> str:
    """A fenced code block whose fence is longer than any backtick run inside `text`."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


# -- views -----------------------------------------------------------------------------------

Contender = ContenderResult | BestResult


@dataclass(frozen=True)
class ShapeRow:
    """One table row: the best candidate (or runner-up) of one operator on one shape."""

    problem: str
    shape: str
    inputs: str | None
    baseline_us: float | None
    candidate_us: float | None
    speedup: float | None
    ci: tuple[float, float] | None
    pct_of_floor: float | None
    max_abs_err: float | None
    norm_rel_err: float | None


def problems(results: Results) -> tuple[ProblemResult, ...]:
    return results.problems


def failed_problem(problem: ProblemResult) -> bool:
    """A problem that could not be evaluated: outcome "failed", its error in `error`."""
    return problem.failed


def plausible(problem: ProblemResult, attempt: Contender) -> bool:
    """An attempt (or best) whose ratios may be shown as a speedup: timed, not under a simulator
    (bot.engine.evaluation.simulated), and not implausible at the problem's bound (bot.core.judge). Stage 2
    reads results.json as untrusted data, so the renderers ask the judge rather than trust `best`."""
    return problem.judge(attempt).plausible


def improved(results: Results) -> list[ProblemResult]:
    """Problems whose best candidate is a claim (`ProblemResult.improved`)."""
    return list(results.improved)


def median_us(shape: ShapeResult | None) -> float | None:
    return shape.measurement.median_us if shape is not None and shape.measurement is not None else None


def runner_up(problem: ProblemResult) -> ContenderResult | None:
    """The accepted, timed attempt ranked as `optimize.select_best` ranks winners."""
    timed = [a for a in problem.attempts if a.accepted and a.speedup_ci is not None and plausible(problem, a)]
    return max(timed, key=lambda a: (a.speedup_ci[0], a.speedup or 0.0), default=None)  # type: ignore[index]


def contender(problem: ProblemResult) -> Contender | None:
    """The best candidate when one improved, else the runner-up (shown honestly as such)."""
    best = problem.best
    return best if best is not None and plausible(problem, best) else runner_up(problem)


def shape_rows(problem: ProblemResult) -> list[ShapeRow]:
    """One row per shape of the problem's contender, with the baseline's time beside it."""
    chosen = contender(problem)
    if chosen is None:
        return []
    base = {s.shape: median_us(s) for s in (problem.baseline.shapes if problem.baseline else ())}
    rows = []
    for s in chosen.shapes:
        cand_us, ratio = median_us(s), s.speedup
        # speedup = baseline median / candidate median, so the product recovers a missing baseline.
        base_us = base.get(s.shape) or (cand_us * ratio if cand_us and ratio else None)
        rows.append(
            ShapeRow(
                problem.problem,
                s.shape,
                s.inputs,
                base_us,
                cand_us,
                ratio,
                s.speedup_ci,
                s.pct_of_floor,
                s.max_abs_err,
                s.norm_rel_err,
            )
        )
    return rows


def best_speedup(problem: ProblemResult) -> tuple[float | None, tuple[float, float] | None]:
    chosen = contender(problem)
    return (None, None) if chosen is None else (chosen.speedup, chosen.speedup_ci)


def rejection_reasons(attempt: ContenderResult) -> list[str]:
    return [str(r) for r in attempt.reasons]


def attempt_counts(problem: ProblemResult) -> tuple[int, int, Counter]:
    """(tried, rejected, failed-check counts): reasons are "check: evidence", grouped by check."""
    attempts = problem.attempts
    rejected = [a for a in attempts if not a.accepted]
    checks: Counter = Counter()
    for a in rejected:
        names = {r.split(":", 1)[0].strip() for r in rejection_reasons(a)} or {"unknown"}
        checks.update(names)
    return len(attempts), len(rejected), checks


def environment(results: Results) -> Environment | None:
    """The first problem's environment: one run measures every problem on one machine."""
    return next((p.environment for p in problems(results) if p.environment is not None), None)


def device_label(results: Results) -> str:
    env = environment(results)
    return str((env.device_name if env else None) or "an unknown device")


@dataclass(frozen=True)
class ChartBar:
    """One bar of the speedup chart: an operator on one shape, or a note where nothing was timed."""

    problem: str
    shape: str
    speedup: float | None
    ci: tuple[float, float] | None
    claimed: bool  # the operator's best candidate, its whole interval over the threshold
    note: str | None = None  # why there is no bar (not timed under a simulator)


def chart_bars(results: Results) -> list[ChartBar]:
    """Every operator's contender per shape (claimed or not, faster or slower), and a note for
    each operator verified but not timed; implausible timings are never drawn."""
    claimed = {id(p) for p in improved(results)}
    bars = []
    for p in problems(results):
        if p.not_timed:
            bars.append(ChartBar(p.problem, "", None, None, False, f"not timed: {p.not_timed}"))
            continue
        for r in shape_rows(p):
            if r.speedup is not None and r.ci is not None:
                bars.append(ChartBar(p.problem, r.shape, r.speedup, r.ci, id(p) in claimed))
    return bars
