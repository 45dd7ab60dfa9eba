"""A/A noise of the timing protocol (docs/benchmark.md, "A/A"), on a GPU or the CPU.

    PYTHONPATH=. python3 benchmarks/aa_noise.py --out $OUT [--aa-repeats 2] [--copies 3] \
        [--timing latency,throughput,graph]

A/A: the reference as the baseline and identical copies of it as candidates, interleaved in
one run, repeated; per timing mode and shape, the spread of the baseline's medians across runs
and the largest distance of a copy's A/A ratio from 1 within a run. Writes JSON and a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from bot.cli.progress_view import PlainLines
from bot.core.domain import CandidateSource, Origin
from bot.core.progress import Note
from bot.engine.evaluation import shape_run
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.problems import load_problem, only_shapes
from bot.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
progress = PlainLines(sys.stderr, time.monotonic())  # where the time goes, on stderr
# Per shape timed, in order: each contender's batches as the hidden-time check read them (its
# sizes and, per call, the parent's time beyond the report and the harness's work; per batch,
# the parent's wall time of the exchange and the worker's own time for its op), so that a
# copy's counted time can be traced to the batches it came from.
seen_batches: list[dict] = []


def _recording(checks):  # type: ignore[no-untyped-def]
    def recorded(records, baseline):  # type: ignore[no-untyped-def]
        fields = (
            "batch_sizes",
            "batch_workers",
            "unexplained_us",
            "reported_us",
            "harness_us",
            "noise_us",
            "wall_us",
            "op_us",
            "staging_us",
            "staging_noise_us",
        )
        seen_batches.append(
            {
                "baseline": baseline,
                "contenders": {n: {f: list(getattr(r, f)) for f in fields} for n, r in records.items()},
            }
        )
        return checks(records, baseline)

    return recorded


shape_run.hidden_time_checks = _recording(shape_run.hidden_time_checks)


def _hidden(outcome) -> list[dict]:  # type: ignore[no-untyped-def]
    """The figures of a contender's `hidden time` checks (one per shape)."""
    return [dict(c.details) for c in outcome.verdict.checks if c.name == "hidden time"]


