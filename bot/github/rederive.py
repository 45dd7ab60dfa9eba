"""Every number stage 2 publishes, re-derived from the artifact's raw samples.

The artifact's speedups and intervals are claims; its samples are the evidence. Each shape's
ratio and interval are recomputed as `bot.core.stats.speedup` (the function stage 1 used, seeded
from its inputs) computes them, vectorised (bot.github.bootstrap: the same draws and medians, so
honest artifacts agree to about 1e-15), at stage 2's own confidence level and resample count;
significance and the choice of the best candidate are re-judged by stage 1's own judge
(`bot.core.judge`) with the trusted `min-speedup` and plausibility bound (the default branch's,
never the artifact's), and any claim that disagrees makes the whole artifact inconsistent:
nothing of it is published.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from typing import Any

from bot.core import stats as bench
from bot.core.errors import BotError
from bot.core.judge import Thresholds, judge, problem_outcome, slower_shapes
from bot.core.measurement import Speedup
from bot.core.results import ProblemResult, Results
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.results_shapes import MeasurementResult, ShapeResult
from bot.core.roofline import Peaks, floor_us, peaks_for
from bot.core.settings import DEFAULTS
from bot.github import bootstrap
from bot.github.rederive_cost import Cost, over_budget, total_cost

REL_TOLERANCE = 1e-9  # JSON round-trips floats exactly; this only absorbs summation order
# The interval's level and resample count stage 1 uses (bench.speedup's defaults): a claim is a
# 95 % interval, so an artifact may not narrow it by naming a lower level or fewer resamples.
_SPEEDUP_DEFAULTS = inspect.signature(bench.speedup).parameters
LEVEL: float = _SPEEDUP_DEFAULTS["level"].default
RESAMPLES: int = _SPEEDUP_DEFAULTS["resamples"].default

Contender = ContenderResult | BestResult
Device = tuple[str, Peaks | None]  # its name, stage 2's peaks for it


class InconsistentArtifact(Exception):
    """A published number does not follow from the artifact's own samples."""


def _close(claimed: Any, derived: float | None) -> bool:
    if derived is None or claimed is None:
        return claimed is None and derived is None
    return math.isclose(float(claimed), derived, rel_tol=REL_TOLERANCE, abs_tol=1e-12)


def _device(problem: ProblemResult) -> Device:
    """Where the problem was measured, with stage 2's own peaks for it (None: no floor known)."""
    env = problem.environment
    name = (env.device_name if env else None) or "an unknown device"
    return name, peaks_for(name) if env is not None and env.device == "cuda" else None


def _trusted_floor(shape: ShapeResult, where: str, device: Device) -> float | None:
    """The shape's roofline floor from its byte and flop counts and stage 2's peaks (the default
    branch's bot.core.roofline, never a table stage 1 ran with); InconsistentArtifact where the
    artifact states another floor, or claims a speedup on a device with known peaks without the
    counts. A shape without counts or a speedup has no floor here."""
    name, peaks = device
    if shape.nbytes is None:
        if peaks is not None and (shape.speedup, shape.speedup_ci) != (None, None):
            raise InconsistentArtifact(
                f"{where}: a speedup on {name} without the byte count its roofline floor is computed from "
                "(nbytes: a stage 1 older than this stage 2 writes none)"
            )
        return None
    floor = floor_us(shape.nbytes, shape.flops, peaks)
    if not _close(shape.floor_us, floor):
        raise InconsistentArtifact(
            f"{where}.floor_us is {shape.floor_us!r}, its byte and flop counts on {name} give {floor!r}"
        )
    return floor


