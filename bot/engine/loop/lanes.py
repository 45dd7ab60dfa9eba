"""GPU lanes: on a runner with N GPUs, N exclusive timing lanes fed from one work queue.

Problems are taken from one queue by `jobs` threads; each problem runs on the lane (GPU) with
the fewest problems at that moment. Compilation and verification of all running problems
overlap on the CPUs; timing is exclusive per lane (`bot.engine.workers.gpulock` keys its lock by GPU), so two
measurements never share a GPU, and a verdict does not depend on how many lanes there are.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from bot.core.domain import Problem
from bot.core.errors import BotError, GpuOutOfMemory
from bot.core.progress import Note, ProblemFailed, ProblemStarted, Progress
from bot.core.settings import Device
from bot.sandbox.cores import set_lanes

T = TypeVar("T")


class Lanes:
    def __init__(self, devices: Sequence[int | None]):
        if not devices:
            raise ValueError("at least one lane")
        self.devices = list(devices)
        set_lanes(self.devices)
        self._active = [0] * len(self.devices)
        self._lock = threading.Lock()
        self.history: list[tuple[str, int | None]] = []  # (problem, device), in start order

    def acquire(self, name: str) -> int:
        with self._lock:
            i = min(range(len(self.devices)), key=lambda k: (self._active[k], k))
            self._active[i] += 1
            self.history.append((name, self.devices[i]))
            return i

    def release(self, i: int) -> None:
        with self._lock:
            self._active[i] -= 1


def visible_gpus(spec: str | None, device: str) -> list[int | None]:
    """`--gpus`: 'all' (default on CUDA: every visible GPU), or a comma list of indices."""
    if device != Device.CUDA:
        return [None]
    if spec in (None, "", "all"):
        import torch

        return list(range(torch.cuda.device_count())) or [None]
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise BotError(f"--gpus {spec!r}: expected 'all' or a comma list like 0,1") from None


def resolve_jobs(jobs: int | None, device: str, problems: int, lanes: int, cores: int | None = None) -> int:
    """`--jobs`: N, or None ('auto', the default): on a CPU one problem per core; on a GPU one
    problem per lane, which then has every core for its compilations and the GPU to itself. On an
    H100, five KernelBench problems at once took about as long as five others one after another
    (336 s, 343 s), and each problem three times as long (medians 203 s, 60 s): timings queue on
    the one GPU and compilations share the cores (docs/scale-out.md). With N
    beyond the lanes, each lane's memory admits what fits (bot.engine.workspace.memory_budget).
    Never more than the problems, never fewer than the lanes."""
    if jobs is None:
        jobs = (cores or os.cpu_count() or 1) if device != Device.CUDA else lanes
    return max(1, min(jobs, problems), min(lanes, problems))


def run_problems(
    problems: Sequence[Problem],
    work: Callable[[Problem, int | None, bool], T],
    jobs: int,
    lanes: Lanes,
    progress: Progress,
    on_error: Callable[[Problem, BotError], T] | None = None,
) -> list[T]:
    """`work(problem, gpu, beside_others)` for every problem, `jobs` at a time; results in
    input order. `beside_others`: other problems may run at the same time.

    One problem's failure never costs the others theirs: a problem that ran out of GPU memory
    beside the others is run again after them, alone; any other input error becomes that
    problem's result through `on_error`, or, without it, is raised once every problem has
    had its turn. A bug (not a BotError) is raised as itself."""

    def one(item: tuple[int, Problem], beside_others: bool) -> T:
        n, problem = item
        lane = lanes.acquire(problem.name)
        gpu = lanes.devices[lane]
        progress(ProblemStarted(problem.name, n, len(problems), gpu))
        try:
            return work(problem, gpu, beside_others)
        except BotError as exc:  # said now, not only at the end: a long sweep may be cut off first
            again = isinstance(exc, GpuOutOfMemory) and beside_others
            progress(ProblemFailed(problem.name, str(exc), n, len(problems), again))
            raise
        finally:
            lanes.release(lane)

    def each(items: list[tuple[int, Problem]], at_once: int) -> dict[int, T | BaseException]:
        beside_others = at_once > 1 and len(items) > 1
        with ThreadPoolExecutor(max_workers=max(1, at_once)) as pool:
            futures = {n: pool.submit(one, (n, p), beside_others) for n, p in items}
            return {n: f.exception() or f.result() for n, f in futures.items()}

    outcome = each(list(enumerate(problems, 1)), jobs)
    short = [(n, problems[n - 1]) for n, r in outcome.items() if isinstance(r, GpuOutOfMemory)]
    if short and jobs > 1:
        progress(
            Note(f"{len(short)} problem(s) ran out of GPU memory beside others: running them again, one at a time")
        )
        outcome.update(each(short, 1))
    failed = [r for r in outcome.values() if isinstance(r, BaseException)]
    if any(not isinstance(r, BotError) for r in failed):
        raise next(r for r in failed if not isinstance(r, BotError))  # a bug: its own traceback
    if on_error is not None:
        return [
            on_error(problems[n - 1], r) if isinstance(r, BotError) else r  # type: ignore[misc]
            for n, r in sorted(outcome.items())
        ]
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise BotError(f"{len(failed)} of {len(problems)} problems failed: " + "; ".join(map(str, failed)))
    return [outcome[n] for n in range(1, len(problems) + 1)]  # type: ignore[misc]
