"""What the outside checks of timed calls cost (bot/engine/timing/outside_checks.py), as a share of the
timing phase, on the CPU (docs/verifier.md, "Timed calls").

    PYTHONPATH=. python3 benchmarks/outside_checks_cost.py [--time-cap 2.0]

Per problem: the wall time of the timing phases (`time_interleaved`, replicas' starts
included), the parent's own time in the outside checks (reading the batch from the frozen
worker, digests, aliasing, projections, comparisons) and the reference worker's time answering
for every timed call (its fingerprints and the picked calls' outputs), each summed over shapes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing import interleaved as timing
from bot.engine.timing import outside_checks
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("tests/fixtures/problems/scale_add.py", "tests/fixtures/candidates/honest.py"),
    ("problems/rmsnorm.py", "tests/fixtures/candidates/honest_rmsnorm.py"),
    ("problems/softmax.py", "tests/fixtures/candidates/honest_softmax.py"),
    ("problems/swiglu.py", "kernels/swiglu_torch.py"),
    ("problems/layernorm.py", "tests/fixtures/candidates/honest_layernorm.py"),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-cap", type=float, default=2.0)
    args = parser.parse_args()
    made: dict[int, outside_checks.OutsideChecks] = {}
    phase_s = [0.0]
    original_read, original_time = outside_checks.OutsideChecks.read, timing.time_interleaved

    def register(self, *a, **k):  # type: ignore[no-untyped-def]
        made[id(self)] = self
        return original_read(self, *a, **k)

    def timed(*a, **k):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return original_time(*a, **k)
        finally:
            phase_s[0] += time.perf_counter() - started

    outside_checks.OutsideChecks.read = register  # type: ignore[method-assign]
    timing.time_interleaved = timed
    import bot.engine.evaluation.shape_run as shape_run

    shape_run.time_interleaved = timed  # type: ignore[attr-defined]
    print("| problem, candidate | timing phases | parent's outside checks | reference for every call |")
    print("| --- | --- | --- | --- |")
    for problem_path, candidate_path in CASES:
        made.clear()
        phase_s[0] = 0.0
        problem = load_problem(ROOT / problem_path)
        source = load_candidate(ROOT / candidate_path)
        options = EvalOptions(
            device="cpu",
            limits=Limits(memory_mb=4096, call_timeout_s=60),
            timing=TimingOptions(time_cap_s=args.time_cap),
            use_cache=False,
        )
        result = evaluate(problem, [source], None, options)
        verdict = result.candidates[0].verdict
        checks = sum(m.seconds for m in made.values())
        reference = sum(m.reference_s for m in made.values())
        total = phase_s[0]
        print(
            f"| `{problem_path}`, `{Path(candidate_path).name}` ({verdict.status}) | {total:.2f} s | "
            f"{checks:.3f} s ({checks / total:.1%}) | {reference:.2f} s ({reference / total:.1%}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