def _shape_task(
    shape: ShapeResult, where: str, min_speedup: float, device: Device
) -> tuple[ShapeResult, tuple[Any, ...] | None]:
    """The shape with its measurement and floor checked and refreshed; the arguments that
    re-derive its speedup."""
    claimed = shape.measurement
    candidate = claimed.samples if claimed else None  # its batches add up: Results.from_json checked
    floor = _trusted_floor(shape, where, device)
    shape = replace(shape, floor_us=floor, pct_of_floor=None)
    if candidate is not None and claimed is not None:
        if not _close(claimed.median_us, candidate.median_us):
            raise InconsistentArtifact(
                f"{where}.measurement.median_us is {claimed.median_us!r}, its samples give {candidate.median_us!r}"
            )
        shape = replace(
            shape,
            measurement=MeasurementResult.of(candidate),
            pct_of_floor=100.0 * floor / candidate.median_us if floor is not None else None,
        )
    if shape.speedup is None and shape.speedup_ci is None:
        return shape, None
    derivation = shape.derivation
    if candidate is None or derivation is None:
        raise InconsistentArtifact(f"{where}: a speedup without the raw samples it was derived from")
    baseline = derivation.baseline
    floor_spread = bench.worker_spread([baseline])  # stage 1 never goes under the baseline's own
    if derivation.spread_log_sd < floor_spread.log_sd * (1 - REL_TOLERANCE) or (
        floor_spread.df and derivation.spread_df < floor_spread.df
    ):
        raise InconsistentArtifact(
            f"{where}.derivation: a worker spread narrower than the baseline's own "
            f"({derivation.spread_log_sd!r} < {floor_spread.log_sd!r})"
        )
    if shape.level is not None and shape.level != LEVEL:
        raise InconsistentArtifact(f"{where}.level is {shape.level!r}: stage 2 judges claims at {LEVEL!r}")
    if derivation.resamples != RESAMPLES:
        raise InconsistentArtifact(
            f"{where}.derivation.resamples is {derivation.resamples!r}: stage 2 re-derives with {RESAMPLES!r}"
        )
    return shape, (
        baseline,
        candidate,
        min_speedup,
        LEVEL,
        RESAMPLES,
        bench.WorkerSpread(derivation.spread_log_sd, derivation.spread_df),
    )


def _speedup(args: tuple[Any, ...]) -> Speedup:
    """`bench.speedup` of one shape, vectorised (bot.github.bootstrap)."""
    baseline, candidate, min_speedup, level, resamples, spread = args
    return bootstrap.speedup(baseline, candidate, min_speedup, level=level, resamples=resamples, spread=spread)


def _pair(ci: Any) -> tuple[Any, Any]:
    return (ci[0], ci[1]) if ci else (None, None)


def _apply(shape: ShapeResult, where: str, found: Speedup) -> ShapeResult:
    claimed_ci = _pair(shape.speedup_ci)
    for label, claimed, derived in (
        ("speedup", shape.speedup, found.ratio),
        ("speedup_ci[0]", claimed_ci[0], found.ci_low),
        ("speedup_ci[1]", claimed_ci[1], found.ci_high),
    ):
        if not _close(claimed, derived):
            raise InconsistentArtifact(f"{where}.{label} is {claimed!r}, its samples give {derived!r}")
    return replace(
        shape, speedup=found.ratio, speedup_ci=(found.ci_low, found.ci_high), significance=found.significance
    )


def _contender(c: Contender, shapes: tuple[ShapeResult, ...], where: str) -> Contender:
    """A contender's geometric-mean speedup and interval from its (re-derived) shapes."""
    ratios = [s.speedup for s in shapes]
    speedup = ci = None
    if shapes and all(r is not None for r in ratios):
        speedup = bench.geomean(ratios)  # type: ignore[arg-type]
        ci = (
            bench.geomean([s.speedup_ci[0] for s in shapes]),  # type: ignore[index]
            bench.geomean([s.speedup_ci[1] for s in shapes]),
        )  # type: ignore[index]
    claimed_ci = _pair(c.speedup_ci)
    for label, claimed, derived in (
        ("speedup", c.speedup, speedup),
        ("speedup_ci[0]", claimed_ci[0], ci[0] if ci else None),
        ("speedup_ci[1]", claimed_ci[1], ci[1] if ci else None),
    ):
        if not _close(claimed, derived):
            raise InconsistentArtifact(f"{where}.{label} is {claimed!r}, its shapes give {derived!r}")
    if isinstance(c, BestResult):
        return replace(c, shapes=shapes, speedup=speedup, speedup_ci=ci)  # type: ignore[arg-type]
    return replace(
        c,
        shapes=shapes,
        speedup=speedup,
        speedup_ci=ci,
        slower_shapes=slower_shapes(shapes),
        median_us=shapes[0].measurement.median_us if shapes and shapes[0].measurement else None,
    )


