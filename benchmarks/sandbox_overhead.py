#!/usr/bin/env python
"""How much the docker sandbox adds per candidate, compared with the process sandbox (CPU).

Two measurements, backends interleaved run by run so drift hits both alike:
  worker  start one worker, wait for its hello, stop it (the sandbox's own cost);
  verify  a whole `bot verify` of one candidate, in-process: start to verdict (a verify
          starts two workers: the reference and the candidate).
One untimed warm-up of each backend first (page cache, the local image).

    PYTHONPATH=. python3 benchmarks/sandbox_overhead.py --runs 20 --json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.engine.evaluation.evaluate import evaluate  # noqa: E402
from bot.engine.evaluation.options import EvalOptions  # noqa: E402
from bot.engine.timing.records import TimingOptions  # noqa: E402
from bot.engine.workers.client import WorkerClient  # noqa: E402
from bot.engine.workspace.candidates import load_candidate  # noqa: E402
from bot.engine.workspace.problems import load_problem  # noqa: E402
from bot.sandbox import Limits  # noqa: E402
from bot.sandbox.backends import make_sandbox  # noqa: E402

BACKENDS = ("process", "docker")


def time_worker(sandbox, problem, tmp: Path) -> float:
    t0 = time.perf_counter()
    client = WorkerClient(sandbox, "bench", "cpu", tmp / "w", tmp / "cache", (problem.path,), Limits())
    client.close()
    return time.perf_counter() - t0


def time_verify(backend: str, problem, candidate, tmp: Path) -> float:
    # The same timing options as `bot verify`, so this is what a user waits for.
    options = EvalOptions(
        device="cpu",
        use_cache=False,
        sandbox=backend,
        cache_root=tmp / "cache",
        timing=TimingOptions(time_cap_s=1.0, min_samples=5),
    )
    t0 = time.perf_counter()
    verdict = evaluate(problem, [candidate], None, options).candidates[0].verdict
    elapsed = time.perf_counter() - t0
    if not verdict.accepted:
        raise SystemExit(f"{backend}: the candidate was rejected: {verdict.reasons}")
    return elapsed


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--problem", default=str(ROOT / "tests/fixtures/problems/scale_add.py"))
    parser.add_argument("--candidate", default=str(ROOT / "tests/fixtures/candidates/honest.py"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    problem, candidate = load_problem(args.problem), load_candidate(args.candidate)
    sandboxes = {b: make_sandbox(b) for b in BACKENDS}
    samples: dict[str, dict[str, list[float]]] = {"worker": {}, "verify": {}}
    with tempfile.TemporaryDirectory(prefix="kernel-bot-bench-") as tmp_root:
        tmp = Path(tmp_root)
        for backend in BACKENDS:  # warm-up, untimed
            time_verify(backend, problem, candidate, tmp / f"warm-{backend}")
        for run in range(args.runs):
            for backend in BACKENDS:
                where = tmp / f"{backend}-{run}"
                samples["worker"].setdefault(backend, []).append(
                    time_worker(sandboxes[backend], problem, where / "worker")
                )
                samples["verify"].setdefault(backend, []).append(
                    time_verify(backend, problem, candidate, where / "verify")
                )
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_name(),
        "runs": args.runs,
        "python": platform.python_version(),
        "problem": args.problem,
        "candidate": args.candidate,
    }
    for kind, by_backend in samples.items():
        medians = {b: statistics.median(v) for b, v in by_backend.items()}
        report[kind] = {
            **{f"{b}_median_s": round(m, 3) for b, m in medians.items()},
            **{f"{b}_min_s": round(min(v), 3) for b, v in by_backend.items()},
            "docker_minus_process_s": round(medians["docker"] - medians["process"], 3),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{report['date']}  {report['cpu']}  Python {report['python']}  runs={args.runs}")
    for kind in ("worker", "verify"):
        r = report[kind]
        print(
            f"{kind:>7}: process median {r['process_median_s']:.2f} s, docker median "
            f"{r['docker_median_s']:.2f} s, docker - process {r['docker_minus_process_s']:+.2f} s"
        )


if __name__ == "__main__":
    main()
