"""Where a GPU worker's start-up goes, and how starting many at once scales.

    PYTHONPATH=. python3 benchmarks/worker_start_time.py [--counts 1,8,16,29] [--device cuda]

Prints one table per part: the cost of each start-up step in a fresh interpreter (each run
three times, the median kept), then the wall time to start N real workers (bot.engine.workers.client) at
once and 8 at a time (as `bot optimize` does), as fresh processes and as forks of the fork
server (bot.sandbox.fork_server; its own start, a torch import, is paid once per run and
shown apart), and on CUDA N children forked from one process that has imported torch and
triton but not touched CUDA (the least a fork can cost there).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WARM_UP = (
    "import torch, triton; torch.cuda.init(); b = torch.randn(512, 512, device='cuda'); "
    "(b @ b).sum().item(); (b.to(torch.bfloat16) @ b.to(torch.bfloat16)).float().sum().item(); "
    "torch.cuda.synchronize()"
)
STEPS = [
    ("interpreter", "pass"),
    ("import torch", "import torch"),
    ("import torch, triton", "import torch, triton"),
    ("+ CUDA context", "import torch, triton; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"),
    ("+ warm-up matmuls (fp32, bf16)", WARM_UP),
]


def _seconds(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-c", code], check=True)
    return time.perf_counter() - t0


def steps_table() -> None:
    print("| step (fresh interpreter, cumulative) | median s of 3 |")
    print("| --- | --- |")
    for label, code in STEPS:
        print(f"| {label} | {statistics.median(_seconds(code) for _ in range(3)):.2f} |", flush=True)


def _start_workers(n: int, at_once: int, device: str, server: bool) -> float:
    from bot.engine.workers.client import WorkerClient
    from bot.sandbox.base import Limits
    from bot.sandbox.process import ProcessSandbox

    os.environ["KERNEL_BOT_FORK_SERVER"] = "1" if server else "0"

    sandbox = ProcessSandbox()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clients = []

        def one(i: int) -> None:
            clients.append(
                WorkerClient(
                    sandbox, f"w{i}", device, root / f"w{i}", root / "cache", (), Limits(), None, None, describe=False
                )
            )

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            list(pool.map(one, range(n)))
        wall = time.perf_counter() - t0
        for client in clients:
            client.close()
    return wall


FORKED = f"""
import os, sys, time, torch, triton
n = int(sys.argv[1])
t0 = time.perf_counter()
pids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        exec({WARM_UP!r})
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print(time.perf_counter() - t0)
"""


def _forked(n: int) -> float:
    out = subprocess.run(
        [sys.executable, "-I", "-c", FORKED, str(n)], check=True, capture_output=True, text=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def _server_start(device: str) -> float:
    from bot.sandbox.base import WorkerLaunch
    from bot.sandbox.process import fork_server_for

    os.environ["KERNEL_BOT_FORK_SERVER"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        server = fork_server_for(WorkerLaunch(Path(tmp), Path(tmp), (), device))
        if server is None:
            raise SystemExit("the fork server did not start")
        return time.perf_counter() - t0


def scaling_table(counts: list[int], device: str) -> None:
    print(f"\nfork server's own start (once per run): {_server_start(device):.1f} s")
    print(
        "\n| workers | fresh, all at once, s | fresh, 8 at a time, s | forked by the server, all at once, s "
        "| forked, 8 at a time, s | bare fork after import (CUDA + warm-up only), s |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for n in counts:
        times = [_start_workers(n, at_once, device, server) for server in (False, True) for at_once in (n, 8)]
        bare = _forked(n) if device == "cuda" else float("nan")
        print(f"| {n} | " + " | ".join(f"{t:.1f}" for t in times) + f" | {bare:.1f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,8,16,29")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-steps", action="store_true", help="only the scaling table")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    if args.device == "cuda" and not args.no_steps:
        steps_table()
    scaling_table([int(c) for c in args.counts.split(",")], args.device)


if __name__ == "__main__":
    main()
