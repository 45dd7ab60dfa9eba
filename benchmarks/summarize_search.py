"""results.json of `bot optimize --strategy search` -> the tables of docs/results-h200.md.

    python3 benchmarks/summarize_search.py RESULTS.json[.gz]... [--wall-s SECONDS] [--reselect]

Several files, oldest first, join into one table: each problem as the last file that holds it
measured it (the table then says which file that was).

Per problem: eager, torch.compile (default) alone, and the bot's pick (its `best`, or the
current implementation when it found no significant improvement), each against eager and the
pick against torch.compile default, with 95 % intervals bootstrapped from the raw samples in
the file (per shape, then the geometric mean of the shapes' ratios and bounds), and the pick's
% of the roofline floor per shape. `--reselect` picks again from the same measurements with
the selection rule of this checkout (bot.engine.loop.optimize.select_best: the interval clears min_speedup
and no shape is a significant slowdown), for files written under an older rule.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.core.measurement import Measurement
from bot.core.stats import geomean, speedup


def _measurements(contender: dict | None) -> dict[str, Measurement]:
    out = {}
    for s in (contender or {}).get("shapes", []):
        m = s.get("measurement")
        if m and m.get("samples_us"):
            out[s["shape"]] = Measurement(tuple(m["samples_us"]), tuple(m.get("batch_sizes") or ()))
    return out


def compare(base: dict | None, cand: dict | None) -> tuple[float, float, float] | None:
    """Geometric mean over shapes of base/cand median ratios, with the mean of the bounds."""
    b, c = _measurements(base), _measurements(cand)
    shapes = [s for s in b if s in c]
    if not shapes or len(shapes) != len(b):
        return None
    per = [speedup(b[s], c[s]) for s in shapes]
    return geomean([p.ratio for p in per]), geomean([p.ci_low for p in per]), geomean([p.ci_high for p in per])


def _fmt(r: tuple[float, float, float] | None) -> str:
    return f"{r[0]:.2f}x [{r[1]:.2f}, {r[2]:.2f}]" if r else "-"


def _us(contender: dict | None) -> str:
    return ", ".join(f"{s}: {m.median_us:.1f}" for s, m in _measurements(contender).items()) or "-"


def reselect(problem: dict) -> dict | None:
    """The attempt `select_best` would pick now, from the stored per-shape verdicts."""
    winners = [
        a
        for a in problem["attempts"]
        if a["status"] == "accepted"
        and a.get("speedup_ci")
        and a["speedup_ci"][0] >= problem["min_speedup"]
        and not any(s.get("significance") == "slower" for s in a.get("shapes", []))
    ]
    best = max(winners, key=lambda a: (a["speedup_ci"][0], a["speedup"]), default=None)
    return {"name": best["name"]} if best else None


def summarize(data: dict, wall_s: float | None, again: bool = False) -> str:
    lines = [
        (
            "| problem | eager µs | torch.compile default vs eager | bot's pick | pick µs | "
            "pick vs eager | pick vs compile default | pick % of floor |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    vs_eager, vs_compile, candidates, accepted = [], [], 0, 0
    for p in data["problems"]:
        attempts = {a["name"]: a for a in p["attempts"]}
        if again:
            p = {**p, "best": reselect(p)}
        candidates += len(p["attempts"])
        accepted += sum(a["status"] == "accepted" for a in p["attempts"])
        eager = attempts.get("eager-reference") if p.get("target") else p["baseline"]
        comp = attempts.get("compile-default-reference")
        comp = comp if comp and comp["status"] == "accepted" else None
        pick = attempts.get(p["best"]["name"]) if p.get("best") else p["baseline"]
        pick_name = p["best"]["name"] if p.get("best") else "current implementation (no significant improvement)"
        e, cc = compare(eager, pick), compare(comp, pick)
        if e:
            vs_eager.append(e)
        if cc:
            vs_compile.append(cc)
        floors = [s.get("pct_of_floor") for s in pick.get("shapes", [])]
        lines.append(
            f"| {p['problem']} | {_us(eager)} | {_fmt(compare(eager, comp)) if comp else 'rejected or absent'} | "
            f"{pick_name} | {_us(pick)} | {_fmt(e)} | {_fmt(cc)} | "
            f"{', '.join(f'{f:.0f}%' for f in floors if f is not None) or '-'} |"
        )
    n = len(data["problems"])
    lines.append("")
    sig_eager = sum(r[1] >= 1.1 for r in vs_eager)
    lines.append(
        f"- problems: {n}; the pick is significantly >= 1.1x faster than eager (interval's lower "
        f"bound) on {sig_eager} ({sig_eager / max(n, 1):.0%}); geometric mean against eager "
        f"{geomean([r[0] for r in vs_eager]):.2f}x"
    )
    if vs_compile:
        sig_c = sum(r[1] >= 1.1 for r in vs_compile)
        slower = sum(r[2] < 1.0 for r in vs_compile)
        lines.append(
            f"- against torch.compile default ({len(vs_compile)} problems where it was accepted): "
            f">= 1.1x significantly on {sig_c} ({sig_c / len(vs_compile):.0%}); geometric mean "
            f"{geomean([r[0] for r in vs_compile]):.2f}x; significantly slower on {slower}"
        )
    lines.append(f"- candidates: {candidates} verified, {accepted} of them accepted and timed")
    sources = [f"{p['problem']} ({p['from']})" for p in data["problems"] if p.get("from")]
    if sources:
        lines.append(f"- measured in: {'; '.join(sources)}")
    if wall_s:
        lines.append(
            f"- sweep wall time {wall_s:.0f} s on one GPU: {candidates / (wall_s / 60):.1f} "
            f"candidates verified (and the accepted ones timed) per GPU-minute"
        )
    return "\n".join(lines)


def load(path: Path) -> dict:
    # raw samples make a sweep's file large: docs/evidence keeps it gzipped
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return json.loads(text)


def measured(problem: dict) -> bool:
    """Whether the search timed anything: its baseline accepted (a failed problem has none)."""
    base = problem.get("baseline") or {}
    return problem.get("outcome") != "failed" and base.get("status", "accepted") == "accepted"


def joined(paths: list[Path]) -> tuple[dict, list[str]]:
    """One results object of several files: a later file's measurement of a problem replaces an
    earlier one's, and each problem keeps the name of the file it came from. A later search
    that measured nothing (its baseline rejected) leaves the earlier row, and a note says so
    unless a still later search measured it."""
    if len(paths) == 1:
        return load(paths[0]), []
    problems: dict[str, dict] = {}
    notes: dict[str, str] = {}
    for path in paths:
        name = path.name.split(".")[0]
        for problem in load(path)["problems"]:
            if not measured(problem) and problem["problem"] in problems:
                notes[problem["problem"]] = (
                    f"- {problem['problem']}: its search in {name} measured nothing "
                    "(its baseline was rejected); the row is its earlier search"
                )
                continue
            notes.pop(problem["problem"], None)
            problems.pop(problem["problem"], None)  # the table lists problems in their latest file's order
            problems[problem["problem"]] = {**problem, "from": name}
    return {"problems": list(problems.values())}, list(notes.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results", nargs="+", type=Path, help="results.json files, oldest first")
    parser.add_argument("--wall-s", type=float)
    parser.add_argument("--reselect", action="store_true", help="pick again with this checkout's rule")
    args = parser.parse_args()
    results, notes = joined(args.results)
    print("\n".join([summarize(results, args.wall_s, args.reselect), *notes]))


if __name__ == "__main__":
    main()
