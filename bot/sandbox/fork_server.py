"""A fork server for the process backend: workers start as forks of one clean process.

A worker spends most of its start-up importing torch (1.3 s on a 2-vCPU CI machine; on the
H200 host, 29 workers take 10 to 13 s to start, docs/sandbox.md). The server is a `python -I`
process with a worker's allowlisted environment and no secrets; it imports torch and the
worker harness once, and torch.compile's machinery too where that leaves the CUDA driver
uninitialised (checked before the first fork; a fork of a process that ran cuInit cannot use
CUDA), and forks a worker per request. Each fork then
does what `subprocess.Popen` would have done for it (its own session, its log as stdout and
stderr, its working directory and environment, its resource limits, every other descriptor
closed) and runs the worker on the channel the parent passed it, so a worker is the same
confined `python -I` process either way, only started without re-importing.

The server is the forks' parent, so it reaps them and reports each exit status to the bot;
its single thread forks only between requests. Where the bot is root, each fork enters its
own cgroup leaf, namespaces and uid (bot.sandbox.isolate) before any candidate code, so no
worker can reach the server, the bot or another worker.

This module is what runs in the server's process; the bot's handle on it (starting it, asking
it for a fork, reading exit statuses) is bot.sandbox.fork_client.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MESSAGE_BYTES = 1 << 20  # one request (a worker's environment and paths) fits many times over
REAP_S = 0.05
CUDA_ERROR_NOT_INITIALIZED = 3
NVML_SUCCESS = 0


def serve(control_fd: int, compiler: bool = True, vector_isa: bool = False) -> None:
    import bot.harness.worker  # noqa: F401  torch and the harness, imported once for every fork

    compiler = compiler and _import_the_compiler()
    vector_isa = compiler and vector_isa and _check_vector_isa()
    maps = _mapped_libraries()
    _shut_nvml_down(maps)

    control = socket.socket(fileno=control_fd)
    if cuda_driver_initialized(maps):
        # Forks of a process that ran cuInit cannot use CUDA; the bot starts workers plainly.
        control.sendall(json.dumps({"ready": False, "driver_initialized": True, "compiler": compiler}).encode())
        return
    control.sendall(
        json.dumps({"ready": True, "pid": os.getpid(), "compiler": compiler, "vector_isa": vector_isa}).encode()
    )
    while True:
        _report_exits(control)
        ready, _, _ = select.select([control], [], [], REAP_S)
        if not ready:
            continue
        data, fds, _flags, _addr = socket.recv_fds(control, MESSAGE_BYTES, 4)
        if not data:  # the bot closed its end: the workers live on in their own sessions
            return
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_worker(request, fds, control)  # never returns
        for fd in fds:
            os.close(fd)
        control.sendall(json.dumps({"id": request["id"], "pid": pid}).encode())


def _import_the_compiler() -> bool:
    """torch.compile's own imports (dynamo, inductor: 2.3 s on a 2-vCPU machine) once for every
    fork, not once per torch.compile candidate; whether they were. On a GPU host they must
    leave the CUDA driver uninitialised: `serve` checks that before it forks anything, and
    torch's availability probe goes through NVML instead of cuInit while they run."""
    probe = "PYTORCH_NVML_BASED_CUDA_CHECK"
    before = os.environ.get(probe)
    os.environ[probe] = "1"
    try:
        import torch._dynamo  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
    except Exception:  # a torch without them: candidates import what they need themselves
        return False
    finally:
        if before is None:
            os.environ.pop(probe, None)
        else:
            os.environ[probe] = before
    return True


def _check_vector_isa() -> bool:
    """Inductor's check of the vector instruction sets its C++ kernels may use, made once here
    for every fork; whether it was. The check compiles and loads a test program per set (7 s
    of a 15 s first torch.compile call on 2 vCPUs) into the compile cache, and each worker has
    a cache of its own (one per candidate source), so every CPU torch.compile candidate made it
    again. Its answer is a fact of the machine and the compiler, kept in memory
    (`valid_vec_isa_list` is cached), so the forks inherit it. It compiles in a folder of the
    server's own, which no worker can write to."""
    variable = "TORCHINDUCTOR_CACHE_DIR"
    before = os.environ.get(variable)
    os.environ[variable] = tempfile.mkdtemp(prefix="vector-isa-")  # under the server's TMPDIR
    try:
        from torch._inductor.cpu_vec_isa import valid_vec_isa_list

        valid_vec_isa_list()
    except Exception:  # a torch without it: each worker checks for itself, as before
        return False
    finally:
        if before is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = before
    return True


def _shut_nvml_down(maps: str, load: Callable[[str], Any] | None = None) -> int:
    """Undo the NVML start-ups of the imports; how many. torch's NVML-based availability probe
    starts NVML and never shuts it down. A fork inherits NVML started, with its device files
    closed (`_become_worker` closes every descriptor), and there NVML does not start again:
    torch's out-of-memory report then fails an assertion on it, and contenders out of memory
    would be rejected for that instead of being retried alone. Started twice, NVML needs
    two shutdowns; it answers NVML_ERROR_UNINITIALIZED once it is down."""
    if "libnvidia-ml" not in maps:
        return 0
    import ctypes

    try:
        nvml = (load or ctypes.CDLL)("libnvidia-ml.so.1")
    except OSError:
        return 0
    done = 0
    while done < 64 and nvml.nvmlShutdown() == NVML_SUCCESS:
        done += 1
    return done


def _mapped_libraries() -> str:
    try:
        return Path("/proc/self/maps").read_text()
    except OSError:
        return ""


def cuda_driver_initialized(maps: str, load: Callable[[str], Any] | None = None) -> bool:
    """Whether cuInit has run in this process. A driver that is not mapped has not; one that
    is answers every query but a few with CUDA_ERROR_NOT_INITIALIZED until cuInit (asking
    does not initialise it)."""
    if "libcuda.so" not in maps:
        return False
    import ctypes

    try:
        driver = (load or ctypes.CDLL)("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED


def _report_exits(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control.sendall(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _become_worker(request: dict[str, Any], fds: list[int], control: socket.socket) -> None:
    """In the fork: what Popen(start_new_session=True, cwd=, env=, stdout=log, pass_fds=,
    preexec_fn=confine) does, then the worker's main loop; the fork never returns."""
    code = 1
    try:
        control.close()
        channel_fd = fds[0]
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, channel_fd)  # nothing of the server's stays open but the channel
        os.closerange(channel_fd + 1, os.sysconf("SC_OPEN_MAX"))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # the server's TMPDIR must not outlive the environment swap
        from bot.sandbox.isolate import Containment, confine

        confine(
            request["memory_mb"],
            request["device"],
            set(request["cores"]),
            Containment.from_dict(request.get("containment")),
        )
        _repoint_compiler_headers()
        sys.argv = ["-c", "--channel", f"fd:{channel_fd}"]
        from bot.harness.worker import main

        main(sys.argv[1:])
        code = 0
    except SystemExit as exc:  # a candidate's sys.exit(): the parent sees the code, and no result
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)


def _repoint_compiler_headers() -> None:
    """Inductor fixed its precompiled-header folder at the server's import, under the server's
    own temp folder: shared by every fork (one could plant headers for the others) and not
    writable to a worker with its own uid. Each fork gets its own, under its TMPDIR."""
    codecache = sys.modules.get("torch._inductor.codecache")
    if codecache is None or not hasattr(codecache, "_HEADER_DIR"):
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    codecache._HEADER_DIR = os.path.join(default_cache_dir(), "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
