"""Every number stage 2 publishes, re-derived from the artifact's raw samples.

The artifact's speedups and intervals are claims; its samples are the evidence. Each shape's
ratio and interval are recomputed with `bot.core.stats.speedup` (the very function stage 1 used,
seeded from its inputs, so honest artifacts agree to the last bit), significance and the
choice of the best candidate are re-judged with the trusted `min-speedup`, and any claim that
disagrees makes the whole artifact inconsistent: nothing of it is published.
"""

from __future__ import annotations

import copy
import math
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bot.core import stats as bench
from bot.core.domain import Measurement, Speedup

REL_TOLERANCE = 1e-9  # JSON round-trips floats exactly; this only absorbs summation order


class InconsistentArtifact(Exception):
    """A published number does not follow from the artifact's own samples."""


def _close(claimed: Any, derived: float | None) -> bool:
    if derived is None or claimed is None:
        return claimed is None and derived is None
    return math.isclose(float(claimed), derived, rel_tol=REL_TOLERANCE, abs_tol=1e-12)


def _measurement(data: dict[str, Any], where: str) -> Measurement:
    try:
        return Measurement.from_samples_json(data)
    except ValueError as exc:
        raise InconsistentArtifact(f"{where}: {exc}") from None


def _shape_task(shape: dict[str, Any], where: str, min_speedup: float) -> tuple[Any, ...] | None:
    """Check and refresh one shape's measurement; the arguments that re-derive its speedup."""
    m_json = shape.get("measurement")
    candidate = _measurement(m_json, f"{where}.measurement") if m_json else None
    if candidate is not None:
        if not _close(m_json["median_us"], candidate.median_us):
            raise InconsistentArtifact(f"{where}.measurement.median_us is {m_json['median_us']!r}, "
                                       f"its samples give {candidate.median_us!r}")
        shape["measurement"] = candidate.to_json()
        floor = shape.get("floor_us")
        shape["pct_of_floor"] = 100.0 * floor / candidate.median_us if floor is not None else None
    if shape.get("speedup") is None and shape.get("speedup_ci") is None:
        return None
    derivation = shape.get("derivation")
    if candidate is None or derivation is None:
        raise InconsistentArtifact(f"{where}: a speedup without the raw samples it was derived from")
    baseline = _measurement(derivation["baseline"], f"{where}.derivation.baseline")
    floor_spread = bench.worker_spread([baseline])  # stage 1 never goes under the baseline's own
    if derivation["spread_log_sd"] < floor_spread.log_sd * (1 - REL_TOLERANCE) or (
            floor_spread.df and derivation["spread_df"] < floor_spread.df):
        raise InconsistentArtifact(f"{where}.derivation: a worker spread narrower than the baseline's own "
                                   f"({derivation['spread_log_sd']!r} < {floor_spread.log_sd!r})")
    return (baseline, candidate, min_speedup, float(shape.get("level", 0.95)), derivation["resamples"],
            bench.WorkerSpread(derivation["spread_log_sd"], derivation["spread_df"]))


def _speedup(args: tuple[Any, ...]) -> Speedup:
    baseline, candidate, min_speedup, level, resamples, spread = args
    return bench.speedup(baseline, candidate, min_speedup, level=level, resamples=resamples, spread=spread)