def _contenders(results: Results) -> list[tuple[Contender, str, Device]]:
    out: list[tuple[Contender, str, Device]] = []
    for i, p in enumerate(results.problems):
        where, device = f"results.problems[{i}]", _device(p)
        if p.baseline:
            out.append((p.baseline, f"{where}.baseline", device))
        out += [(a, f"{where}.attempts[{j}]", device) for j, a in enumerate(p.attempts)]
        if p.best:
            out.append((p.best, f"{where}.best", device))
    return out


def _judged(
    p: ProblemResult, i: int, derived: tuple[Any, tuple[ContenderResult, ...], Any], trusted: Thresholds
) -> ProblemResult:
    """The problem with significance, plausibility and its best re-judged (bot.core.judge)
    against the trusted thresholds."""
    baseline, attempts, best = derived
    judged = [judge(a, trusted) for a in attempts]
    flags = tuple(j.implausible for j in judged if j.accepted and j.implausible is not None)
    flagged = {f.name for f in flags}
    attempts = tuple(replace(a, significant=j.significant) for a, j in zip(attempts, judged, strict=True))
    if best is not None:
        twin = next((a for a in attempts if a.name == best.name and a.source_sha256 == best.source_sha256), None)
        if twin is None or twin.speedup_ci != best.speedup_ci:
            raise InconsistentArtifact(f"results.problems[{i}].best: not the numbers of the attempt it names")
        verdict = judge(best, trusted)
        if verdict.implausible is not None and twin.name not in flagged:
            flags, flagged = flags + (verdict.implausible,), flagged | {twin.name}
        if twin.name in flagged or not (twin.is_accepted and verdict.significant):
            best = None  # flagged for a human, or its interval does not clear the trusted bar
    implausible = flags + tuple(f for f in p.implausible if f.name not in flagged)
    # The outcome word by stage 1's own rule, from what survived: never the artifact's word.
    outcome = problem_outcome(error=p.error, best=best, not_timed=p.not_timed, implausible=implausible)
    return replace(
        p,
        min_speedup=trusted.min_speedup,
        max_plausible_speedup=trusted.max_plausible_speedup,
        implausible=implausible,
        baseline=baseline,
        attempts=attempts,
        best=best,
        outcome=outcome,
    )


def cost_of(results: Results) -> Cost:
    """The bootstrap work re-deriving `results` takes, from its sizes alone."""
    return total_cost(
        [
            (s.derivation.baseline, s.measurement.samples, RESAMPLES, s.derivation.spread_df)
            for c, *_ in _contenders(results)
            for s in c.shapes
            if s.derivation is not None and s.measurement is not None and (s.speedup, s.speedup_ci) != (None, None)
        ]
    )


def check_cost(results: Results) -> None:
    """BotError, before any bootstrap runs, when the artifact asks for more re-derivation than
    stage 2 does (bot.github.rederive_cost)."""
    why = over_budget(cost_of(results))
    if why:
        raise BotError(f"untrusted results rejected: {why}; nothing is published")


def rederive(
    results: Results, min_speedup: float, max_plausible_speedup: float = DEFAULTS.max_plausible_speedup
) -> Results:
    """`results` with every number following from its samples, judged against the trusted
    `min_speedup` and `max_plausible_speedup`; InconsistentArtifact where a claim does not."""
    trusted = Thresholds(min_speedup, max_plausible_speedup)
    check_cost(results)
    contenders = _contenders(results)
    shapes: list[list[ShapeResult]] = []
    pending = []
    for n, (c, where, device) in enumerate(contenders):
        shapes.append([])
        for k, shape in enumerate(c.shapes):
            refreshed, task = _shape_task(shape, f"{where}.shapes[{k}]", min_speedup, device)
            shapes[n].append(refreshed)
            if task is not None:
                pending.append((n, k, f"{where}.shapes[{k}]", task))
    for (n, k, where, _), found in zip(pending, (_speedup(t) for *_, t in pending)):
        shapes[n][k] = _apply(shapes[n][k], where, found)
    derived = iter([_contender(c, tuple(s), where) for (c, where, _), s in zip(contenders, shapes)])
    problems = []
    for i, p in enumerate(results.problems):
        baseline = next(derived) if p.baseline else None
        attempts = tuple(next(derived) for _ in p.attempts)
        best = next(derived) if p.best else None
        problems.append(_judged(p, i, (baseline, attempts, best), trusted))  # type: ignore[arg-type]
    return replace(results, problems=tuple(problems), min_speedup=min_speedup)
