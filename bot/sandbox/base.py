"""What every sandbox backend provides: start a worker, hand back a private channel."""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bot.core.settings import Device

BOT_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the `bot` package

# The worker is started with `python -I -c BOOT`: no PYTHON* variables, no user site,
# no current directory on sys.path, so a stray `torch.py` cannot shadow the real one.
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from bot.harness.worker import main; main(sys.argv[2:])"

# Variables a worker may inherit. Anything that looks like a credential is dropped even if
# a pattern below would admit it.
_ALLOWED = re.compile(
    r"^(PATH|LANG|LC_[A-Z]+|TZ|CUDA_VISIBLE_DEVICES|CUDA_HOME|CUDA_PATH|CUDA_DEVICE_ORDER|"
    r"LD_LIBRARY_PATH|NVIDIA_[A-Z_]+|TRITON_[A-Z_]+|TORCHINDUCTOR_[A-Z_]+|TORCH_CUDA_ARCH_LIST|"
    r"OMP_NUM_THREADS|MKL_NUM_THREADS|OPENBLAS_[A-Z_]+|CC|CXX|NCCL_NVLS_ENABLE|"
    r"TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)$"
)
_SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|_KEY$|^KEY|AUTH)", re.I)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one worker. Import is generous: CUDA extensions compile there."""

    memory_mb: int = 16384
    import_timeout_s: float = 600.0
    construct_timeout_s: float = 120.0
    call_timeout_s: float = 60.0
    first_call_timeout_s: float = 900.0  # torch.compile / Triton autotuning happen at the first call
    # Processes and threads of one worker and everything it starts (a CPU worker runs about
    # ten, a GPU one a torch thread per core it may use): a fork storm stops here. The docker
    # backend's pids limit and, where the bot is root, the process backend's pids.max.
    pids: int = field(default_factory=lambda: max(256, 2 * (os.cpu_count() or 1) + 64))
    cpus: float | None = None
    # A request whose worker's whole tree used under `stall_cpu_s` of CPU in this long is
    # stopped: it sleeps, deadlocks or waits (a compile keeps the CPU busy, and runs on).
    stall_timeout_s: float = 60.0
    stall_cpu_s: float = 0.5


@dataclass(frozen=True)
class WorkerLaunch:
    """How to start one worker; the sandbox decides where and how it is confined."""

    workdir: Path  # private, writable; deleted by the caller afterwards
    cache_dir: Path  # compile caches (triton, inductor, torch extensions) for this source
    readable: tuple[Path, ...]  # files or folders the worker must read (problem, candidate)
    device: str  # "cpu" | "cuda"
    limits: Limits = field(default_factory=Limits)
    gpu_index: int | None = None
    python: str = sys.executable


