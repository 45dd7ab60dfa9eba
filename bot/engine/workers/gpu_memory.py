"""A worker's report that the GPU's memory ran out, and who held that memory at the moment:
each process's use as the driver counts it (nvidia-smi), named by the bot's live worker it
belongs to. torch's own message names only the failing process's share, which on KernelBench's
large shapes left open whether the reference, another contender or a leak held the rest."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bot.sandbox import nvidia_smi

# cudaErrorMemoryAllocation outside the caching allocator (a launch, a library's workspace)
# reads "CUDA error: out of memory". The last alternative: when an allocation fails, torch's
# caching allocator asks NVML which processes hold the GPU's memory, for the OutOfMemoryError's
# message (reportProcessMemoryInfo). Where NVML does not start in the worker, an assertion in
# that report is what the caller sees instead (tests/test_gpu_memory_retry.py has the message an
# H200 printed).
OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
    r'|nvml\w*\(\) INTERNAL ASSERT FAILED at "[^"]*CUDACachingAllocator\.cpp"'
)
NAMED_AT_MOST = 8  # holders named in a line; the rest summed


def says_out_of_memory(text: str) -> bool:
    return OUT_OF_MEMORY.search(text) is not None


@dataclass(frozen=True)
class Holder:
    """One of the bot's workers: its name for people and every process of its unit."""

    name: str
    pids: tuple[int, ...]


def holders_line(used_by_pid: Mapping[int, int], workers: Iterable[Holder]) -> str:
    """Who held the GPU's memory, largest first: the bot's workers by name, then what processes
    that are none of its live workers held (a leak of the bot's, another job's work)."""
    named: list[tuple[int, str]] = []
    seen: set[int] = set()
    for worker in workers:
        pids = [p for p in worker.pids if p in used_by_pid and p not in seen]
        seen.update(pids)
        if pids:
            named.append((sum(used_by_pid[p] for p in pids), worker.name))
    named.sort(reverse=True)
    parts = [f"{name} {_gib(nbytes)}" for nbytes, name in named[:NAMED_AT_MOST]]
    if len(named) > NAMED_AT_MOST:
        rest = named[NAMED_AT_MOST:]
        parts.append(f"{len(rest)} more worker(s) {_gib(sum(n for n, _ in rest))}")
    others = [p for p in used_by_pid if p not in seen]
    if others:
        held = sum(used_by_pid[p] for p in others)
        parts.append(f"{len(others)} process(es) not the bot's live workers {_gib(held)}")
    return "GPU memory held then: " + (", ".join(parts) if parts else "no process listed")


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def gpu_process_memory(gpu_index: int | None) -> dict[int, int] | None:
    """Each process's use of the GPU's memory (pid: bytes) as its driver counts it, or None
    where nvidia-smi cannot say. The pids are as this machine's process table has them, where
    the bot and its workers share one; in another pid namespace none of them match."""
    listing = nvidia_smi.query(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], gpu_index)
    return None if listing is None else process_memory(listing)


def process_memory(listing: str) -> dict[int, int]:
    """nvidia-smi's `pid, used MiB` lines as pid: bytes (a process listed twice, summed)."""
    used: dict[int, int] = {}
    for line in listing.splitlines():
        try:
            pid, mib = (int(v) for v in line.split(","))
        except ValueError:
            continue  # "[N/A]" where the driver does not count a process's use
        used[pid] = used.get(pid, 0) + (mib << 20)
    return used
