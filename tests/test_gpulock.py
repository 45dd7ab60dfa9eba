"""The GPU lock: a timing that waits is not held off by verification in another process that
keeps taking the shared lock (flock alone would let it starve), nor by other timings of its
own process that asked after it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from bot.engine.workers import gpulock
from bot.engine.workers.gpulock import LockError, _lock_for, gpu_exclusive, gpu_shared

KEY = f"test-starve-{time.time_ns()}"

# Two threads in another process take the shared lock in overlapping turns for `seconds`:
# at every moment one of them holds it.
READERS = textwrap.dedent("""
    import sys, threading, time
    from bot.engine.workers.gpulock import gpu_shared, _lock_file
    key, seconds = sys.argv[1], float(sys.argv[2])
    end = time.monotonic() + seconds
    def reader(offset):
        time.sleep(offset)
        while time.monotonic() < end:
            with gpu_shared(key):
                time.sleep(0.2)
    threads = [threading.Thread(target=reader, args=(o,)) for o in (0.0, 0.1)]
    [t.start() for t in threads]
    print("ready", flush=True)
    [t.join() for t in threads]
""")


def _other_process(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", READERS, KEY, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # both readers are taking turns by now
    return proc


def test_a_waiting_timing_gets_the_gpu_while_another_process_keeps_verifying():
    # The readers' own in-process lock prefers writers only within their process; ours is
    # another process, so only the lock files can let us in.
    readers = _other_process(seconds=5.0)
    try:
        started = time.monotonic()
        with gpu_exclusive(KEY):
            waited = time.monotonic() - started
        assert waited < 2.0, f"the timing waited {waited:.1f} s behind overlapping readers"
    finally:
        readers.wait(timeout=30)


def test_timings_in_one_process_take_turns_in_the_order_they_asked():
    # A lane that times shape after shape asks again the moment it lets go; a timing that was
    # already waiting goes first all the same.
    key = f"test-fifo-{time.time_ns()}"
    order: list[str] = []
    first_held = threading.Event()

    def busy_lane():
        for turn in range(4):
            with gpu_exclusive(key):
                order.append(f"busy{turn}")
                first_held.set()
                time.sleep(0.05)

    def waiting_lane():
        with gpu_exclusive(key):
            order.append("waiting")

    busy = threading.Thread(target=busy_lane)
    busy.start()
    first_held.wait(5)
    waiting = threading.Thread(target=waiting_lane)
    waiting.start()
    time.sleep(0.02)  # the waiting lane has asked while busy0 holds the lock
    busy.join(10)
    waiting.join(10)
    assert order == ["busy0", "waiting", "busy1", "busy2", "busy3"]


def test_each_hold_tells_how_long_it_waited_for_the_device():
    # Where a problem's time goes (bot.core.time_split): a timing that waits behind a trial's
    # shared hold says so, and a hold on a free lock waited for nothing.
    key = f"test-waited-{time.time_ns()}"
    waits: list[tuple[str, float]] = []
    held = threading.Event()

    def trial():
        with gpu_shared(key, lambda began, got: waits.append(("shared", got - began))):
            held.set()
            time.sleep(0.3)

    reader = threading.Thread(target=trial)
    reader.start()
    held.wait(5)
    with gpu_exclusive(key, lambda began, got: waits.append(("exclusive", got - began))):
        pass
    reader.join(5)
    assert [kind for kind, _ in waits] == ["shared", "exclusive"]
    assert waits[0][1] < 0.1 and 0.2 < waits[1][1] < 5.0, waits


def test_a_timing_interrupted_while_waiting_leaves_the_queue():
    key = f"test-leave-{time.time_ns()}"
    with gpu_shared(key):
        waiting = threading.Thread(target=lambda: _give_up_waiting(_lock_for(key)))
        waiting.start()
        waiting.join(5)
    got = threading.Event()

    def timing():
        with gpu_exclusive(key):  # would wait forever behind the one that left
            got.set()

    threading.Thread(target=timing, daemon=True).start()
    assert got.wait(3), "a timing waits behind one that gave up waiting"


def _give_up_waiting(lock):
    cond_wait = lock._cond.wait

    def interrupted(*args):
        raise KeyboardInterrupt

    lock._cond.wait = interrupted
    try:
        with lock.exclusive():
            raise AssertionError("got the lock while a reader held it")
    except KeyboardInterrupt:
        pass
    finally:
        lock._cond.wait = cond_wait


# The lock files: in a folder only the bot's user owns, never through a link, never an endless
# wait (docs/security.md, "Reaching the host": a candidate planted them in the temp folder).


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A lock folder of this test's own (the bot's is shared with other runs on the machine)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "kernel-bot"


def test_lock_files_are_the_bots_own_in_a_folder_closed_to_everyone_else(folder):
    with gpu_exclusive(f"own-{time.time_ns()}"):
        pass
    info = folder.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.geteuid()
    files = list(folder.iterdir())
    assert len(files) == 2 and all(f.is_file() and stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


def test_a_lock_folder_left_open_is_closed_again(folder):
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    with gpu_shared(f"open-{time.time_ns()}"):
        pass
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_link_planted_as_a_lock_file_is_refused_and_nothing_is_made_where_it_points(folder, tmp_path):
    key = f"planted-{time.time_ns()}"
    folder.mkdir(mode=0o700)
    target = tmp_path / "where-the-link-points"
    (folder / f"{key}.intent.lock").symlink_to(target)
    with pytest.raises(LockError, match="link"):
        with gpu_exclusive(key):
            raise AssertionError("took a lock through a planted link")
    assert not target.exists()


def test_a_lock_folder_that_is_a_link_or_not_ours_is_refused(folder, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    folder.symlink_to(elsewhere)
    with pytest.raises(LockError, match="not a folder of the bot's own"):
        with gpu_shared(f"linked-{time.time_ns()}"):
            pass
    assert list(elsewhere.iterdir()) == []
    if os.geteuid() == 0:  # only root can give a folder away
        folder.unlink()
        folder.mkdir(mode=0o700)
        os.chown(folder, 12345, 12345)
        with pytest.raises(LockError, match="belongs to uid 12345"):
            with gpu_shared(f"theirs-{time.time_ns()}"):
                pass


def test_a_lock_file_held_too_long_is_an_error_that_names_its_holder(folder, monkeypatch):
    key = f"held-{time.time_ns()}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder / f"{key}.intent.lock")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(gpulock, "LOCK_WAIT_S", 0.5)
        began = time.monotonic()
        with pytest.raises(LockError, match=f"held by process\\(es\\) {holder.pid}"):
            with gpu_exclusive(key):
                raise AssertionError("took a lock another process holds")
        assert time.monotonic() - began < 5
    finally:
        holder.kill()
        holder.wait()


# A process holding a shared lock on a file, as a planted one was held.
HOLDER = textwrap.dedent("""
    import fcntl, os, sys, time
    os.makedirs(os.path.dirname(sys.argv[1]), mode=0o700, exist_ok=True)
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    print("held", flush=True)
    time.sleep(60)
""")
