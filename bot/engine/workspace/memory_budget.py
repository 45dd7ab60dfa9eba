"""One device's memory shared by the problems running on it: each problem holds a reservation,
admitted by bot.core.memory's rule, and the one that does not fit waits.

A problem reserves its workers' CUDA contexts before it starts them (`start`), then, once its
reference trial has measured the footprint, what its reference and the contenders that run
their trials at once need (`grow`): as many contenders as fit beside the others, at least one;
where not even one fits now, it waits for a running problem to finish. A problem that does not
fit even alone is refused with one line. While a reference measures a shape (`sizing`), it
allocates what the shape needs before anyone knows how much: one problem at a time does that,
and no other problem grows beside it. Before a shape's timing, which holds more than its trials
(replicas, the timed calls' outputs), the problem widens its reservation to the timing's figure
(`widen`), waiting as `grow` does. Every wait is told to its caller's `waited`, so that the
problem's time split counts it. docs/scale-out.md states the rule.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import BotError
from bot.core.memory import CONTEXT_BYTES, Demand, admit, contenders_at_once, gib, margin_bytes, problem_demand
from bot.core.settings import Device
from bot.core.time_split import Waited, no_record
from bot.engine.workspace.device_name import gpu_memory_bytes

log = logging.getLogger(__name__)


class DoesNotFit(BotError):
    """A problem needs more memory than the device has free, even alone."""


@dataclass
class Reservation:
    name: str
    nbytes: int
    grown: bool = False  # holds its measured demand (it runs), not only its contexts
    # While its reference measures a shape (MemoryBudget.sizing): all the memory no other
    # problem holds, which no other problem may grow into; contexts may still start in it.
    sizing_bytes: int = 0
    # Waiting for room (`grow`, `widen`): what it holds is not freed until that comes, so a
    # problem widening its reservation does not wait for it (two waiting for each other).
    waiting: bool = False


class MemoryBudget:
    """The free memory of one device (`free_bytes` when none of the bot's work held any)."""

    def __init__(self, free_bytes: int, total_bytes: int, where: str, context_bytes: int):
        self.free_bytes, self.where, self.context_bytes = free_bytes, where, context_bytes
        self.margin = margin_bytes(total_bytes)
        self.usable = free_bytes - self.margin
        self._held: list[Reservation] = []
        self._queue: list[Demand] = []
        self._changed = threading.Condition()
        self._sizing: Reservation | None = None

    def held_bytes(self, but: Reservation | None = None, sizing: bool = False) -> int:
        """What the problems hold (but `but`); with `sizing`, the memory a sizing problem's
        reference may yet allocate too."""
        return sum(r.nbytes + (r.sizing_bytes if sizing else 0) for r in self._held if r is not but)

    @contextlib.contextmanager
    def sizing(self, reservation: Reservation, waited: Waited = no_record) -> Iterator[None]:
        """While `reservation`'s reference runs a shape's trials, which allocate the shape's
        inputs, outputs and float64 copies before any figure of them exists: one problem at a
        time (on the H100, five problems' first trials at once ran a 12 GiB one out of memory),
        holding all the memory no other problem holds, so that no other problem grows into
        it. Workers' contexts may still start: the margin is for them. A reference that needs
        more than is left still runs out of memory, and its problem runs again alone."""
        with self._when(reservation, lambda: self._sizing is None, waited):
            self._sizing = reservation
            reservation.sizing_bytes = max(0, self.usable - self.held_bytes())
        try:
            yield
        finally:
            with self._changed:
                reservation.sizing_bytes = 0
                self._sizing = None
                self._changed.notify_all()

    def start(self, name: str, workers: int, waited: Waited = no_record) -> Reservation:
        """A problem's `workers` contexts, in turn (first come, first admitted); blocks until
        they fit beside the others, raises DoesNotFit where they never can."""
        demand = Demand(name, workers * self.context_bytes)
        began = time.monotonic()
        with self._changed:
            self._queue.append(demand)
            try:
                while True:
                    verdict = admit(self._queue, self.free_bytes, self.held_bytes(), self.margin)
                    for refused, reason in verdict.refused:
                        if refused == name:
                            raise DoesNotFit(f"{name}: its {workers} workers {reason} ({self.where})")
                    if name in verdict.run:
                        reservation = Reservation(name, demand.nbytes)
                        self._held.append(reservation)
                        waited(began, time.monotonic())
                        return reservation
                    self._changed.wait()
            finally:
                self._queue.remove(demand)
                self._changed.notify_all()

    def grow(
        self,
        reservation: Reservation,
        reference_bytes: int,
        contender_bytes: int,
        wanted: int,
        waited: Waited = no_record,
    ) -> int:
        """How many contenders run their trials at once, the reservation grown to cover them
        and the reference. Waits while not even one fits beside running problems; where only
        problems that hold their contexts remain, it goes on with one (their contexts are all
        they hold)."""
        ctx = self.context_bytes
        alone = problem_demand(reference_bytes, contender_bytes, 1, ctx)
        if alone > self.usable:
            raise DoesNotFit(
                f"{reservation.name}: needs {gib(alone)} with one contender beside its reference, "
                f"{self.where} has {gib(self.free_bytes)} free ({gib(self.margin)} of it kept as a margin)"
            )

        def room() -> int:
            return self.usable - self.held_bytes(but=reservation, sizing=True)

        # A problem measuring its shape runs: nothing goes on beside it that does not fit.
        with self._when(reservation, lambda: alone <= room() or not self._others_run(reservation, False), waited):
            at_once = contenders_at_once(reference_bytes, contender_bytes, wanted, room(), ctx)
            reservation.nbytes = max(reservation.nbytes, problem_demand(reference_bytes, contender_bytes, at_once, ctx))
            reservation.grown = True
        return at_once

    def widen(self, reservation: Reservation, nbytes: int, waited: Waited = no_record) -> bool:
        """`reservation` grown to hold `nbytes` (a shape's timing, by what its workers hold):
        waits while that does not fit beside problems that run, and not while the others
        only wait themselves (for room, or in turn to measure a shape), since none of them
        frees anything before this one does. Returns whether it fit; where it did not, it
        goes on all the same, holding the figure, so that no other problem grows into it."""

        def fits() -> bool:
            return nbytes <= self.usable - self.held_bytes(but=reservation, sizing=True)

        with self._when(reservation, lambda: fits() or not self._others_run(reservation, True), waited):
            fitted = fits()
            reservation.nbytes = max(reservation.nbytes, nbytes)
        return fitted

    def _others_run(self, reservation: Reservation, but_waiting: bool) -> bool:
        """Whether a problem other than `reservation` holds memory it will free by going on:
        one grown (or measuring its shape); with `but_waiting`, not one that waits for room."""
        return any(
            (r.grown or r is self._sizing) and not (but_waiting and r.waiting)
            for r in self._held
            if r is not reservation
        )

    @contextlib.contextmanager
    def _when(self, reservation: Reservation, ready: Callable[[], bool], waited: Waited) -> Iterator[None]:
        """The block runs under the budget's lock once `ready()` (read under it too), so what
        it takes is what `ready` saw; `reservation` is marked as waiting until then."""
        began = time.monotonic()
        with self._changed:
            reservation.waiting = True
            self._changed.notify_all()  # a widening problem may go on now that this one waits
            try:
                while not ready():
                    self._changed.wait()
            finally:
                reservation.waiting = False
            waited(began, time.monotonic())
            yield
            self._changed.notify_all()

    def release(self, reservation: Reservation) -> None:
        with self._changed:
            if reservation in self._held:
                self._held.remove(reservation)
            self._changed.notify_all()


def device_budget(device: str, gpu: int | None) -> MemoryBudget:
    """The budget of a GPU (its free memory now, as its driver counts it) or of the host."""
    if device == Device.CUDA:
        figures = gpu_memory_bytes(gpu)
        if figures is None:  # no nvidia-smi: torch's count, at the price of a context here
            import torch

            figures = torch.cuda.mem_get_info(gpu if gpu is not None else 0)
        free, total = figures
        return MemoryBudget(free, total, f"GPU {gpu if gpu is not None else 0}", CONTEXT_BYTES)
    free, total = host_memory()
    return MemoryBudget(free, total, "the host", 0)


def host_memory(meminfo: str | None = None, cgroup: Path | None = None) -> tuple[int, int]:
    """(available, total) bytes of the host: /proc/meminfo's MemAvailable and MemTotal, each no
    more than what this process's cgroup (v2) allows."""
    text = Path("/proc/meminfo").read_text() if meminfo is None else meminfo
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in text.splitlines() if line.split()[1:]}
    available, total = fields.get("MemAvailable", 0), fields.get("MemTotal", 0)
    limit = _cgroup_limit(cgroup)
    if limit is not None:
        limit_max, current = limit
        total = min(total, limit_max)
        available = min(available, max(0, limit_max - current))
    return available, total


def _cgroup_limit(folder: Path | None) -> tuple[int, int] | None:
    """(memory.max, memory.current) of this process's cgroup, or None where unlimited or unknown."""
    try:
        if folder is None:
            lines = Path(f"/proc/{os.getpid()}/cgroup").read_text().splitlines()
            unified = next(line for line in lines if line.startswith("0::"))  # cgroup v2's line
            folder = Path("/sys/fs/cgroup") / unified[3:].lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit), int((folder / "memory.current").read_text())
    except (OSError, ValueError, StopIteration):
        return None
