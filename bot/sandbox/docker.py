"""The docker backend: every worker in a fresh, throw-away container.

Beyond the process backend: no network, a read-only root filesystem (only a size-capped
tmpfs work folder and the compile cache are writable), no capabilities, no privilege gain,
a pids limit (fork bombs) and a kernel-enforced memory limit without swap. The channel is a
unix socket the parent listens on, in a folder holding only that socket. Containers are
labelled with this process's run id and removed on exit, SIGINT/SIGTERM, or by
`remove_leftover_workers` (bot.sandbox.containers).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from pathlib import Path

import docker
import requests
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import DeviceRequest, LogConfig, Mount, Ulimit

from bot.core.errors import BotError, HarnessError
from bot.core.settings import Device
from bot.sandbox import guardian
from bot.sandbox.base import BOOT, BOT_ROOT, RunningWorker, Sandbox, WorkerLaunch, worker_env
from bot.sandbox.container_cgroup import ContainerCgroup
from bot.sandbox.containers import PID_LABEL, RUN_ID, RUN_LABEL, WORKER_LABEL, remove_leftover_workers
from bot.sandbox.local_image import (
    HOST_MOUNTS_LABEL,
    LOCAL_IMAGE,
    PYTHON_LABEL,
    ensure_local_image,
    give_to,
    is_under,
    same_path_mounts,
    world_readable,
)

log = logging.getLogger(__name__)

_OWNER_PID = os.getpid()  # a forked child must not clean up its parent's containers

# Paths inside the container. They avoid common host paths, because the local image
# mounts host folders (interpreter, problem files) at their host paths.
WORK_IN, CACHE_IN, SRC_IN = "/kernel-bot/work", "/kernel-bot/cache", "/kernel-bot/src"
CHAN_IN = "/chan"
NOBODY = (65534, 65534)
WORK_TMPFS_MB = 1024  # the work folder lives in memory and counts against the memory limit
CONNECT_TIMEOUT_S = 120.0  # container start + `import torch` on a cold page cache
STOP_WAIT_S = 10.0  # a killed container's exit, as the engine reports it
LIVE_LOG_SETTLE_S = 1.0  # the longest a live log read waits for the engine's copy to catch up
_FULL_IMAGE_DROPS = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")  # the image's own apply


def connect():
    """A docker client for a running engine, or a BotError that says how to get one."""
    try:
        client = docker.from_env()
        client.ping()
        return client
    except Exception as exc:  # DockerException, connection refused, missing socket, ...
        raise BotError(
            f"the Docker engine is not reachable ({exc}); start it with "
            f"`sudo ci/start-dockerd.sh`, or use --sandbox process"
        ) from None


_started_any = False


def _cleanup() -> None:
    if not _started_any or os.getpid() != _OWNER_PID:
        return
    try:
        remove_leftover_workers(docker.from_env())  # a fresh client: the main one may be mid-call
    except Exception as exc:  # at exit or in a signal handler: report, never raise
        log.warning("could not remove worker containers of run %s: %s", RUN_ID, exc)


def _on_signal(signum, frame, previous) -> None:
    if previous is signal.SIG_IGN:
        return
    _cleanup()
    if callable(previous):
        previous(signum, frame)  # e.g. Python's default SIGINT handler: KeyboardInterrupt
    else:  # SIG_DFL: terminate, but through `finally` blocks and atexit, which remove the
        raise SystemExit(128 + signum)  # containers started while this handler ran


@functools.cache
def _install_cleanup() -> None:
    atexit.register(_cleanup)
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous = signal.getsignal(signum)
            signal.signal(signum, functools.partial(_on_signal, previous=previous))
        except ValueError:  # not the main thread: atexit and the callers' `finally` remain
            log.debug("signal handlers not installed (not in the main thread)")


class DockerWorker(RunningWorker):
    def __init__(self, client, container_id: str, sock: socket.socket, log_path: Path, chan_dir: Path):
        self.client, self.id, self.sock = client, container_id, sock
        self.log_path, self.chan_dir = log_path, chan_dir
        self._state: dict | None = None  # the final state, once it has exited
        self._removed = False
        self.containment = "container"
        self._unit: ContainerCgroup | None = None

    def unit(self) -> ContainerCgroup | None:
        """The container's cgroups as this process sees them (None where the engine's pids
        are another namespace's)."""
        if self._unit is None and self.pid is not None:
            self._unit = ContainerCgroup.of(self.pid)
        return self._unit

    def processes(self) -> list[int] | None:
        unit = self.unit()
        return None if unit is None else unit.pids()

    def thread_count(self) -> int | None:
        unit = self.unit()
        return super().thread_count() if unit is None else unit.thread_count()

    def cpu_seconds(self) -> float | None:
        unit = self.unit()
        cpu = None if unit is None else unit.cpu_seconds()
        return super().cpu_seconds() if cpu is None else cpu

    def _set_frozen(self, frozen: bool) -> None:
        """The container's freezer cgroup, else the engine's pause (the same freezer) or unpause."""
        unit = self.unit()
        if unit is not None and unit.set_frozen(frozen):
            return
        try:
            (self.client.api.pause if frozen else self.client.api.unpause)(self.id)
        except (APIError, NotFound):
            pass  # exited or removed: nothing of it runs

    def _inspect(self) -> dict:
        if self._state is not None:
            return self._state
        try:
            state = self.client.api.inspect_container(self.id)["State"]
        except NotFound:  # removed (e.g. by the signal handler)
            state = {"Status": "removed", "ExitCode": 137, "OOMKilled": False}
        if state["Status"] in ("exited", "dead", "removed"):
            self._state = state
        return state

    def exit_code(self) -> int | None:
        state = self._inspect()
        return int(state["ExitCode"]) if state["Status"] in ("exited", "dead", "removed") else None

    def memory_bytes(self) -> int | None:
        return None  # the engine enforces the memory limit (OOM kill), reported by exit_reason

    def set_memory_limit(self, nbytes: int) -> None:
        """The engine's limit, moved (`docker update`); still without swap."""
        try:
            self.client.api.update_container(self.id, mem_limit=nbytes, memswap_limit=nbytes)
        except (APIError, NotFound) as exc:
            log.info("container %s keeps its memory limit: %s", self.id[:12], exc)

    def exit_reason(self) -> str:
        state = self._inspect()
        code = self.exit_code()
        if code is None:
            return "still running"
        if state.get("OOMKilled"):
            return "killed by the memory limit (OOM)"
        if state["Status"] == "removed":
            return "stopped (its container was removed)"
        if code > 128:  # the engine reports a signal death as 128 + the signal number
            return f"killed by signal {code - 128} (exit code {code})"
        return f"exited with code {code}"

    def _logs(self) -> bytes | None:
        try:  # the json-file driver caps them at 10 MB
            return bytes(self.client.api.logs(self.id, stdout=True, stderr=True))
        except APIError:
            return None

    def _save_logs(self, data: bytes | None = None) -> None:
        data = self._logs() if data is None else data
        if data is not None:
            try:
                self.log_path.write_bytes(data)
            except OSError:
                pass

    def log_tail(self, limit: int = 4000) -> str:
        """The log so far. The engine copies a running container's output into its log on its
        own schedule, so a live read waits (briefly) for the log to stop growing; a killed
        worker's log was saved after its exit, when the engine has copied all of it."""
        if not self._removed:
            data, settled_by = self._logs(), time.monotonic() + LIVE_LOG_SETTLE_S
            while data is not None and self.exit_code() is None and time.monotonic() < settled_by:
                time.sleep(0.05)
                again = self._logs()
                if again is None or len(again) == len(data):
                    break
                data = again
            self._save_logs(data)
        return super().log_tail(limit)

    def kill(self) -> None:
        if not self._removed:
            self._removed = True
            if self._inspect()["Status"] != "removed":
                self._stop()
                self._save_logs()  # after the exit: the engine has drained its output by then
            if self._state is None:  # still running: we kill it (an exit keeps its own state)
                self._state = {"Status": "exited", "ExitCode": 137, "OOMKilled": False}
            try:
                self.client.api.remove_container(self.id, force=True)
            except NotFound:
                pass
            except APIError as exc:
                log.warning("could not remove worker container %s: %s", self.id[:12], exc)
        try:
            self.sock.close()
        except OSError:
            pass
        shutil.rmtree(self.chan_dir, ignore_errors=True)

    def _stop(self) -> None:
        """Kill the container and wait for the engine to report its exit (bounded)."""
        try:
            self.client.api.kill(self.id)
        except (APIError, NotFound):
            pass  # already exited, or gone
        try:
            self.client.api.wait(self.id, timeout=STOP_WAIT_S)
        except (APIError, NotFound, requests.exceptions.RequestException):
            log.info("worker container %s: no exit reported within %.0f s", self.id[:12], STOP_WAIT_S)


