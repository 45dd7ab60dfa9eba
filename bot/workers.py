"""The parent's handle on one sandboxed worker: requests with timeouts and a memory watchdog.

Every way a worker can fail (crash, hang, memory, exit without a result, a forged frame)
becomes a `WorkerFailure` with a reason a person can act on.
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from bot.cores import timing_core, worker_cores
from bot.channel import Channel, ChannelClosed, ChannelError, ChannelTampered
from bot.sandbox.base import Limits, RunningWorker, Sandbox, WorkerLaunch

log = logging.getLogger(__name__)
POLL_S = 0.1


class WorkerFailure(Exception):
    """The contender failed in `phase` ("start", "import", "construct", "call", "problem", ...)."""

    def __init__(self, phase: str, reason: str, log_tail: str = ""):
        super().__init__(f"{phase}: {reason}")
        self.phase = phase
        self.reason = reason
        self.log_tail = log_tail


class WorkerClient:
    def __init__(self, sandbox: Sandbox, label: str, device: str, workdir: Path, cache_dir: Path,
                 readable: tuple[Path, ...], limits: Limits, gpu_index: int | None = None,
                 threads: int | None = None, describe: bool = True):
        self.label = label
        self.device = device
        self.gpu_index = gpu_index
        self.limits = limits
        self.workdir = workdir
        launch = WorkerLaunch(workdir=workdir, cache_dir=cache_dir, readable=readable,
                              device=device, limits=limits, gpu_index=gpu_index)
        began = time.monotonic()
        self.running: RunningWorker = sandbox.start(launch)
        spawned = time.monotonic()
        self.channel = Channel(self.running.sock)
        key = secrets.token_bytes(32)
        try:
            # Only one worker per run needs to describe the machine (the reference's is the
            # one reported); the others skip nvidia-smi, a subprocess each at start-up.
            self.channel.send({"op": "hello", "key": key.hex(), "device": device,
                               "threads": threads, "describe": describe})
        except OSError as exc:
            self.close()
            raise WorkerFailure("start", f"could not reach the worker: {exc}") from None
        self.channel.key = key
        hello = self._receive("start", limits.import_timeout_s)
        # Where start-up goes, for the progress line: the process (or fork) itself, then the
        # worker's own set-up up to its hello (its CUDA context and timer calibration).
        self.start_seconds = {"process": spawned - began, "hello": time.monotonic() - spawned}
        self.env: dict[str, Any] = hello["env"]
        self.overhead_us: float = float(hello.get("overhead_us", 0.0))
        self.start_threads: int | None = hello.get("threads")  # before the candidate's import

    def request(self, message: dict[str, Any], timeout_s: float, phase: str,
                gate: Callable[[str], str] | None = None) -> dict[str, Any]:
        """Send one op and wait for its reply; failures raise WorkerFailure. With `gate`, the
        worker may ask for the GPU on the way (bot.tuning_gate): `gate` turns what it said
        into the answer, and the time that took does not count against `timeout_s`."""
        try:
            self.channel.send(message)
        except OSError:
            raise self._dead(phase) from None
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(phase, deadline - time.monotonic(), timeout_s)
            if "gate" not in reply:
                break
            if gate is None:
                tail = self.running.log_tail()
                self.close()
                raise WorkerFailure("channel", f"asked for the GPU ({reply['gate']!r}) outside a gated "
                                    "trial", tail)
            began = time.monotonic()
            answer = gate(str(reply["gate"]))
            deadline += time.monotonic() - began
            try:
                self.channel.send({"gate": answer})
            except OSError:
                raise self._dead(phase) from None
        if not reply.get("ok"):
            detail = reply.get("traceback") or ""
            raise WorkerFailure(str(reply.get("phase", phase)), str(reply.get("error", "failed")),
                                _tail(detail + "\n" + self.running.log_tail()))
        if "new_threads" in reply:
            reply["new_threads"] = self._threads_seen_from_outside(reply["new_threads"])
        return reply

    def _threads_seen_from_outside(self, reported: list[str]) -> list[str]:
        """What the worker reported as new threads, or, where it reported none, the threads the
        kernel counts beyond those it had before the candidate's import: its own listing runs
        in the candidate's process, and a candidate could rebind it to hide a thread."""
        seen = self.running.thread_count()
        if reported or seen is None or self.start_threads is None or seen <= self.start_threads:
            return reported
        return [f"{seen - self.start_threads} thread(s) more than at start ({seen} now) in the kernel's "
                "count, which the worker's own listing did not report"]

    def _receive(self, phase: str, timeout_s: float, allowed_s: float | None = None) -> dict[str, Any]:
        """The next frame, within `timeout_s`; `allowed_s`: the whole request's limit, as said
        in a timeout's reason."""
        deadline = time.monotonic() + timeout_s
        limit = self.limits.memory_mb << 20
        while True:
            ready, _, _ = select.select([self.running.sock], [], [], POLL_S)
            if ready:
                break
            used = self.running.memory_bytes()
            if used is not None and used > limit:
                self.close()
                raise WorkerFailure(phase, f"killed: resident memory {used >> 20} MiB exceeded the "
                                    f"limit of {self.limits.memory_mb} MiB")
            if self.running.exit_code() is not None:
                break  # let recv see the closed channel (there may be a last frame)
            if time.monotonic() > deadline:
                tail = self.running.log_tail()
                self.close()
                raise WorkerFailure(phase, f"timed out after {allowed_s or timeout_s:.0f} s (killed)", tail)
        try:
            self.running.sock.settimeout(max(deadline - time.monotonic(), 5.0))
            return self.channel.recv()
        except ChannelTampered as exc:
            tail = self.running.log_tail()
            self.close()
            raise WorkerFailure("channel", f"result channel tampered with: {exc}", tail) from None
        except (ChannelClosed, ChannelError, OSError):
            raise self._dead(phase) from None

    def _dead(self, phase: str) -> WorkerFailure:
        for _ in range(50):  # the exit status may lag the closed socket by a moment
            if self.running.exit_code() is not None:
                break
            time.sleep(0.02)
        reason = self.running.exit_reason()
        tail = self.running.log_tail()
        self.close()
        return WorkerFailure(phase, f"worker {reason} without a result", tail)

    def pin(self, timed: bool) -> None:
        """Move the worker's launching thread onto the reserved timing core, or back off it.

        Every contender is timed from the same, otherwise idle core (`bot.cores`), so a
        difference between processes is not a difference between cores or neighbours."""
        pid = getattr(self.running, "pid", None)
        core = timing_core(self.gpu_index)
        if pid is None or core is None or self.device != "cuda":
            return  # on CPU the kernel's own threads share the cores: pinning would starve them
        try:
            os.sched_setaffinity(pid, {core} if timed else worker_cores())
        except OSError:
            pass

    def close(self) -> None:
        try:
            if self.running.exit_code() is None:
                self.channel.send({"op": "exit"})
        except (OSError, ValueError):
            pass
        self.running.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _tail(text: str, limit: int = 3000) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
