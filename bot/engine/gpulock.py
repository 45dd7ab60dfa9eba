"""Exclusive GPU timing while everything else overlaps.

Verification trials (which also compile lazily at the first call) hold the lock shared;
timing holds it exclusively, so no other trial of this bot touches the GPU while a
measurement runs. Writers are preferred: once a timing waits, new trials wait behind it.
Timings go in the order they asked: otherwise a problem verified early can wait while
later ones are timed, until a sweep's time limit comes first.
Within one process this is a readers-writer lock; across processes of the bot (e.g. two
`bot optimize` runs on one runner) an fcntl lock file per GPU does the same.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


class _RWLock:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting: collections.deque[object] = collections.deque()  # first come, first served

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        me = object()
        with self._cond:
            self._writers_waiting.append(me)
            try:
                while self._writer or self._readers or self._writers_waiting[0] is not me:
                    self._cond.wait()
            finally:  # served, or interrupted while waiting: either way no longer in the queue
                self._writers_waiting.remove(me)
                self._cond.notify_all()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


_LOCKS: dict[str, _RWLock] = {}
_GUARD = threading.Lock()


def _lock_for(key: str) -> _RWLock:
    with _GUARD:
        return _LOCKS.setdefault(key, _RWLock())


def _lock_file(key: str, part: str = "") -> Path:
    return Path(tempfile.gettempdir()) / f"kernel-bot-{key}{part}.lock"


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def _file_lock(key: str, mode: int) -> Iterator[None]:
    """The same lock across processes of the bot, writers preferred there too.

    flock alone grants a shared lock while an exclusive one waits, so processes whose
    verification overlaps (a test run beside a sweep, say) could hold a
    timing off for minutes. A writer first takes the intent file and keeps it until it holds
    the lock; readers pass through the intent file, so none starts while a writer waits."""
    with contextlib.ExitStack() as held:
        with _flock(_lock_file(key, ".intent"), mode):
            held.enter_context(_flock(_lock_file(key), mode))
        yield


@contextlib.contextmanager
def gpu_shared(key: str) -> Iterator[None]:
    """Verification work on this GPU (may run alongside other verification)."""
    with _lock_for(key).shared(), _file_lock(key, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def gpu_exclusive(key: str) -> Iterator[None]:
    """A measurement on this GPU: nothing else of ours runs on it meanwhile."""
    with _lock_for(key).exclusive(), _file_lock(key, fcntl.LOCK_EX):
        yield


def device_key(device: str, gpu_index: int | None) -> str:
    if device != "cuda":
        return "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return f"gpu{gpu_index if gpu_index is not None else (visible.split(',')[0] or 0)}"


class GpuHandover:
    """A gated trial call's hold on the GPU (bot.harness.tuning_gate): shared while the contender
    verifies and compiles; exclusive, as a measurement is, from the moment its worker asks
    to time kernel variants until the call ends. Called with what the worker said, it
    changes hands and returns the answer."""

    def __init__(
        self,
        shared: Callable[[], contextlib.AbstractContextManager],
        exclusive: Callable[[], contextlib.AbstractContextManager],
    ):
        self._shared = shared
        self._exclusive = exclusive
        self._held: contextlib.ExitStack | None = None

    def __enter__(self) -> GpuHandover:
        self._take(self._shared)
        return self

    def __exit__(self, *exc: object) -> None:
        self._let_go()

    def __call__(self, said: str) -> str:
        if said != "want":
            return f"unknown request {said!r}"
        self._let_go()  # never both at once: its own shared hold would keep the exclusive one waiting
        self._take(self._exclusive)
        return "granted"

    def _take(self, hold: Callable[[], contextlib.AbstractContextManager]) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(hold())
        self._held = stack

    def _let_go(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()