def _compute(tasks: list[tuple[Any, ...]]) -> list[Speedup]:
    """Every speedup, over the machine's cores when there are many: ~0.15 s of CPU each for
    1,000 samples a side (2,000 resamples), and a sweep's artifact holds hundreds."""
    workers = min(os.cpu_count() or 1, 8)
    if len(tasks) < 8 or workers < 2:
        return [_speedup(t) for t in tasks]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_speedup, tasks, chunksize=max(1, len(tasks) // (4 * workers))))


def _apply(shape: dict[str, Any], where: str, found: Speedup) -> None:
    claimed_ci = shape.get("speedup_ci") or [None, None]
    for label, claimed, derived in (("speedup", shape.get("speedup"), found.ratio),
                                    ("speedup_ci[0]", claimed_ci[0], found.ci_low),
                                    ("speedup_ci[1]", claimed_ci[1], found.ci_high)):
        if not _close(claimed, derived):
            raise InconsistentArtifact(f"{where}.{label} is {claimed!r}, its samples give {derived!r}")
    shape.update(speedup=found.ratio, speedup_ci=[found.ci_low, found.ci_high], significance=found.significance)


def _contender(c: dict[str, Any], where: str) -> None:
    """A contender's geometric-mean speedup and interval from its (re-derived) shapes."""
    shapes = c.get("shapes") or []
    ratios = [s.get("speedup") for s in shapes]
    speedup = ci = None
    if shapes and all(r is not None for r in ratios):
        speedup = bench.geomean(ratios)
        ci = [bench.geomean([s["speedup_ci"][0] for s in shapes]), bench.geomean([s["speedup_ci"][1] for s in shapes])]
    claimed_ci = c.get("speedup_ci") or [None, None]
    for label, claimed, derived in (("speedup", c.get("speedup"), speedup), ("speedup_ci[0]", claimed_ci[0],
                                    ci[0] if ci else None), ("speedup_ci[1]", claimed_ci[1], ci[1] if ci else None)):
        if not _close(claimed, derived):
            raise InconsistentArtifact(f"{where}.{label} is {claimed!r}, its shapes give {derived!r}")
    c.update(speedup=speedup, speedup_ci=ci)
    c["slower_shapes"] = [s["shape"] for s in shapes if s.get("significance") == "slower"]
    if "median_us" in c:
        c["median_us"] = shapes[0]["measurement"]["median_us"] if shapes and shapes[0].get("measurement") else None


def _contenders(results: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    out = []
    for i, p in enumerate(results["problems"]):
        where = f"results.problems[{i}]"
        if p.get("baseline"):
            out.append((p["baseline"], f"{where}.baseline"))
        out += [(a, f"{where}.attempts[{j}]") for j, a in enumerate(p.get("attempts") or ())]
        if p.get("best"):
            out.append((p["best"], f"{where}.best"))
    return out


def _significant(c: dict[str, Any], min_speedup: float) -> bool:
    ci = c.get("speedup_ci")
    return bool(ci) and ci[0] >= min_speedup and not c.get("slower_shapes")


def rederive(results: dict[str, Any], min_speedup: float) -> dict[str, Any]:
    """A copy of `results` whose every number follows from its samples, judged against the
    trusted `min_speedup`; InconsistentArtifact where a claim does not."""
    out = copy.deepcopy(results)
    out["min_speedup"] = min_speedup
    contenders = _contenders(out)
    pending = []
    for c, where in contenders:
        for k, shape in enumerate(c.get("shapes") or ()):
            task = _shape_task(shape, f"{where}.shapes[{k}]", min_speedup)
            if task is not None:
                pending.append((shape, f"{where}.shapes[{k}]", task))
    for (shape, where, _), found in zip(pending, _compute([t for _, _, t in pending])):
        _apply(shape, where, found)
    for c, where in contenders:
        _contender(c, where)
    for i, p in enumerate(out["problems"]):
        p["min_speedup"] = min_speedup
        for a in p.get("attempts") or ():
            a["significant"] = a.get("status") == "accepted" and _significant(a, min_speedup)
        best = p.get("best")
        if best is None:
            continue
        twin = next((a for a in p.get("attempts") or () if a.get("name") == best["name"]
                     and a.get("source_sha256") == best["source_sha256"]), None)
        if twin is None or twin.get("speedup_ci") != best.get("speedup_ci"):
            raise InconsistentArtifact(f"results.problems[{i}].best: not the numbers of the attempt it names")
        if not (twin.get("status") == "accepted" and _significant(best, min_speedup)):
            # Measured, but its interval does not clear the trusted bar: no improvement to publish.
            p["best"], p["outcome"] = None, "no significant improvement"
    return out
