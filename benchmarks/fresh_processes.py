"""What the fresh-process benchmarks share: each variant run as its own child process (a new
CUDA context and new allocations, as a worker is), rounds in shuffled order so that no
variant always runs first after a pause, results written after every child."""

import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence


def run_children(
    script: str, variants: Sequence[str], rounds: int, describe: Callable[[dict], str], out_path: str | None
) -> dict[str, list[dict]]:
    """`python script --child VARIANT` per variant and round; each child prints its result as
    the last line of JSON. Returns every variant's results, in run order."""
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(rounds):
        for v in random.sample(list(variants), len(variants)):
            t0 = time.time()
            proc = subprocess.run(
                [sys.executable, script, "--child", v], capture_output=True, text=True, cwd=sys.path[0]
            )
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"child {v} failed")
            runs[v].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {v:13} {time.time() - t0:5.1f} s  {describe(runs[v][-1])}", flush=True)
            if out_path:
                with open(out_path, "w") as f:
                    json.dump(runs, f)
    return runs


def spread(values) -> float:
    """(max - min) / median, in %."""
    return 100 * (max(values) - min(values)) / statistics.median(values)
