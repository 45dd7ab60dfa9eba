"""An honest vectorisation is claimed on every run: `bot bench` of a vectorised RMSNorm
(tests/fixtures/candidates/honest_rmsnorm.py) against the same RMSNorm computed in a Python
loop over chunks of rows, RUNS times, each in a fresh process with a fresh HOME (no result
cache), printing each run's claim and how far each contender's worker processes (replicas)
disagree: the ratio of their largest median to their smallest, per shape, and the offset
between processes the interval allows for (bot.core.stats.worker_spread, from batches next to
each other in time), as a standard deviation in percent.

    PYTHONPATH=. python3 benchmarks/honest_claims.py [--runs 5] [--device cpu] [--cap-s 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "problems" / "rmsnorm.py"
CANDIDATE = ROOT / "tests" / "fixtures" / "candidates" / "honest_rmsnorm.py"

CHUNKED_LOOP = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """RMSNorm one chunk of 4 rows at a time: the same arithmetic as the vectorised candidate."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16))

    def forward(self, x):
        out = torch.empty_like(x)
        for start in range(0, x.shape[0], 4):
            xf = x[start : start + 4].float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            out[start : start + 4] = (xf * rstd * self.weight.float()).to(x.dtype)
        return out
'''


def one_run(baseline: Path, device: str, cap_s: float) -> dict:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "bot", "bench", str(PROBLEM), str(CANDIDATE), "--baseline", str(baseline)]
        command += ["--device", device, "--time-cap-s", str(cap_s), "--json"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if not done.stdout.strip():
        raise SystemExit(f"bot bench printed nothing (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def claim(result: dict) -> str:
    """The candidate's verdict, speedup and interval from `bot bench --json`."""
    contender = next(c for c in result["candidates"] if c["name"] != result.get("baseline", {}).get("name"))
    low, high = contender.get("speedup_ci") or (None, None)
    claimed = "claimed" if contender.get("significant") else "not claimed"
    replicas = "; ".join(f"{c['name']} {replica_ratios(c)}" for c in (result.get("baseline"), contender) if c)
    offsets = [
        f"{math.expm1(d['spread_log_sd']):.1%}"
        for s in contender.get("shapes", [])
        if (d := s.get("derivation")) and d.get("spread_df")
    ]
    return (
        f"{contender['status']}, {contender.get('speedup')}x [{low}, {high}]: {claimed}; "
        f"medians of replicas: {replicas}; process offset: {', '.join(offsets) or '-'}"
    )


def replica_ratios(contender: dict) -> str:
    """Per shape, the largest of its workers' medians over the smallest (1.00x: they agree)."""
    ratios = []
    for shape in contender.get("shapes", []):
        medians = [m for m in (shape.get("measurement") or {}).get("worker_medians_us", []) if m > 0]
        if len(medians) > 1:
            ratios.append(f"{max(medians) / min(medians):.2f}x")
    return ", ".join(ratios) or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cap-s", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        baseline = Path(scratch) / "rmsnorm_chunked_loop.py"
        baseline.write_text(CHUNKED_LOOP)
        for run in range(1, args.runs + 1):
            print(f"run {run}: {claim(one_run(baseline, args.device, args.cap_s))}", flush=True)


if __name__ == "__main__":
    main()
