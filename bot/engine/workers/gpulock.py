"""Exclusive GPU timing while everything else overlaps.

Verification trials (which also compile lazily at the first call) hold the lock shared;
timing holds it exclusively, so no other trial of this bot touches the GPU while a
measurement runs. Writers are preferred: once a timing waits, new trials wait behind it.
Timings go in the order they asked: otherwise a problem verified early can wait while
later ones are timed, until a sweep's time limit comes first.
Within one process this is a readers-writer lock; across processes of the bot (e.g. two
`bot optimize` runs on one runner) an fcntl lock file per GPU does the same.

The lock files live in a folder only the bot's user owns (`lock_folder`: 0700, checked, never
a link) and are opened relative to it without following links, checked to be the bot's own
regular files: a name planted there (a link to where root would create a file, a file someone
else holds a lock on) is refused, not used. A lock file held past `LOCK_WAIT_S` is an error
that names its holders, never an endless wait.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import itertools
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bot.core.errors import BotError
from bot.core.settings import Device
from bot.core.time_split import Waited, no_record

# The longest a lock file is waited for. Another bot process holds it for one measurement
# (shared: one verification call, up to the 900 s of a first call's compile), so twice that
# is a holder that is stuck, or not the bot.
LOCK_WAIT_S = 1800.0
LOCK_POLL_S = 0.02


class LockError(BotError):
    """The bot's lock folder or a lock file in it is not the bot's own, or was held too long."""


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


def lock_folder() -> Path:
    """Where the bot's lock files are: the user's runtime folder ($XDG_RUNTIME_DIR, which only
    the user may enter) or else a folder of the user's id in the temp folder, as tmux keeps
    its sockets; shared by every bot process of this user on this machine."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "kernel-bot"
    return Path(tempfile.gettempdir()) / f"kernel-bot-{os.geteuid()}"


def _lock_file(key: str, part: str = "") -> Path:
    return lock_folder() / f"{key}{part}.lock"


def _open_folder(folder: Path) -> int:
    """The lock folder, made if missing, opened without following a link, and checked to be
    this user's own and closed to everyone else."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LockError(f"cannot make the lock folder {folder}: {exc}") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise LockError(f"the lock folder {folder} is not a folder of the bot's own (a link?): {exc}") from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise LockError(f"the lock folder {folder} belongs to uid {info.st_uid}, not the bot's {os.geteuid()}")
    if info.st_mode & 0o077:
        os.fchmod(fd, 0o700)  # ours, left open by hand: closed again; files in it are checked one by one
    return fd


def _open_lock(path: Path) -> int:
    """`path` in the checked lock folder: created 0600 or opened, never through a link (nor as
    a terminal, FIFO or device), and only if it is this user's own regular file."""
    folder = _open_folder(path.parent)
    try:
        fd = os.open(
            path.name,
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC,
            0o600,
            dir_fd=folder,
        )
    except OSError as exc:
        raise LockError(f"cannot open the lock file {path} (a link planted there?): {exc}") from None
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        os.close(fd)
        raise LockError(
            f"the lock file {path} is not the bot's own regular file (uid {info.st_uid}, "
            f"mode {stat.filemode(info.st_mode)}, {info.st_nlink} link(s))"
        )
    return fd


def _holders(fd: int) -> str:
    """Processes holding a lock on the file behind `fd`, from /proc/locks."""
    info = os.fstat(fd)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return "unknown processes"
    pids = sorted({f.split()[4] for f in lines if len(f.split()) > 5 and f.split()[5] == inode})
    return "process(es) " + ", ".join(pids) if pids else "unknown processes"


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = _open_lock(path)
    began = time.monotonic()
    try:
        for attempt in itertools.count():
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - began > LOCK_WAIT_S:
                    raise LockError(
                        f"waited {LOCK_WAIT_S:.0f} s for the lock file {path}, held by {_holders(fd)}"
                    ) from None
                # 0.5 ms, doubling up to the poll; the exponent capped, since 2**1100 is no float
                time.sleep(min(LOCK_POLL_S, 0.0005 * 2 ** min(attempt, 30)))
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
def gpu_shared(key: str, waited: Waited = no_record) -> Iterator[None]:
    """Verification work on this GPU (may run alongside other verification)."""
    began = time.monotonic()
    with _lock_for(key).shared(), _file_lock(key, fcntl.LOCK_SH):
        waited(began, time.monotonic())
        yield


@contextlib.contextmanager
def gpu_exclusive(key: str, waited: Waited = no_record) -> Iterator[None]:
    """A measurement on this GPU: nothing else of ours runs on it meanwhile."""
    began = time.monotonic()
    with _lock_for(key).exclusive(), _file_lock(key, fcntl.LOCK_EX):
        waited(began, time.monotonic())
        yield


def device_key(device: str, gpu_index: int | None) -> str:
    if device != Device.CUDA:
        return "cpu"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return f"gpu{gpu_index if gpu_index is not None else (visible.split(',')[0] or 0)}"


class GpuHandover:
    """A gated trial call's hold on the GPU (bot.harness.tuning_gate): shared while the contender
    verifies and compiles; exclusive, as a measurement is, from the moment its worker asks
    to time kernel variants until the call ends. Called with what the worker said, it
    changes hands and returns the answer. `alone_s`: how long it held the GPU to itself, which
    every other trial and timing on the device waited out."""

    def __init__(
        self,
        shared: Callable[[], contextlib.AbstractContextManager],
        exclusive: Callable[[], contextlib.AbstractContextManager],
    ):
        self._shared = shared
        self._exclusive = exclusive
        self._held: contextlib.ExitStack | None = None
        self._granted_at: float | None = None
        self.alone_s = 0.0

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
        self._granted_at = time.monotonic()
        return "granted"

    def _take(self, hold: Callable[[], contextlib.AbstractContextManager]) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(hold())
        self._held = stack

    def _let_go(self) -> None:
        if self._granted_at is not None:
            self.alone_s += time.monotonic() - self._granted_at
            self._granted_at = None
        held, self._held = self._held, None
        if held is not None:
            held.close()
