"""The GPU lock across processes: a timing that waits is not held off by verification in
another process that keeps taking the shared lock (flock alone would let it starve)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from bot.gpulock import gpu_exclusive

KEY = f"test-starve-{time.time_ns()}"

# Two threads in another process take the shared lock in overlapping turns for `seconds`:
# at every moment one of them holds it.
READERS = textwrap.dedent("""
    import sys, threading, time
    from bot.gpulock import gpu_shared, _lock_file
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