def worker_env(launch: WorkerLaunch, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's whole environment: an allowlist, no credentials, private caches."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if _ALLOWED.match(k) and not _SECRET.search(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    cache = str(launch.cache_dir)
    env.update(
        {
            "HOME": str(launch.workdir),
            "TMPDIR": str(launch.workdir),
            # A worker's own uid has no passwd entry: getpass.getuser() (Inductor's cache folder
            # name; torch 2.11's raises KeyError without it) reads these first.
            "USER": "kernel-bot-worker",
            "LOGNAME": "kernel-bot-worker",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TRITON_CACHE_DIR": f"{cache}/triton",
            "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
            "TORCH_EXTENSIONS_DIR": f"{cache}/torch_extensions",
            # Inductor's compile pool would start threads and processes that the thread check
            # would (rightly) flag; one compile thread keeps torch.compile candidates honest.
            "TORCHINDUCTOR_COMPILE_THREADS": "1",
            # Inductor precompiles its C++ kernels' common header into a folder of each worker's
            # own (bot.sandbox.fork_server, _repoint_compiler_headers), so every worker that
            # compiled built it again, and one that found its kernels in the compile cache still
            # preprocessed and built it: on 2 vCPUs a cold compile took 16 s with it and 10 s
            # without; a cached one 7.1 s and 1.6 s. The kernels compiled are the same.
            "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0",
        }
    )
    if launch.device == Device.CPU:
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run on CPU tensors through the interpreter
        env.pop("CUDA_VISIBLE_DEVICES", None)
    elif launch.gpu_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(launch.gpu_index)
    return env


def alive(pid: int) -> bool:
    """Whether a process of that id exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def proc_status(pid: int, field: str) -> int | None:
    """A number from the kernel's /proc/<pid>/status (e.g. "Threads", "VmRSS" in kB), or None
    where the process is gone or the field absent."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime (+ its waited-for children's) of one process, from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


_FREEZING = threading.RLock()  # freeze and thaw of any worker, one at a time


class RunningWorker(ABC):
    """A started worker: the parent's end of the channel, and control over its life."""

    sock: socket.socket
    log_path: Path
    pid: int | None = None  # the worker's main thread as the bot sees it (for CPU pinning)
    containment: str = ""  # what keeps it and its children in (e.g. "cgroup+pids+pidns+netns+mntns+uid")
    _frozen_since: float | None = None
    _frozen_total_s: float = 0.0

    @abstractmethod
    def exit_code(self) -> int | None:
        """None while running."""

    @abstractmethod
    def memory_bytes(self) -> int | None:
        """Resident memory, when the backend can read it (for the parent's watchdog)."""

    @abstractmethod
    def kill(self) -> None:
        """Stop it for good and release everything it holds (idempotent)."""

    def peak_memory_bytes(self) -> int | None:
        """The worker's own process's peak resident memory (VmHWM), read from outside it."""
        peak = None if self.pid is None else proc_status(self.pid, "VmHWM")
        return None if peak is None else peak * 1024

    def set_memory_limit(self, nbytes: int) -> None:
        """Raise or lower the kernel's limit on the worker where the backend has one it can
        change from outside; the parent's resident-memory watchdog applies in any case."""

    def thread_count(self) -> int | None:
        """Threads of the worker's process as the kernel counts them, read from outside it
        (a candidate can rebind the harness's own thread listing, not this), when the pid is
        this process's to read."""
        return None if self.pid is None else proc_status(self.pid, "Threads")

    def processes(self) -> list[int] | None:
        """Every process of the worker's unit as the kernel lists it (the worker's own
        included), where the backend can tell; None where it cannot."""
        return None

    def limits_hit(self) -> list[str]:
        """Limits the kernel enforced on the worker's unit (a fork refused at its process
        limit), in words, read from outside; empty where none was hit or none can be read."""
        return []

    def cpu_seconds(self) -> float | None:
        """CPU time used by the worker's unit so far (its own process at least)."""
        return None if self.pid is None else proc_cpu_seconds(self.pid)

    def freeze(self) -> None:
        """Stop everything of the worker from running (idempotent, cheap when frozen)."""
        with _FREEZING:
            if self._frozen_since is None:
                self._set_frozen(True)
                self._frozen_since = time.monotonic()

    def thaw(self) -> None:
        # Under one lock with freeze: a request's own thaw (bot.engine.workers.client) and the end of
        # another GPU lane's timing phase (freezer.thaw_all) can meet on one worker.
        with _FREEZING:
            if self._frozen_since is not None:
                self._set_frozen(False)
                self._frozen_total_s += time.monotonic() - self._frozen_since
                self._frozen_since = None

    @property
    def frozen(self) -> bool:
        return self._frozen_since is not None

    def frozen_seconds(self) -> float:
        """How long it has been frozen in all (it ran none of that time)."""
        now = time.monotonic()
        return self._frozen_total_s + (0.0 if self._frozen_since is None else now - self._frozen_since)

    def _set_frozen(self, frozen: bool) -> None:
        """Freeze or thaw the whole unit and return once it is so."""

    def exit_reason(self) -> str:
        """Why it ended, in words (backends add e.g. 'killed by the memory limit')."""
        code = self.exit_code()
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by signal {-code}"
        return f"exited with code {code}"

    def log_tail(self, limit: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")


class Sandbox(ABC):
    name: str

    @abstractmethod
    def start(self, launch: WorkerLaunch) -> RunningWorker:
        """Start `python -I -c BOOT` confined by this backend, connected to a private channel."""
