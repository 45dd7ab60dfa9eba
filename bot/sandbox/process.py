"""The process backend: each worker is its own `python -I` process in its own session.

This is the minimum isolation (separate address space, environment allowlist, private
working directory, memory cap, timeouts enforced by the parent). On CI runners use the
docker backend, which adds no network, a read-only filesystem and a pids limit.

Workers are forked from the run's fork server (bot.sandbox.fork_server), which has imported
torch once, or started as fresh processes where it is off or fails: the same confinement.
"""

from __future__ import annotations

import atexit
import logging
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from abc import abstractmethod
from pathlib import Path

from bot.core.settings import Device
from bot.sandbox.base import BOOT, BOT_ROOT, RunningWorker, Sandbox, WorkerLaunch, proc_status, worker_env
from bot.sandbox.cgroup import Leaf, PidsCap
from bot.sandbox.contained import containment, prepare, refuse_uncontained
from bot.sandbox.cores import worker_cores
from bot.sandbox.fork_client import DriverInitialized, ForkServer, ForkServerError, ForkSettings
from bot.sandbox.isolate import AS_ROOM_MB, confine

log = logging.getLogger(__name__)


class _GroupWorker(RunningWorker):
    """A worker leading its own process group, however it was started; with a cgroup leaf,
    everything it starts is counted, frozen and killed through that leaf."""

    def __init__(self, launched: int, sock: socket.socket, log_path: Path, leaf: Leaf | None, containment: str):
        self.launched, self.sock, self.log_path, self.leaf = launched, sock, log_path, leaf
        self.containment = containment
        self.pids_cap: PidsCap | None = None  # set by the backend where the kernel limits its processes
        self._main: int | None = None if leaf is not None else launched
        self._killed = False

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        """The worker's own process: in a PID namespace, the keeper's child."""
        if self._main is None and self.leaf is not None:
            for pid in self.leaf.pids():
                if _parent_of(pid) == self.launched or pid == self.launched:
                    self._main = pid
                    break
        return self._main

    def memory_bytes(self) -> int | None:
        if self.leaf is not None:
            pids = self.leaf.pids()
            total = sum((proc_status(p, "VmRSS") or 0) * 1024 for p in pids)
            if len(pids) > 1 and total > SHARED_PAGES_CHECKED_ABOVE:
                # Forks share their parent's pages, which each one's resident size counts again:
                # 300 forks of a worker summed to 4.9 GiB. Proportional sizes add up to what
                # the tree really holds (10 ms a read for a torch process, so only here).
                total = sum(_proportional_bytes(p) or (proc_status(p, "VmRSS") or 0) * 1024 for p in pids)
            return total or None
        return _group_memory(self.launched)

    def limits_hit(self) -> list[str]:
        if self.pids_cap is None:
            return []
        refused = self.pids_cap.refused()
        if not refused:
            return []
        return [f"the process limit ({self.pids_cap.limit} processes and threads) refused {refused} fork(s)"]

    def thread_count(self) -> int | None:
        return self.leaf.thread_count() if self.leaf is not None else super().thread_count()

    def set_memory_limit(self, nbytes: int) -> None:
        """A CPU worker's address-space cap, moved from outside (prlimit); raising it needs
        CAP_SYS_RESOURCE, so a bot that is not root keeps the cap the worker started with."""
        pid = self.pid
        if pid is None:
            return
        cap = nbytes + (AS_ROOM_MB << 20)
        try:
            if resource.prlimit(pid, resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
                return  # a GPU worker: CUDA reserves terabytes of address space; the watchdog applies
            resource.prlimit(pid, resource.RLIMIT_AS, (cap, cap))
        except (OSError, ValueError) as exc:
            log.info("worker %d keeps its address-space cap: %s", pid, exc)

    def processes(self) -> list[int] | None:
        return self.leaf.pids() if self.leaf is not None else None

    def cpu_seconds(self) -> float | None:
        if self.leaf is not None:
            return self.leaf.cpu_seconds()
        return super().cpu_seconds()

    def _set_frozen(self, frozen: bool) -> None:
        if self.leaf is not None:
            self.leaf.set_frozen(frozen)
            return
        try:  # no cgroup: the process group, which a `setsid` child has left
            os.killpg(self.launched, signal.SIGSTOP if frozen else signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        if not self._killed:
            self._killed = True
            if self.leaf is not None:
                self.leaf.kill()
            if self.pids_cap is not None and self.leaf is not None and self.pids_cap.path != self.leaf.path:
                self.pids_cap.remove()
            try:
                os.killpg(self.launched, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._await_exit(10.0)
        try:
            self.sock.close()
        except OSError:
            pass

    @abstractmethod
    def _await_exit(self, timeout_s: float) -> None:
        """Until the killed worker's exit is known, or `timeout_s`."""


SHARED_PAGES_CHECKED_ABOVE = 1 << 30


def _proportional_bytes(pid: int) -> int | None:
    """A process's proportional set size (each shared page divided among its sharers)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class ProcessWorker(_GroupWorker):
    """A worker started as a fresh process: the bot is its parent."""

    def __init__(
        self,
        proc: subprocess.Popen,
        sock: socket.socket,
        log_path: Path,
        leaf: Leaf | None = None,
        containment: str = "",
    ):
        super().__init__(proc.pid, sock, log_path, leaf, containment)
        self.proc = proc

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def _await_exit(self, timeout_s: float) -> None:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass


def _group_memory(pgid: int) -> int | None:
    """Resident memory of the worker and everything in its process group."""
    total = sum((proc_status(pid, "VmRSS") or 0) * 1024 for pid in _group_pids(pgid))
    return total or None


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


class ProcessSandbox(Sandbox):
    name = "process"

    def __init__(self, start_fork_server: bool = True, allow_uncontained: bool = False):
        # A server already running serves everyone; starting one (a torch import of its own,
        # before the first fork) pays only where several workers start: a `bot verify`'s
        # two start sooner side by side (on 2 vCPUs the command took 4.7 s without a server,
        # 5.4 s with one: medians of four, interleaved).
        self.start_fork_server = start_fork_server
        refuse_uncontained(containment(), allow_uncontained)

    def start(self, launch: WorkerLaunch) -> RunningWorker:
        launch.workdir.mkdir(parents=True, exist_ok=True)
        launch.cache_dir.mkdir(parents=True, exist_ok=True)
        parent_sock, child_sock = socket.socketpair()
        log_path = launch.workdir / "worker.log"
        log_path.touch()
        prepared = prepare(launch, log_path)
        plan, leaf = prepared.plan, prepared.leaf
        cores = worker_cores() if launch.device == Device.CUDA else set()
        env = worker_env(launch)
        server = fork_server_for(launch, start=self.start_fork_server)
        try:
            if server is not None:
                try:
                    settings = ForkSettings(
                        log=log_path,
                        cwd=launch.workdir,
                        env=env,
                        memory_mb=launch.limits.memory_mb,
                        device=launch.device,
                        cores=frozenset(cores),
                        containment=plan.as_dict(),
                    )
                    pid = server.spawn(child_sock, settings)
                    forked = ForkedWorker(server, pid, parent_sock, log_path, leaf, containment().description)
                    forked.pids_cap = prepared.pids
                    return forked
                except ForkServerError as exc:
                    _give_up_on(server, exc)
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [launch.python, "-I", "-c", BOOT, str(BOT_ROOT), "--channel", f"fd:{child_sock.fileno()}"],
                    cwd=launch.workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(child_sock.fileno(),),
                    start_new_session=True,
                    preexec_fn=lambda: confine(launch.limits.memory_mb, launch.device, cores, plan),
                )
            worker = ProcessWorker(proc, parent_sock, log_path, leaf, containment().description)
            worker.pids_cap = prepared.pids
            return worker
        finally:
            child_sock.close()


class ForkedWorker(_GroupWorker):
    """A worker forked by the fork server: the server, its parent, reports its exit."""

    def __init__(
        self,
        server: ForkServer,
        pid: int,
        sock: socket.socket,
        log_path: Path,
        leaf: Leaf | None = None,
        containment: str = "",
    ):
        super().__init__(pid, sock, log_path, leaf, containment)
        self.server = server

    def exit_code(self) -> int | None:
        return self.server.exit_code(self.launched)

    def _await_exit(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.exit_code() is None and time.monotonic() < deadline:
            time.sleep(0.01)


# One server per interpreter and device for the whole run (a worker's environment differs
# between CPU and CUDA before torch is imported), shut down when the bot exits.
_servers: dict[tuple[str, str], ForkServer | None] = {}
_servers_lock = threading.Lock()


def fork_server_for(launch: WorkerLaunch, start: bool = True) -> ForkServer | None:
    """The run's server for this kind of worker, started on first use where `start`; None
    where there is none, it is switched off (KERNEL_BOT_FORK_SERVER=0) or it could not start
    (workers then start plainly)."""
    if os.environ.get("KERNEL_BOT_FORK_SERVER", "1") == "0":
        return None
    key = (launch.python, launch.device)
    with _servers_lock:
        if key not in _servers and start:
            try:
                generic = WorkerLaunch(
                    workdir=launch.workdir,
                    cache_dir=launch.cache_dir,
                    readable=(),
                    device=launch.device,
                    python=launch.python,
                )
                _servers[key] = _start_server(launch.python, worker_env(generic), launch.device)
            except (ForkServerError, OSError) as exc:
                log.warning("workers start without the fork server: %s", exc)
                _servers[key] = None
        return _servers.get(key)


def _start_server(python: str, env: dict[str, str], device: str = "cpu") -> ForkServer:
    """A server with torch.compile's machinery imported, or without it where that import
    initialised the CUDA driver (no fork could then use the GPU); for CPU workers, with the
    vector instruction sets of Inductor's C++ kernels checked once for all of them."""
    try:
        return ForkServer(python, env, vector_isa=device == Device.CPU)
    except DriverInitialized as exc:
        log.warning("%s; the fork server starts again without torch.compile's imports", exc)
        return ForkServer(python, env, compiler=False)


def _give_up_on(server: ForkServer, exc: Exception) -> None:
    log.warning("the fork server failed, workers start without it: %s", exc)
    with _servers_lock:
        for key, held in list(_servers.items()):
            if held is server:
                _servers[key] = None
    server.close()


@atexit.register
def _close_servers() -> None:
    with _servers_lock:
        for server in _servers.values():
            if server is not None:
                server.close()
        _servers.clear()
