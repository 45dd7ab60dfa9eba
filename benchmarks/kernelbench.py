"""results.json of `bot optimize` -> KernelBench's metrics: correctness rate, fast_0, fast_1,
fast_1.1, fast_2 and the geometric mean of the speedup, over eager and over torch.compile
default, per level, and a row per problem.

    python3 benchmarks/kernelbench.py RESULTS... [--json]

RESULTS are results.json files (`bot optimize --out DIR` writes DIR/results.json), results
directories or gzipped files, read through the typed, schema-validated reader of the results
(bot.core.results.Results.from_json). Several files join: a problem (by its path) in a later
file replaces the one of an earlier file, so shards and re-runs add up to one table.

Definitions (KernelBench: fast_p is the share of problems whose solution is correct and more
than p times faster than the reference; an incorrect one counts as not fast):

- A problem's **answer** is the bot's pick: the candidate it selected (`best`), else the
  problem's own implementation (its baseline), which is then 1x by identity. The bot never
  answers with an unverified kernel.
- **Correct**: the problem was evaluated (not failed) and its answer passed the verifier.
- **Faster than p** means significantly faster: the 95 % interval's lower bound above p.
  KernelBench compares a mean of 100 timed trials with p, with no interval; this reading is
  stricter, and a 1x answer is never fast_1.
- **Over eager**: the answer against the problem's `Model` (its baseline, or the search's
  eager-reference contender where the problem has a TARGET), as stage 1 derived it in the same
  run. **Over torch.compile default**: against the search's torch.compile default contender
  (`COMPILE_DEFAULT`), from both raw samples (bot.core.stats.speedup); "n/a" where that
  contender was not accepted and timed, and the group's figures are over the problems where
  it was.
- The **group** is the problem's level, from its path (`.../level1/NN_Name.py`); problems from
  elsewhere form the group "other".
- Every speedup carries its 95 % interval; over shapes, and in a group's geometric mean, the
  interval is the geometric mean of the bounds, as the bot's own claims read it. The
  geometric mean is over correct, timed answers.
- **% of floor**: the roofline floor's share of the answer's median time, per shape, as the
  results hold it (bot.core.roofline).
- **Wall time**: each problem's, as its results hold it (a problem run again alone after
  running out of GPU memory beside others: its last attempt's), with how much of it waited for
  the device where recorded; per group the median, the 90th percentile (nearest rank) and the
  sum, the figures a sweep's speed is judged by.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.core.errors import BotError
from bot.core.measurement import Measurement
from bot.core.results import RESULTS_FILE, ProblemResult, Results
from bot.core.results_shapes import ShapeResult
from bot.core.stats import WorkerSpread, geomean, speedup
from bot.github.untrusted import parse_results
from bot.propose.paths import COMPILE_PATHS

FAST_P = (0.0, 1.0, 1.1, 2.0)
EAGER = "eager-reference"  # bot.propose.search: the eager Model timed beside a TARGET
COMPILE_DEFAULT = next(f"{p.name}-reference" for p in COMPILE_PATHS if p.key == "compile:default")
LEVEL = re.compile(r"(?:^|/)(level\d+)/[^/]+\.py$")
DEFINITION = (
    "Faster than p means significantly faster: the 95 % interval's lower bound above p "
    "(KernelBench: the mean above p). A problem's answer is the bot's pick, else its own code (1x); "
    "an incorrect or failed problem is never fast."
)


@dataclass(frozen=True)
class Ratio:
    """A speedup and its 95 % interval."""

    ratio: float
    low: float
    high: float

    def faster_than(self, p: float) -> bool:
        return self.low > p

    def __str__(self) -> str:
        return f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"


IDENTITY = Ratio(1.0, 1.0, 1.0)


@dataclass(frozen=True)
class Row:
    problem: str
    group: str
    correct: bool
    answer: str
    over_eager: Ratio | None  # None: not timed, or failed
    over_compile: Ratio | None  # None: torch.compile default was not measured
    pct_of_floor: tuple[tuple[str, float | None], ...]
    accepted: int
    verified: int
    note: str = ""
    wall_s: float | None = None  # the problem's wall time (its last attempt's, where run again)
    device_wait_s: float | None = None  # of it, waiting for the device: None where not recorded


def group_of(path: str | None) -> str:
    match = LEVEL.search(path or "")
    return match.group(1) if match else "other"


def _geomean_ratio(ratios: Sequence[Ratio]) -> Ratio | None:
    if not ratios:
        return None
    ratio, low, high = (geomean([getattr(r, k) for r in ratios]) for k in ("ratio", "low", "high"))
    return None if ratio is None or low is None or high is None else Ratio(ratio, low, high)


def _measurements(shapes: Sequence[ShapeResult]) -> dict[str, Measurement]:
    return {s.shape: s.measurement.samples for s in shapes if s.measurement}


def compare(over: Sequence[ShapeResult], answer: Sequence[ShapeResult]) -> Ratio | None:
    """`answer` against `over` from their raw samples, shape by shape (the spread between worker
    processes as the answer's own run measured it), then the geometric mean over shapes."""
    base, cand = _measurements(over), _measurements(answer)
    if not base or set(base) != set(cand):
        return None
    derivations = {s.shape: s.derivation for s in (*answer, *over) if s.derivation}
    per = []
    for shape in base:
        d = derivations.get(shape)
        spread = WorkerSpread(d.spread_log_sd, d.spread_df) if d else WorkerSpread()
        sp = speedup(base[shape], cand[shape], resamples=d.resamples if d else 2000, spread=spread)
        per.append(Ratio(sp.ratio, sp.ci_low, sp.ci_high))
    return _geomean_ratio(per)


def _recorded(shapes: Sequence[ShapeResult]) -> Ratio | None:
    """The geometric mean of speedups stage 1 recorded against the same run's baseline."""
    per = [Ratio(s.speedup, *s.speedup_ci) for s in shapes if s.speedup is not None and s.speedup_ci]
    return _geomean_ratio(per) if per and len(per) == len(shapes) else None


def row(problem: ProblemResult) -> Row:
    attempts = {a.name: a for a in problem.attempts}
    accepted = sum(a.is_accepted for a in problem.attempts)
    group = group_of(problem.problem_path)
    split = problem.time_split
    times = {"wall_s": problem.wall_s, "device_wait_s": split.device_wait_s if split else None}
    if problem.failed or problem.baseline is None:
        note = (problem.error or "no baseline").splitlines()[0][:160]
        return Row(problem.problem, group, False, "-", None, None, (), accepted, len(problem.attempts), note, **times)
    best = problem.best
    base = problem.baseline
    shapes = best.shapes if best else base.shapes
    correct = True if best else base.is_accepted
    eager = attempts.get(EAGER) if problem.target else None
    if problem.target and eager is None:
        over_eager = None
    elif eager is not None:
        over_eager = compare(eager.shapes, shapes)
    else:
        over_eager = _recorded(best.shapes) if best else IDENTITY
    if base.not_timed or problem.not_timed:
        over_eager = None
    comp = attempts.get(COMPILE_DEFAULT)
    over_compile = None
    if comp is not None and comp.is_accepted and _measurements(comp.shapes):
        if best is not None and best.name == comp.name:
            over_compile = IDENTITY
        elif best is None:
            recorded = _recorded(comp.shapes)  # the baseline against it, in the same run
            over_compile = Ratio(1 / recorded.ratio, 1 / recorded.high, 1 / recorded.low) if recorded else None
        else:
            over_compile = compare(comp.shapes, shapes)
    answer = best.name if best else f"{base.name} (its own code)"
    floors = tuple((s.shape, s.pct_of_floor) for s in shapes)
    verified = len(problem.attempts)
    return Row(problem.problem, group, correct, answer, over_eager, over_compile, floors, accepted, verified, **times)


def wall_times(rows: Sequence[Row]) -> dict[str, float | int | None]:
    """The problems' wall times: how many have one, their median, 90th percentile (nearest
    rank) and sum, and the sum of their waits for the device where recorded, with how many
    recorded one (older results record none)."""
    walls = sorted(r.wall_s for r in rows if r.wall_s is not None)
    waits = [r.device_wait_s for r in rows if r.device_wait_s is not None]
    if not walls:
        return {"timed": 0, "median_s": None, "p90_s": None, "sum_s": None, "device_wait_s": None, "waits_recorded": 0}
    return {
        "timed": len(walls),
        "median_s": statistics.median(walls),
        "p90_s": walls[math.ceil(0.9 * len(walls)) - 1],
        "sum_s": sum(walls),
        "device_wait_s": sum(waits) if waits else None,
        "waits_recorded": len(waits),
    }


def _fast(rows: Sequence[Row], over: str) -> dict[str, float | None]:
    counted = rows if over == "over_eager" else [r for r in rows if r.over_compile is not None]
    if not counted:
        return {f"fast_{p:g}": None for p in FAST_P}
    out = {}
    for p in FAST_P:
        fast = [r for r in counted if r.correct and getattr(r, over) is not None and getattr(r, over).faster_than(p)]
        out[f"fast_{p:g}"] = len(fast) / len(counted)
    return out


def summarize(rows: Sequence[Row]) -> list[dict]:
    """Per group (levels in order, then "other"), and all problems together."""
    groups = sorted({r.group for r in rows}, key=lambda g: (g == "other", len(g), g))
    out = []
    for name, members in [(g, [r for r in rows if r.group == g]) for g in groups] + [("all", list(rows))]:
        compiled = [r for r in members if r.over_compile is not None]
        out.append(
            {
                "group": name,
                "problems": len(members),
                "correct": sum(r.correct for r in members) / len(members),
                "over_eager": {
                    **_fast(members, "over_eager"),
                    "geomean": _geomean_ratio([r.over_eager for r in members if r.correct and r.over_eager]),
                },
                "over_compile_default": {
                    "measured": len(compiled),
                    **_fast(members, "over_compile"),
                    "geomean": _geomean_ratio([r.over_compile for r in compiled if r.correct]),
                },
                "time": wall_times(members),
            }
        )
    return out


def load(path: Path) -> Results:
    if path.is_dir():
        path = path / RESULTS_FILE
    raw = path.read_bytes()
    return Results.from_json(parse_results(gzip.decompress(raw) if path.suffix == ".gz" else raw, str(path)))


def joined(paths: Sequence[Path]) -> list[ProblemResult]:
    """The problems of all files; a problem (by its path, else its name) in a later file
    replaces the one of an earlier file."""
    problems: dict[str, ProblemResult] = {}
    for path in paths:
        for p in load(path).problems:
            key = p.problem_path or p.problem
            problems.pop(key, None)
            problems[key] = p
    return list(problems.values())


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _mean(value: Ratio | None) -> str:
    return "n/a" if value is None else "1x (itself)" if value is IDENTITY else str(value)


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} s"


