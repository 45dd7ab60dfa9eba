"""CPU cores reserved for launching timed GPU work, one per GPU lane.

Launch-bound kernels are timed as much on the CPU that launches them as on the GPU. Workers
start with every core but the reserved ones, so compilations (of this problem or of others
running beside it) never share a core with a measurement; during timing the measured worker's
launching thread moves onto its lane's reserved core, one contender at a time per lane.
"""

from __future__ import annotations

import os

_lanes: list[int | None] = [None]


def set_lanes(devices: list[int | None]) -> None:
    """Called once the GPU lanes are known (bot.engine.loop.lanes); each lane gets its own core."""
    global _lanes
    _lanes = list(devices) or [None]


def _reserved() -> list[int]:
    cores = sorted(os.sched_getaffinity(0))
    # Only where there is room: at least two cores left for everything else per reserved one.
    if len(cores) < 3 * len(_lanes) + 1:
        return []
    return cores[-len(_lanes) :]


def timing_core(gpu_index: int | None = None) -> int | None:
    """The reserved core of this GPU's lane, or None on small machines."""
    reserved = _reserved()
    if not reserved:
        return None
    lane = _lanes.index(gpu_index) if gpu_index in _lanes else 0
    return reserved[lane % len(reserved)]


def worker_cores() -> set[int]:
    """Every core a worker may use outside its timed calls."""
    return set(os.sched_getaffinity(0)) - set(_reserved())
