"""The parent's record of where one problem's wall time goes (bot.core.time_split): each
phase is bracketed on the parent's own monotonic clock, never on a worker's word.

`optimize` makes one `PhaseClock` per problem and makes it current while it evaluates
(`recording`); the code that runs a phase reads it with `current()` on the problem's thread
and hands it to the threads it starts (a new thread sees no current clock: that one records
nothing). On one thread phases nest and the innermost one counts (the oracle's checks inside a
timing phase are the oracle's). A thread that only waits (for the threads it started, for the
device another problem holds) is in no phase: that time is "other" unless another thread's
phase covers it. Waits for the device, for its lock (bot.engine.workers.gpulock) or for room in
its memory (bot.engine.workspace.memory_budget), are recorded besides, whatever phase encloses
them: the split reports how much of the wall time they cover.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from bot.core.time_split import PARTS, Segment, TimeSplit, Waited, split_wall_time
from bot.protocol.messages import Construct, Fingerprints, ReferenceRun
from bot.protocol.typed import Request

_log = logging.getLogger(__name__)

WAIT_LOGGED_S = 2.0  # a wait for the device worth a debug line


class PhaseClock:
    """Thread-safe: every thread keeps its own stack of open phases."""

    def __init__(self, began: float | None = None, enabled: bool = True):
        self.began = time.monotonic() if began is None else began
        self.enabled = enabled
        self._segments: list[Segment] = []
        self._waits: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    def _stack(self) -> list[list[Any]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _close(self, part: str, began: float, now: float) -> None:
        if now > began:
            with self._lock:
                self._segments.append(Segment(part, began, now))

    @contextlib.contextmanager
    def phase(self, part: str | None) -> Iterator[None]:
        """`part` (one of bot.core.time_split.PARTS) runs on this thread inside the block;
        None: the block is whatever phase encloses it."""
        if not self.enabled or part is None:
            yield
            return
        if part not in PARTS:
            raise ValueError(f"unknown part {part!r}")
        stack = self._stack()
        now = time.monotonic()
        if stack:  # the enclosing phase pauses while this one runs
            self._close(stack[-1][0], stack[-1][1], now)
        stack.append([part, now])
        try:
            yield
        finally:
            now = time.monotonic()
            done = stack.pop()
            self._close(done[0], done[1], now)
            if stack:
                stack[-1][1] = now

    @contextlib.contextmanager
    def around(self, part: str, hold: AbstractContextManager[Any]) -> Iterator[None]:
        """`hold` entered and left inside `part` (a timing phase with its freezing and thawing)."""
        with self.phase(part), hold:
            yield

    def waited(self, began: float, ended: float) -> None:
        """A thread of the problem waited for the device from `began` to `ended`."""
        if self.enabled and ended > began:
            with self._lock:
                self._waits.append((began, ended))

    def waits(self, who: str, what_for: str) -> Waited:
        """Told each wait of `who` for `what_for`: into the split, and into the debug log where it
        was long (`who waited S s for what_for`), to tell which waits a problem's time goes to."""

        def record(began: float, got: float) -> None:
            self.waited(began, got)
            if got - began >= WAIT_LOGGED_S:
                _log.debug("%s waited %.1f s for %s", who, got - began, what_for)

        return record

    def segments(self) -> list[Segment]:
        with self._lock:
            return list(self._segments)

    def split(self, end: float | None = None) -> TimeSplit:
        """The split from `began` to `end` (now by default)."""
        with self._lock:
            waits = list(self._waits)
        return split_wall_time(self.segments(), self.began, time.monotonic() if end is None else end, waits)


# What the trusted reference worker is asked for that is the oracle's own float64 work; the rest
# it does (staging a batch's inputs, the harness's calibration) belongs to the enclosing phase.
ORACLE_WORK = (Construct, ReferenceRun, Fingerprints)


def part_of(worker: object, request: Request) -> str | None:
    """The part a request to `worker` is, by itself: "oracle" for the trusted reference's own
    work; None (the enclosing phase) for anything else, a stand-in without `trusted` included."""
    return "oracle" if getattr(worker, "trusted", False) and isinstance(request, ORACLE_WORK) else None


_IDLE = PhaseClock(enabled=False)
_current: ContextVar[PhaseClock | None] = ContextVar("kernel_bot_phase_clock", default=None)


def current() -> PhaseClock:
    """The clock of the problem this thread works on; one that records nothing elsewhere."""
    return _current.get() or _IDLE


@contextlib.contextmanager
def recording(clock: PhaseClock) -> Iterator[PhaseClock]:
    """`clock` is current on this thread inside the block."""
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)
