"""Result files of `bot optimize --strategy search` -> how often each torch.compile path of the
catalogue was the fastest compile of its base: the evidence for keeping a path, or not.

    python3 benchmarks/path_wins.py RESULTS... [--json]

RESULTS are results.json files, results directories or gzipped files, of any schema version:
only each problem's `attempts`, their names and speedup point estimates, are read (they are in
every version). A run counts for a path when its base (`reference`, `target`) had that path and
at least one other compile path timed; the path wins the run when its speedup is the highest.
A point estimate, not an interval: which of two close paths wins a run is noise, the tally
over many runs is not.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

RESULTS_FILE = "results.json"


def _read(path: Path) -> dict:
    if path.is_dir():
        path = path / RESULTS_FILE
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(raw)


def compile_runs(results: dict) -> Iterable[dict[str, float]]:
    """Per problem and base: compile path name (without the base) -> speedup, where two or
    more compile paths of that base were timed."""
    for problem in results.get("problems") or []:
        by_base: dict[str, dict[str, float]] = {}
        for cand in problem.get("attempts") or []:
            name, speedup = str(cand.get("name") or ""), cand.get("speedup")
            if name.startswith("compile-") and isinstance(speedup, (int, float)):
                path, _, base = name.rpartition("-")
                by_base.setdefault(base, {})[path] = float(speedup)
        yield from (paths for paths in by_base.values() if len(paths) > 1)


def tally(runs: Iterable[dict[str, float]]) -> dict[str, dict[str, int]]:
    """Path -> {"runs": runs it was in, "wins": runs where it was the fastest}."""
    present: Counter[str] = Counter()
    wins: Counter[str] = Counter()
    for paths in runs:
        present.update(paths.keys())  # a mapping would add its values
        wins[max(paths, key=lambda p: paths[p])] += 1
    return {p: {"runs": present[p], "wins": wins[p]} for p in sorted(present)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="the tally as JSON")
    args = parser.parse_args(argv)
    table = tally(run for path in args.results for run in compile_runs(_read(path)))
    if args.json:
        print(json.dumps(table, indent=2))
        return
    print("| path | runs | fastest in |\n|---|---|---|")
    for path, counts in sorted(table.items(), key=lambda kv: (-kv[1]["wins"], kv[0])):
        print(f"| {path} | {counts['runs']} | {counts['wins']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
