"""Across fresh runs of aa_noise.py's A/A: how far the same kernel's median moves.

    python3 benchmarks/summarize_aa.py LABEL=aa.json[.gz] [LABEL=aa.json ...]

Runs with the same LABEL form one group (say, workers forked from one server against workers
started plainly). Per group and shape: the baseline's median in each run, their spread (max −
min over their median: the figure the 1 % repeatability target is about), the median of every worker
process of every contender in each run (a level the whole run shares shows here), and the spread
of process medians within runs (what pooling the processes of one run averages: with k
processes per contender, independent offsets of relative standard deviation sd give a pooled
median of about sd/sqrt(k)). Where the runs kept their samples, also the baseline's median
interpolated within the timer's step (the median of grouped data): graph-timed samples on the
H200 come in steps of 32 ns, 0.65 % of gelu's 5 µs decode, so a plain median can only move by
whole steps.
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


def relative_sd(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def timer_step(samples: list[float]) -> float:
    """The smallest gap between distinct sample values: the timer's step where samples are
    quantised (for graph timing, the event clock's over the captured copies)."""
    distinct = sorted(set(round(x, 6) for x in samples))
    return min(b - a for a, b in zip(distinct, distinct[1:]))


def grouped_median(samples: list[float]) -> float:
    """The median of data grouped in classes one timer step wide, interpolated within the
    class holding it (the textbook estimator for grouped data)."""
    if len(set(samples)) < 2:
        return samples[0]
    step = timer_step(samples)
    counts: dict[int, int] = defaultdict(int)
    for x in samples:
        counts[round(x / step)] += 1
    below, half = 0, len(samples) / 2
    for k in sorted(counts):
        if below + counts[k] >= half:
            return (k - 0.5 + (half - below) / counts[k]) * step
        below += counts[k]
    raise ValueError("no samples")


def main(args: list[str]) -> None:
    groups: dict[tuple[str, str, str, str], list[dict]] = defaultdict(list)
    for arg in args:
        label, _, path = arg.partition("=")
        for problem in load(path):
            for run in problem["runs"]:
                groups[(label, problem["problem"], run["mode"], run["shape"])].append(run)
    print(
        "| runs | problem | mode | shape | n | baseline medians (µs) | spread across runs "
        "| interpolated within the step (µs) | spread | all processes' median per run (µs) | spread "
        "| process medians within a run: sd (median over runs) | processes per contender |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (label, problem, mode, shape), runs in groups.items():
        base = [r["baseline_median_us"] for r in runs]
        pooled = [statistics.median([m for worker in r["worker_medians_us"] for m in worker]) for r in runs]
        sd = statistics.median(relative_sd([m for worker in r["worker_medians_us"] for m in worker]) for r in runs)
        per_contender = max(len(r["worker_medians_us"][0]) for r in runs)
        kept = [r["measurements"][0]["samples_us"] for r in runs if "measurements" in r]
        grouped = [grouped_median(s) for s in kept] if len(kept) == len(runs) else []
        grouped_cells = (
            f"{', '.join(f'{g:.3f}' for g in grouped)} | {spread(grouped):.2%}" if grouped else "(samples not kept) | "
        )
        print(
            f"| {label} | {problem} | {mode} | {shape} | {len(runs)} | "
            f"{', '.join(f'{b:.3f}' for b in base)} | {spread(base):.2%} | {grouped_cells} | "
            f"{', '.join(f'{p:.3f}' for p in pooled)} | {spread(pooled):.2%} | {sd:.2%} | {per_contender} |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
