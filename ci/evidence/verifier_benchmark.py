"""GPU evidence for docs/verifier.md and docs/benchmark.md (run on the H200).

    PYTHONPATH=. python3 ci/evidence/verifier_benchmark.py --out $OUT [--aa-repeats 5]

A/A: the same kernel (the reference) as baseline and as candidate, repeated runs; the spread
of the candidate's medians across runs, the A/A ratio within each run and the speedup
interval of each run. Writes JSON and a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bot.domain import CandidateSource, Origin
from bot.evaluate import EvalOptions, evaluate
from bot.problems import load_problem
from bot.sandbox import Limits
from bot.timing import TimingOptions

ROOT = Path(__file__).resolve().parents[2]


def aa(problem_name: str, repeats: int, cap_s: float, device: str = "cuda", mode: str = "latency") -> dict:
    problem = load_problem(ROOT / "problems" / f"{problem_name}.py", root=ROOT)
    ref = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    same = CandidateSource("reference-again", problem.source, Origin("reference"), problem.path, "Model")
    options = EvalOptions(device=device, limits=Limits(memory_mb=65536),
                          timing=TimingOptions(time_cap_s=cap_s, min_samples=20, mode=mode))
    runs = []
    for _ in range(repeats):
        result = evaluate(problem, [same], ref, options)
        cand = result.candidates[0]
        for shape, base in zip(cand.shapes, result.baseline.shapes):
            runs.append({"shape": shape.shape, "median_us": shape.measurement.median_us,
                         "baseline_median_us": base.measurement.median_us,
                         "speedup": shape.speedup.ratio,
                         "ci": [shape.speedup.ci_low, shape.speedup.ci_high],
                         "significance": shape.speedup.significance, "n": shape.measurement.n})
    by_shape: dict[str, list[float]] = {}
    for r in runs:
        by_shape.setdefault(r["shape"], []).append(r["median_us"])
    spread = {s: (max(v) - min(v)) / statistics.median(v) for s, v in by_shape.items()}
    # Within each run: how far the A/A ratio (baseline median / same-kernel median) is from 1.
    ratio_dev = {s: max(abs(r["speedup"] - 1) for r in runs if r["shape"] == s) for s in by_shape}
    return {"problem": problem_name, "runs": runs, "spread": spread, "ratio_dev": ratio_dev,
            "environment": result.environment.to_json()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--aa-repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--timing", default="latency", choices=["latency", "throughput"])
    parser.add_argument("--cap-s", type=float, default=2.0)
    parser.add_argument("--problems", default="rmsnorm,softmax,matmul_bias_gelu")
    args = parser.parse_args()
    out = Path(args.out)
    results = []
    for name in args.problems.split(","):
        t0 = time.time()
        r = aa(name, args.aa_repeats, args.cap_s, args.device, args.timing)
        r["wall_s"] = time.time() - t0
        results.append(r)
        for shape, spread in r["spread"].items():
            meds = [x["median_us"] for x in r["runs"] if x["shape"] == shape]
            sigs = {x["significance"] for x in r["runs"] if x["shape"] == shape}
            print(f"A/A {name:18s} {shape:12s} medians {min(meds):9.2f}..{max(meds):9.2f} us "
                  f"spread across runs {spread:6.2%}  largest |A/A ratio - 1| within a run "
                  f"{r['ratio_dev'][shape]:6.2%}  verdicts {sorted(sigs)}", flush=True)
        (out / f"aa-{args.timing}.json").write_text(json.dumps(results, indent=1))  # after each problem


if __name__ == "__main__":
    main()