def _host_pid(container_id: str, pid: int | None) -> int | None:
    """The worker's pid as this process sees it (for CPU pinning), if it is really that
    container's: with the bot itself in a container, the engine's pids are another namespace's."""
    try:
        return pid if pid and container_id in Path(f"/proc/{pid}/cgroup").read_text() else None
    except OSError:
        return None


class DockerSandbox(Sandbox):
    name = "docker"

    def __init__(self, image: str | None = None, client=None):
        self.client = client or connect()
        self.image = image or os.environ.get("KERNEL_BOT_IMAGE") or LOCAL_IMAGE
        if self.image == LOCAL_IMAGE:
            ensure_local_image(self.client)
        try:
            labels = self.client.images.get(self.image).labels or {}
        except ImageNotFound:
            raise BotError(
                f"docker image {self.image!r} not found; build it with `docker build -t "
                f"{self.image} -f ci/Dockerfile .` (see ci/IMAGES.md), or unset "
                f"KERNEL_BOT_IMAGE to use {LOCAL_IMAGE} (built automatically)"
            ) from None
        self.host_interpreter = labels.get(HOST_MOUNTS_LABEL) == "1"
        self.image_python = labels.get(PYTHON_LABEL, "python")
        _install_cleanup()
        if guardian.ensure_started():  # SIGKILL leaves no handler to run: the guardian removes them
            guardian.tell(f"docker {RUN_ID}")

    def _environment(self, launch: WorkerLaunch) -> dict[str, str]:
        """`worker_env` with host paths replaced by the container's."""
        work, cache = str(launch.workdir), str(launch.cache_dir)
        env = {}
        for key, value in worker_env(launch).items():
            if is_under(value, cache):
                value = CACHE_IN + value[len(cache) :]
            elif is_under(value, work):
                value = WORK_IN + value[len(work) :]
            env[key] = value
        env.pop("NVIDIA_VISIBLE_DEVICES", None)  # the device request alone picks the GPU
        if launch.device == Device.CUDA:
            env["CUDA_VISIBLE_DEVICES"] = "0"  # the one GPU passed in is device 0 inside
            env.setdefault("NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
        for key in () if self.host_interpreter else _FULL_IMAGE_DROPS:
            env.pop(key, None)
        return env

    def _mounts(self, launch: WorkerLaunch, python: str) -> tuple[list, list[str]]:
        same = same_path_mounts(python, launch.readable, self.host_interpreter)
        mounts = [Mount(p, p, type="bind", read_only=True) for p in same]
        mounts += [
            Mount(f"{SRC_IN}/bot", str(BOT_ROOT / "bot"), type="bind", read_only=True),
            Mount(CACHE_IN, str(launch.cache_dir), type="bind"),
        ]
        return mounts, same + [str(BOT_ROOT / "bot")]

    def start(self, launch: WorkerLaunch) -> DockerWorker:
        global _started_any
        launch.workdir.mkdir(parents=True, exist_ok=True)
        launch.cache_dir.mkdir(parents=True, exist_ok=True)
        python = launch.python if self.host_interpreter else self.image_python
        mounts, readable = self._mounts(launch, python)
        uid, gid = os.getuid(), os.getgid()
        if uid == 0 and (world_readable(readable) or not self.host_interpreter):
            uid, gid = NOBODY
            give_to(launch.cache_dir, uid, gid)
        elif uid == 0:
            log.warning(
                "the interpreter is not readable by others: the worker runs as root "
                "inside its container (still without capabilities)"
            )
        chan_dir = Path(tempfile.mkdtemp(prefix="kernel-bot-chan-"))
        mounts.append(Mount(CHAN_IN, str(chan_dir), type="bind"))  # holds only the socket
        path = chan_dir / "sock"
        listener = socket.create_server(str(path), family=socket.AF_UNIX, backlog=1)
        os.chown(path, uid, gid)
        os.chmod(path, 0o600)  # only the worker's uid may connect
        os.chmod(chan_dir, 0o711)
        limits = launch.limits
        gpus = (
            [DeviceRequest(device_ids=[str(launch.gpu_index or 0)], capabilities=[["gpu"]])]
            if launch.device == Device.CUDA
            else None
        )
        _started_any = True
        try:
            container = self.client.containers.create(
                self.image,
                [python, "-I", "-c", BOOT, SRC_IN, "--channel", f"unix:{CHAN_IN}/sock"],
                user=f"{uid}:{gid}",
                working_dir=WORK_IN,
                environment=self._environment(launch),
                network_mode="none",
                read_only=True,
                mounts=mounts,
                cap_drop=["ALL"],
                # uid=/gid=: runc gives the tmpfs the mode of the pre-created working dir (0755)
                tmpfs={WORK_IN: f"rw,nosuid,nodev,noexec,size={WORK_TMPFS_MB}m,uid={uid},gid={gid},mode=0700"},
                security_opt=["no-new-privileges"],
                pids_limit=limits.pids,
                mem_limit=f"{limits.memory_mb}m",
                memswap_limit=f"{limits.memory_mb}m",
                ulimits=[Ulimit(name="core", soft=0, hard=0)],
                hostname=socket.gethostname(),
                labels={WORKER_LABEL: "1", RUN_LABEL: RUN_ID, PID_LABEL: str(os.getpid())},
                log_config=LogConfig(type="json-file", config={"max-size": "10m", "max-file": "1"}),
                nano_cpus=int(limits.cpus * 1e9) if limits.cpus else None,
                device_requests=gpus,
            )
        except Exception as exc:
            listener.close()
            shutil.rmtree(chan_dir, ignore_errors=True)
            raise HarnessError(f"could not create a worker container: {exc}") from None
        worker = DockerWorker(self.client, container.id, listener, launch.workdir / "worker.log", chan_dir)
        try:
            container.start()
            worker.sock = self._accept(listener, worker)
            worker.pid = _host_pid(worker.id, worker._inspect().get("Pid"))
        except BaseException as exc:
            worker.kill()
            if isinstance(exc, Exception) and not isinstance(exc, HarnessError):
                raise HarnessError(f"could not start a worker container: {exc}") from None
            raise
        finally:
            listener.close()
        return worker

    @staticmethod
    def _accept(listener: socket.socket, worker: DockerWorker) -> socket.socket:
        """The worker's connection; fails with its logs if it exits or never connects."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        listener.settimeout(0.1)
        while True:
            try:
                conn, _ = listener.accept()  # blocking, as the channel expects
                os.unlink(listener.getsockname())  # nobody else can connect now
                return conn
            except TimeoutError:
                pass
            exited = worker.exit_code() is not None
            if exited or time.monotonic() > deadline:
                what = (
                    f"{worker.exit_reason()} before connecting"
                    if exited
                    else f"did not connect within {CONNECT_TIMEOUT_S:.0f} s"
                )
                raise HarnessError(f"the worker container {what}:\n{worker.log_tail()}")
