"""The process backend: each worker is its own `python -I` process in its own session.

This is the minimum isolation (separate address space, environment allowlist, private
working directory, memory cap, timeouts enforced by the parent). On CI runners use the
docker backend, which adds no network, a read-only filesystem and a pids limit.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
from pathlib import Path

from bot.cores import worker_cores
from bot.sandbox.base import BOOT, BOT_ROOT, RunningWorker, Sandbox, WorkerLaunch, worker_env


class ProcessWorker(RunningWorker):
    def __init__(self, proc: subprocess.Popen, sock: socket.socket, log_path: Path):
        self.proc = proc
        self.pid = proc.pid
        self.sock = sock
        self.log_path = log_path
        self._killed = False

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def memory_bytes(self) -> int | None:
        """Resident memory of the worker and everything in its process group."""
        total = 0
        for pid in _group_pids(self.proc.pid):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except (OSError, ValueError):
                continue
        return total or None

    def kill(self) -> None:
        if not self._killed:
            self._killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def _limit_memory(memory_mb: int, device: str):
    def apply() -> None:
        # An address-space cap turns a huge allocation into a MemoryError at once. CUDA
        # reserves terabytes of virtual address space, so on GPUs only the parent's
        # resident-memory watchdog applies.
        if device == "cpu":
            cap = (memory_mb + 4096) << 20  # + room for the interpreter, torch and its threads
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if device == "cuda":
            os.sched_setaffinity(0, worker_cores())  # keep off the reserved timing core
    return apply


class ProcessSandbox(Sandbox):
    name = "process"

    def start(self, launch: WorkerLaunch) -> ProcessWorker:
        launch.workdir.mkdir(parents=True, exist_ok=True)
        launch.cache_dir.mkdir(parents=True, exist_ok=True)
        parent_sock, child_sock = socket.socketpair()
        log_path = launch.workdir / "worker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [launch.python, "-I", "-c", BOOT, str(BOT_ROOT), "--channel",
                 f"fd:{child_sock.fileno()}"],
                cwd=launch.workdir, env=worker_env(launch), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, pass_fds=(child_sock.fileno(),),
                start_new_session=True,
                preexec_fn=_limit_memory(launch.limits.memory_mb, launch.device))
        child_sock.close()
        return ProcessWorker(proc, parent_sock, log_path)
