"""One CPU core reserved for launching timed GPU work.

Launch-bound kernels are timed as much on the CPU that launches them as on the GPU. Workers
start with every core but the reserved one, so compilations (of this problem or of others
running beside it) never share a core with a measurement; during timing the measured worker's
launching thread moves onto the reserved core, one contender at a time.
"""

from __future__ import annotations

import os


def timing_core() -> int | None:
    """The reserved core, or None on small machines (fewer than 4 cores: nothing to spare)."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[-1] if len(cores) >= 4 else None


def worker_cores() -> set[int]:
    """Every core a worker may use outside its timed calls."""
    cores = set(os.sched_getaffinity(0))
    reserved = timing_core()
    return cores - {reserved} if reserved is not None else cores
