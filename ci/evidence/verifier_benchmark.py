"""GPU evidence for docs/verifier.md and docs/benchmark.md (run on the H200).

    PYTHONPATH=. python3 ci/evidence/verifier_benchmark.py --out $OUT [--aa-repeats 5]

A/A: the same kernel (the reference) as baseline and as candidate, repeated runs; the spread
of the candidate's medians and the speedup interval of each run. Writes JSON and a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bot.cli import default_baseline
from bot.domain import CandidateSource, Origin
from bot.evaluate import EvalOptions, evaluate
from bot.problems import load_problem
from bot.sandbox import Limits
from bot.timing import TimingOptions

ROOT = Path(__file__).resolve().parents[2]


def aa(problem_name: str, repeats: int, cap_s: float) -> dict:
    problem = load_problem(ROOT / "problems" / f"{problem_name}.py", root=ROOT)
    ref = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    same = CandidateSource("reference-again", problem.source, Origin("reference"), problem.path, "Model")
    options = EvalOptions(device="cuda", limits=Limits(memory_mb=65536),
                          timing=TimingOptions(time_cap_s=cap_s, min_samples=20))
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
    return {"problem": problem_name, "runs": runs, "spread": spread,
            "environment": result.environment.to_json()}


def compile_vs_eager(problem_name: str, cap_s: float) -> dict:
    """torch.compile (default mode) of the reference against the eager reference."""
    from bot.propose.search import Base, search_candidates

    problem = load_problem(ROOT / "problems" / f"{problem_name}.py", root=ROOT)
    cands, _ = search_candidates(problem, [Base("reference", problem.source, "Model")], "cuda")
    compiled = [c for c in cands if c.name == "compile-default-reference"]
    eager = CandidateSource("eager", problem.source, Origin("reference"), problem.path, "Model")
    options = EvalOptions(device="cuda", limits=Limits(memory_mb=65536),
                          timing=TimingOptions(time_cap_s=cap_s, min_samples=20))
    result = evaluate(problem, compiled, eager, options)
    cand = result.candidates[0]
    rows = []
    for shape, base in zip(cand.shapes, result.baseline.shapes):
        rows.append({"shape": shape.shape, "inputs": shape.inputs,
                     "eager_us": base.measurement.median_us if base.measurement else None,
                     "compiled_us": shape.measurement.median_us if shape.measurement else None,
                     "speedup": shape.speedup.ratio if shape.speedup else None,
                     "ci": [shape.speedup.ci_low, shape.speedup.ci_high] if shape.speedup else None,
                     "significance": shape.speedup.significance if shape.speedup else None,
                     "pct_floor_eager": base.pct_of_floor, "floor_us": shape.floor_us})
    return {"problem": problem_name, "accepted": cand.verdict.accepted,
            "reasons": list(cand.verdict.reasons), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--aa-repeats", type=int, default=5)
    parser.add_argument("--cap-s", type=float, default=2.0)
    parser.add_argument("--problems", default="rmsnorm,softmax,matmul_bias_gelu")
    parser.add_argument("--compile-problems", default="",
                        help="comma list: torch.compile default vs eager on these problems")
    args = parser.parse_args()
    out = Path(args.out)
    compiled = []
    for name in filter(None, args.compile_problems.split(",")):
        r = compile_vs_eager(name, args.cap_s)
        compiled.append(r)
        (out / "compile_vs_eager.json").write_text(json.dumps(compiled, indent=1))
        for row in r["rows"]:
            print(f"compile {name:18s} {row['shape']:12s} eager {row['eager_us'] or 0:9.2f} us "
                  f"compiled {row['compiled_us'] or 0:9.2f} us speedup {row['speedup'] or 0:5.2f} "
                  f"{row['ci']} {row['significance']} {'' if r['accepted'] else r['reasons']}", flush=True)
    results = []
    for name in args.problems.split(","):
        t0 = time.time()
        r = aa(name, args.aa_repeats, args.cap_s)
        r["wall_s"] = time.time() - t0
        results.append(r)
        for shape, spread in r["spread"].items():
            meds = [x["median_us"] for x in r["runs"] if x["shape"] == shape]
            sigs = {x["significance"] for x in r["runs"] if x["shape"] == shape}
            print(f"A/A {name:18s} {shape:12s} medians {min(meds):9.2f}..{max(meds):9.2f} us "
                  f"spread {spread:6.2%}  verdicts {sorted(sigs)}", flush=True)
    (out / "aa.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