def _waits(time: Mapping[str, Any]) -> str:
    """The group's waits for the device, saying so where only some problems recorded theirs."""
    recorded, timed = time["waits_recorded"], time["timed"]
    part = f" ({recorded} of {timed} recorded)" if 0 < recorded < timed else ""
    return _secs(time["device_wait_s"]) + part


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- " * len(header) + "|"]
    return lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows]


def _floors(r: Row) -> str:
    return ", ".join(f"{s}: {'n/a' if f is None else f'{f:.0f}%'}" for s, f in r.pct_of_floor) or "n/a"


def markdown(rows: Sequence[Row], groups: Sequence[dict]) -> str:
    fast = [f"fast_{p:g}" for p in FAST_P]
    eager = _table(
        ["group", "problems", "correct", *fast, "geomean over eager [95 %]"],
        [
            [g["group"], g["problems"], _pct(g["correct"])]
            + [_pct(g["over_eager"][k]) for k in fast]
            + [_mean(g["over_eager"]["geomean"])]
            for g in groups
        ],
    )
    compiled = _table(
        ["group", "torch.compile default measured", *fast, "geomean over compile default [95 %]"],
        [
            [g["group"], g["over_compile_default"]["measured"]]
            + [_pct(g["over_compile_default"][k]) for k in fast]
            + [_mean(g["over_compile_default"]["geomean"])]
            for g in groups
        ],
    )
    time = _table(
        ["group", "problems timed", "median wall time", "90th percentile", "sum", "of it waiting for the device"],
        [
            [g["group"], g["time"]["timed"]]
            + [_secs(g["time"][k]) for k in ("median_s", "p90_s", "sum_s")]
            + [_waits(g["time"])]
            for g in groups
        ],
    )
    problems = _table(
        ["problem", "group", "correct", "answer", "over eager [95 %]", "over compile default [95 %]"]
        + ["% of roofline floor", "accepted / verified", "wall time (waiting)"],
        [
            [r.problem, r.group, "yes" if r.correct else f"no ({r.note})" if r.note else "no", r.answer]
            + [_mean(r.over_eager), _mean(r.over_compile), _floors(r), f"{r.accepted} / {r.verified}"]
            + [f"{_secs(r.wall_s)} ({_secs(r.device_wait_s)})"]
            for r in rows
        ],
    )
    return "\n".join([DEFINITION, "", *eager, "", *compiled, "", *time, "", *problems])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results.json files or directories, oldest first")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of markdown")
    args = parser.parse_args(argv)
    try:
        problems = joined(args.results)
    except (OSError, BotError) as exc:
        parser.exit(2, f"kernelbench.py: {exc}\n")
    if not problems:
        parser.exit(2, "kernelbench.py: the results hold no problems\n")
    rows = [row(p) for p in problems]
    groups = summarize(rows)
    if args.json:
        doc = {"definition": DEFINITION, "groups": groups, "problems": [asdict(r) for r in rows]}
        print(json.dumps(doc, indent=1, default=asdict))
    else:
        print(markdown(rows, groups))


if __name__ == "__main__":
    main()
