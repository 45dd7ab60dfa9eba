"""The bot's handle on a fork server (bot.sandbox.fork_server): it starts the server's
`python -I` process with a worker's allowlisted environment, asks it for a worker forked onto
a channel the bot passes it (`spawn`, with the fork's settings in a ForkSettings), and reads
each worker's exit status, which only the server, the forks' parent, can reap.

A server that cannot start, or stops answering, raises ForkServerError; the process backend
(bot.sandbox.process) then starts workers the plain way.
"""

from __future__ import annotations

import json
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.sandbox.base import BOT_ROOT, alive
from bot.sandbox.fork_server import MESSAGE_BYTES

BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from bot.sandbox.fork_server import serve; "
    "serve(int(sys.argv[2]), sys.argv[3] == '1', sys.argv[4:5] == ['1'])"
)
READY_TIMEOUT_S = 300.0  # the server's own torch import, on a loaded machine


class ForkServerError(Exception):
    """The server could not start, or stopped answering; workers start the plain way."""


class DriverInitialized(ForkServerError):
    """The server's imports initialised the CUDA driver, so its forks could not use CUDA."""


@dataclass(frozen=True)
class ForkSettings:
    """What a fork sets up before it becomes a worker: what Popen's arguments and its
    preexec_fn (bot.sandbox.isolate.confine) give a worker started the plain way."""

    log: Path  # its stdout and stderr
    cwd: Path
    env: dict[str, str]
    memory_mb: int
    device: str
    cores: frozenset[int]  # on CUDA, the cores it may run on (off the reserved timing core); else empty
    containment: dict | None = None  # bot.sandbox.isolate.Containment, as a dict


class ForkServer:
    """The bot's handle on one server: `spawn` a worker, read its exit status, `close`."""

    def __init__(self, python: str, env: dict[str, str], compiler: bool = True, vector_isa: bool = False):
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._home = tempfile.mkdtemp(prefix="kernel-bot-fork-server-")
        self._log = Path(self._home) / "server.log"
        try:
            with open(self._log, "wb") as log:
                self.proc = subprocess.Popen(
                    [
                        python,
                        "-I",
                        "-c",
                        BOOT,
                        str(BOT_ROOT),
                        str(theirs.fileno()),
                        "1" if compiler else "0",
                        "1" if vector_isa else "0",
                    ],
                    cwd=self._home,
                    env={**env, "HOME": self._home, "TMPDIR": self._home},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
        except OSError as exc:  # no such interpreter, no processes left, ...
            self._sock.close()
            shutil.rmtree(self._home, ignore_errors=True)
            raise ForkServerError(f"the fork server could not be started: {exc}") from None
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        self._next_id = 0
        self._dead = False
        hello = self._receive(time.monotonic() + READY_TIMEOUT_S)
        if hello is not None and hello.get("driver_initialized"):
            self.close()
            raise DriverInitialized(
                "the fork server's imports initialised the CUDA driver"
                + (" (torch.compile's included)" if hello.get("compiler") else "")
            )
        if hello is None or not hello.get("ready"):
            self.close()
            raise ForkServerError(f"the fork server did not start: {self._log_tail()}")
        self.compiler: bool = bool(hello.get("compiler"))  # torch.compile's machinery is in every fork
        self.vector_isa: bool = bool(hello.get("vector_isa"))  # and Inductor's CPU instruction sets checked

    def spawn(self, channel: socket.socket, settings: ForkSettings) -> int:
        """A new worker on `channel` (the worker's end of its socket pair); its pid."""
        with self._lock:
            if self._dead:
                raise ForkServerError("the fork server has stopped")
            self._next_id += 1
            request = {
                "id": self._next_id,
                "log": str(settings.log),
                "cwd": str(settings.cwd),
                "env": settings.env,
                "memory_mb": settings.memory_mb,
                "device": settings.device,
                "cores": sorted(settings.cores),
                "containment": settings.containment,
            }
            try:
                socket.send_fds(self._sock, [json.dumps(request).encode()], [channel.fileno()])
            except OSError as exc:
                self._dead = True
                raise ForkServerError(f"the fork server stopped: {exc}") from None
            deadline = time.monotonic() + 60.0
            while True:
                reply = self._receive(deadline)
                if reply is None:
                    self._dead = True
                    raise ForkServerError(f"the fork server stopped answering: {self._log_tail()}")
                if reply.get("id") == self._next_id:
                    return int(reply["pid"])

    def exit_code(self, pid: int) -> int | None:
        """The worker's exit status as Popen.returncode gives it (negative: killed by that
        signal); None while it runs."""
        with self._lock:
            while not self._dead and self._receive(0.0, wait=False) is not None:
                pass
            if pid in self._exits:
                return self._exits[pid]
            if self._dead and not alive(pid):
                return -9  # its status went with the server; a worker that vanished was killed
            return None

    def close(self) -> None:
        self._dead = True
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self._home, ignore_errors=True)

    def _receive(self, deadline: float, wait: bool = True) -> dict[str, Any] | None:
        """The next message that is not an exit notice (those are recorded); None when the
        server is gone, or (with wait=False) when nothing is waiting."""
        while True:
            timeout = max(deadline - time.monotonic(), 0.0) if wait else 0.0
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                if wait and time.monotonic() < deadline:
                    continue
                if wait:
                    self._dead = True
                return None
            try:
                data = self._sock.recv(MESSAGE_BYTES)
            except OSError:
                data = b""
            if not data:
                self._dead = True
                return None
            message = json.loads(data)
            if "exited" in message:
                self._exits[int(message["exited"])] = int(message["code"])
                continue
            return message

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-2000:].strip() or "(no output)"
        except OSError:
            return "(no log)"