def aa(
    problem_name: str,
    repeats: int,
    copies: int,
    cap_s: float,
    device: str,
    modes: list[str],
    replicas: int = 2,
    shapes: tuple[str, ...] = (),
) -> dict:
    """`repeats` runs per timing mode; in each, the reference as baseline against `copies`
    identical candidates (each its own worker), all interleaved."""
    problem = only_shapes(load_problem(ROOT / "problems" / f"{problem_name}.py", root=ROOT), shapes, device)
    ref = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    same = [
        CandidateSource(f"reference-again-{i}", problem.source, Origin("reference"), problem.path, "Model")
        for i in range(copies)
    ]
    runs = []
    for repeat in range(repeats):
        for mode in modes:
            options = EvalOptions(
                device=device,
                use_cache=False,
                limits=Limits(memory_mb=65536),
                timing=TimingOptions(time_cap_s=cap_s, min_samples=20, mode=mode, replicas=replicas),
            )
            progress(Note(f"A/A run {repeat + 1}, {mode}", problem_name))
            seen_batches.clear()
            result = evaluate(problem, same, ref, options, progress)
            for i, base in enumerate(result.baseline.shapes):
                cands = [c.shapes[i] if i < len(c.shapes) else None for c in result.candidates]
                timed = [c for c in cands if c is not None and c.measurement is not None]
                runs.append(
                    {
                        "mode": mode,
                        "repeat": repeat,
                        "shape": base.shape,
                        "baseline_median_us": base.measurement.median_us,
                        "median_us": [c.measurement.median_us for c in timed],
                        # each worker process's own median: the baseline's, then each copy's
                        "worker_medians_us": [list(x.measurement.worker_medians) for x in [base, *timed]],
                        # every sample, for estimators other than the median (summarize_aa.py)
                        "measurements": [x.measurement.to_json() for x in [base, *timed]],
                        "ratios": [c.speedup.ratio for c in timed],
                        "ci": [[c.speedup.ci_low, c.speedup.ci_high] for c in timed],
                        "significance": [c.speedup.significance for c in timed],
                        # an identical copy must never be rejected: which were, and why
                        "rejected": [
                            {"copy": o.candidate.name, "reasons": list(o.verdict.reasons)}
                            for o, c in zip(result.candidates, cands)
                            if c is None or c.measurement is None
                        ],
                        # on CUDA hidden time is counted into the samples: what each counted
                        "hidden_time": [_hidden(o) for o in [result.baseline, *result.candidates]],
                        "batches": seen_batches[i] if i < len(seen_batches) else None,
                    }
                )
    summary = []
    for mode in modes:
        for shape in dict.fromkeys(r["shape"] for r in runs):
            mine = [r for r in runs if r["mode"] == mode and r["shape"] == shape]
            base = [r["baseline_median_us"] for r in mine]
            summary.append(
                {
                    "mode": mode,
                    "shape": shape,
                    "baseline_medians_us": base,
                    # the same kernel's median from run to run
                    "spread_across_runs": (max(base) - min(base)) / statistics.median(base),
                    # within a run: the A/A ratios of the copies against the baseline
                    "max_ratio_dev_within_run": max((abs(x - 1) for r in mine for x in r["ratios"]), default=None),
                    "copies_rejected": sum(len(r["rejected"]) for r in mine),
                    "verdicts": sorted({v for r in mine for v in r["significance"]}),
                    # an identical copy's interval should hold 1
                    "intervals_holding_1": sum(lo <= 1 <= hi for r in mine for lo, hi in r["ci"]),
                    "intervals": sum(len(r["ci"]) for r in mine),
                }
            )
    return {"problem": problem_name, "runs": runs, "summary": summary, "environment": result.environment.to_json()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--aa-repeats", type=int, default=2)
    parser.add_argument("--copies", type=int, default=3, help="identical candidates per run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timing", default="latency", help="comma list of modes: latency,throughput,graph")
    parser.add_argument("--cap-s", type=float, default=2.0)
    parser.add_argument("--problems", default="rmsnorm,softmax,matmul_bias_gelu")
    parser.add_argument("--replicas", type=int, default=2, help="worker processes per contender")
    parser.add_argument("--shapes", default="", help="only these shapes, e.g. decode (default: all)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)  # a missing --out folder would lose the run's JSON
    results = []
    for name in args.problems.split(","):
        t0 = time.time()
        r = aa(
            name,
            args.aa_repeats,
            args.copies,
            args.cap_s,
            args.device,
            args.timing.split(","),
            args.replicas,
            tuple(filter(None, args.shapes.split(","))),
        )
        r["wall_s"] = time.time() - t0
        results.append(r)
        for row in r["summary"]:
            meds = row["baseline_medians_us"]
            largest = row["max_ratio_dev_within_run"]
            print(
                f"A/A {name:18s} {row['mode']:10s} {row['shape']:12s} medians {min(meds):9.2f}..{max(meds):9.2f} us "
                f"spread across runs {row['spread_across_runs']:6.2%}  largest |A/A ratio - 1| within a run "
                f"{'n/a' if largest is None else format(largest, '6.2%')}  intervals holding 1: "
                f"{row['intervals_holding_1']}/{row['intervals']}  verdicts {row['verdicts']}  "
                f"copies rejected: {row['copies_rejected']}",
                flush=True,
            )
        (out / "aa.json").write_text(json.dumps(results, indent=1))  # after each problem
        for run in r["runs"]:
            for rejected in run["rejected"]:  # an identical copy must never be: say why it was
                print(f"  rejected: {rejected['copy']} ({run['shape']}): {'; '.join(rejected['reasons'])}", flush=True)


if __name__ == "__main__":
    main()
