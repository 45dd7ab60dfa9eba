"""While one contender is timed, the others are frozen: nothing of theirs runs in its window.

A bot-wide registry of live workers (each `WorkerClient` registers itself); trusted ones (the
reference) are never frozen. `timing_phase()` opens a phase; `phase.only(client)` before each
timed batch thaws that contender and freezes every other untrusted live worker (the whole
cgroup, so their children too); those already frozen stay so across consecutive batches at no
cost. Leaving the phase thaws everything. Time a worker spends frozen does not count toward
its request timeouts or hang detection (bot.engine.workers.client).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from bot.sandbox.base import RunningWorker


class Frozen(Protocol):
    running: RunningWorker
    trusted: bool


_live: dict[int, Frozen] = {}
_lock = threading.RLock()


def register(client: Frozen) -> None:
    with _lock:
        _live[id(client)] = client


def unregister(client: Frozen) -> None:
    with _lock:
        _live.pop(id(client), None)


def live() -> list[Frozen]:
    with _lock:
        return list(_live.values())


def freeze_all_but(*keep: Frozen) -> float:
    """Thaw `keep`, freeze every other untrusted live worker; the seconds it took."""
    began = time.perf_counter()
    kept = {id(c) for c in keep}
    with _lock:
        for client in keep:
            client.running.thaw()
        for key, client in _live.items():
            if key not in kept and not client.trusted and not client.running.frozen:
                client.running.freeze()
    return time.perf_counter() - began


def thaw_all() -> None:
    with _lock:
        for client in _live.values():
            client.running.thaw()


class Phase:
    """One timing phase: `only(client)` per batch; its cost is counted."""

    def __init__(self) -> None:
        self.switches = 0
        self.seconds = 0.0

    def only(self, *keep: Frozen) -> None:
        self.seconds += freeze_all_but(*keep)
        self.switches += 1


@contextlib.contextmanager
def timing_phase() -> Iterator[Phase]:
    """A phase of timed batches; every worker is thawed when it ends, however it ends."""
    phase = Phase()
    try:
        yield phase
    finally:
        thaw_all()
