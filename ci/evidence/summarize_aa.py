"""Across fresh runs of verifier_benchmark.py's A/A: how far the same kernel's median moves.

    python3 ci/evidence/summarize_aa.py LABEL=aa.json[.gz] [LABEL=aa.json ...]

Runs with the same LABEL form one group (say, workers forked from one server against workers
started plainly). Per group and shape: the baseline's median in each run, their spread (max −
min over their median: the figure issue 2's 1 % target is about), the median of every worker
process of every contender in each run (a level the whole run shares shows here), and the spread
of process medians within runs (what pooling the processes of one run averages).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict


def load(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main(args: list[str]) -> None:
    groups: dict[tuple[str, str, str, str], list[dict]] = defaultdict(list)
    for arg in args:
        label, _, path = arg.partition("=")
        for problem in load(path):
            for run in problem["runs"]:
                groups[(label, problem["problem"], run["mode"], run["shape"])].append(run)
    print("| runs | problem | mode | shape | n | baseline medians (µs) | spread across runs "
          "| all processes' median per run (µs) | its spread | process medians within a run: spread (median over runs) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (label, problem, mode, shape), runs in groups.items():
        base = [r["baseline_median_us"] for r in runs]
        pooled = [statistics.median([m for worker in r["worker_medians_us"] for m in worker]) for r in runs]
        within = statistics.median(spread([m for worker in r["worker_medians_us"] for m in worker]) for r in runs)
        print(f"| {label} | {problem} | {mode} | {shape} | {len(runs)} | "
              f"{', '.join(f'{b:.3f}' for b in base)} | {spread(base):.2%} | "
              f"{', '.join(f'{p:.3f}' for p in pooled)} | {spread(pooled):.2%} | {within:.2%} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
