"""The GPU lock: a timing that waits is not held off by verification in another process that
keeps taking the shared lock (flock alone would let it starve), nor by other timings of its
own process that asked after it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from bot.engine.gpulock import _lock_for, gpu_exclusive, gpu_shared

KEY = f"test-starve-{time.time_ns()}"

# Two threads in another process take the shared lock in overlapping turns for `seconds`:
# at every moment one of them holds it.
READERS = textwrap.dedent("""
    import sys, threading, time
    from bot.engine.gpulock import gpu_shared, _lock_file
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
