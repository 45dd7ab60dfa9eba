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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from bot.core.settings import Device
from bot.engine.workers.gpu_memory import Holder, gpu_process_memory, holders_line, says_out_of_memory
from bot.engine.workers.phase_clock import current, part_of
from bot.protocol.channel import FDS_PER_MESSAGE, Channel, ChannelClosed, ChannelError, ChannelTampered
from bot.protocol.messages import Exit, GateAnswer, GateAsk, Hello, HelloReply
from bot.protocol.typed import Failure, ProtocolError, Request
from bot.sandbox import freezer
from bot.sandbox.base import RunningWorker, Sandbox, WorkerLaunch
from bot.sandbox.cores import timing_core, worker_cores
from bot.sandbox.scrub import scrub, secret_values

log = logging.getLogger(__name__)
POLL_S = 0.1
PROGRESS_POLL_S = 1.0  # CPU time of the worker's tree, read this often while waiting (~20 us a read)


class WorkerFailure(Exception):
    """The contender failed in `phase` ("start", "import", "construct", "call", "problem", ...)."""

    def __init__(self, phase: str, reason: str, log_tail: str = ""):
        phase, reason, log_tail = scrub((phase, reason, log_tail))  # all of it came from the worker
        super().__init__(f"{phase}: {reason}")
        self.phase = phase
        self.reason = reason
        self.log_tail = log_tail


class WorkerClient:
    def __init__(
        self,
        sandbox: Sandbox,
        label: str,
        launch: WorkerLaunch,
        threads: int | None = None,
        describe: bool = True,
        owner: str = "",
    ):
        self.label = label
        self.owner = owner  # what the worker serves, for people: the problem and candidate
        # The bot's own secrets, looked up once: every reply is scrubbed of them, and a scan of
        # the environment per reply took 0.45 ms, thousands of times a timing phase.
        self._secrets = secret_values()
        self.device = launch.device
        self.gpu_index = launch.gpu_index
        self.limits = launch.limits
        # Resident memory allowed (the parent's watchdog): from the limits at start, then scaled
        # to the problem once its footprint is measured (`limit_memory`).
        self.memory_limit_bytes = launch.limits.memory_mb << 20
        self.workdir = launch.workdir
        began = time.monotonic()
        self.running: RunningWorker = sandbox.start(launch)
        self.trusted = label == "reference"  # never frozen while others are timed (bot.sandbox.freezer)
        freezer.register(self)
        spawned = time.monotonic()
        self.channel = Channel(self.running.sock)
        # Only the trusted reference hands the bot descriptors (blocks it lends: bot.harness.judge);
        # whatever a contender attaches, the kernel closes unread.
        self.channel.fd_room = FDS_PER_MESSAGE if self.trusted else 0
        key = secrets.token_bytes(32)
        try:
            # Only one worker per run needs to describe the machine (the reference's is the
            # one reported); the others skip nvidia-smi, a subprocess each at start-up.
            self.channel.send(Hello(key=key.hex(), device=launch.device, threads=threads, describe=describe).to_wire())
        except OSError as exc:
            self.close()
            raise WorkerFailure("start", f"could not reach the worker: {exc}") from None
        self.channel.key = key
        try:
            hello: HelloReply = Hello.Reply.from_wire(self._receive("start", launch.limits.import_timeout_s))
        except ProtocolError as exc:
            self.close()
            raise WorkerFailure("protocol", f"malformed hello: {exc}") from None
        # Where start-up goes, for the progress line: the process (or fork) itself, then the
        # worker's own set-up up to its hello (its CUDA context and timer calibration).
        self.start_seconds = {"process": spawned - began, "hello": time.monotonic() - spawned}
        self.env: dict[str, Any] = {**hello.env, "containment": self.running.containment}
        self.overhead_us: float = float(hello.overhead_us)
        self.start_threads: int | None = hello.threads  # before the candidate's import

    def request(
        self,
        message: dict[str, Any],
        timeout_s: float,
        phase: str,
        gate: Callable[[str], str] | None = None,
        fds: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Send one op and wait for its reply, as it came: the transport under `ask`, which
        checks the reply against its typed request before anything reads it. A reply that says
        the op failed raises WorkerFailure, read as a typed `Failure`. With `gate`, the worker
        may ask for the GPU on the way (bot.harness.tuning_gate): `gate` turns what it said
        into the answer, and the time that took does not count against `timeout_s`. `fds` go
        with the request (the caller still owns them)."""
        if self.running.frozen:
            self.running.thaw()  # asked to work: it must run (the next `only()` freezes it again)
        try:
            self.channel.send(message, fds=fds)
        except OSError:
            raise self._dead(phase) from None
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(phase, deadline - time.monotonic(), timeout_s)
            if "gate" not in reply:
                break
            try:
                asked = GateAsk.from_wire(reply)
            except ProtocolError as exc:
                self.close()
                raise WorkerFailure("protocol", str(exc)) from None
            if gate is None:
                tail = self._closed_with_tail()
                raise WorkerFailure("channel", f"asked for the GPU ({asked.gate!r}) outside a gated trial", tail)
            began = time.monotonic()
            answer = gate(asked.gate)
            deadline += time.monotonic() - began
            try:
                self.channel.send(GateAnswer(answer).to_wire())
            except OSError:
                raise self._dead(phase) from None
        if reply.get("ok") is not True:
            raise self._failure(reply)
        return reply

    def threads_seen(self, reported: list[str]) -> list[str]:
        """A checked reply's new threads as the parent counts them: the worker's own listing
        (or, where it listed none, the kernel's count), and the processes besides it."""
        return self._threads_seen_from_outside(reported) + self._processes_seen_from_outside()

    def _failure(self, reply: dict[str, Any]) -> WorkerFailure:
        """The worker's own report that an op failed, read as strictly as any other reply: a
        reply that is not a well-formed `Failure` fails the contender as a protocol error."""
        try:
            failed = Failure.from_wire(reply)
        except ProtocolError as exc:
            return WorkerFailure("protocol", f"malformed failure reply: {exc}", _tail(self.running.log_tail()))
        error = failed.error
        if self.device == Device.CUDA and says_out_of_memory(error):
            error = f"{error} ({_gpu_holders(self.gpu_index)})"
        return WorkerFailure(failed.phase, error, _tail(failed.traceback + "\n" + self.running.log_tail()))

    def holder(self) -> Holder:
        """This worker as named where GPU memory is accounted for, with its unit's processes."""
        pids = self.running.processes() or ([self.running.pid] if self.running.pid is not None else [])
        return Holder(f"{self.owner} {self.label}".strip(), tuple(pids))

    def _processes_seen_from_outside(self) -> list[str]:
        """Processes in the worker's unit besides the worker itself (a child it left running,
        a daemon that double-forked and called setsid), as the kernel lists them."""
        pids = self.running.processes()
        main = self.running.pid
        extra = [p for p in pids or () if p != main]
        limits = self.running.limits_hit()  # forks the kernel refused: gone before any listing
        if not extra:
            return limits
        names = ", ".join(f"{_command(p)} (pid {p})" for p in extra[:5])
        return [scrub(f"{len(extra)} process(es) besides the worker in its cgroup: {names}")] + limits

    def _threads_seen_from_outside(self, reported: list[str]) -> list[str]:
        """What the worker reported as new threads, or, where it reported none, the threads the
        kernel counts beyond those it had before the candidate's import: its own listing runs
        in the candidate's process, and a candidate could rebind it to hide a thread."""
        seen = self.running.thread_count()
        if reported or seen is None or self.start_threads is None or seen <= self.start_threads:
            return reported
        return [
            f"{seen - self.start_threads} thread(s) more than at start ({seen} now) in the kernel's "
            "count, which the worker's own listing did not report"
        ]

    def _receive(self, phase: str, timeout_s: float, allowed_s: float | None = None) -> dict[str, Any]:
        """The next frame, within `timeout_s`, scrubbed of the bot's secrets; `allowed_s`: the
        whole request's limit, as said in a timeout's reason. A worker whose whole tree uses
        under `stall_cpu_s` of CPU for `stall_timeout_s` is stopped sooner; time it spends
        frozen counts toward neither."""
        now = time.monotonic()
        deadline = now + timeout_s
        watch = _Progress(self.running, now, self.limits.stall_cpu_s)
        while True:
            ready, _, _ = select.select([self.running.sock], [], [], POLL_S)
            if ready:
                break
            used = self.running.memory_bytes()
            if used is not None and used > self.memory_limit_bytes:
                self.close()
                raise WorkerFailure(
                    phase,
                    f"killed: resident memory {used >> 20} MiB exceeded the limit of "
                    f"{self.memory_limit_bytes >> 20} MiB",
                )
            if self.running.exit_code() is not None:
                break  # let recv see the closed channel (there may be a last frame)
            now = time.monotonic()
            deadline += watch.update(now)
            if watch.mark is not None and now - watch.since > self.limits.stall_timeout_s:
                tail = self._closed_with_tail()
                raise WorkerFailure(
                    phase,
                    f"no progress for {now - watch.since:.0f} s ({watch.cpu_since():.1f} s of CPU; stopped, killed)",
                    tail,
                )
            if now > deadline:
                tail = self._closed_with_tail()
                raise WorkerFailure(
                    phase,
                    f"timed out after {allowed_s or timeout_s:.0f} s (killed; it kept "
                    f"using CPU: {watch.cpu_total():.1f} s)",
                    tail,
                )
        try:
            self.running.sock.settimeout(max(deadline - time.monotonic(), 5.0))
            return scrub(self.channel.recv(), self._secrets)
        except ChannelTampered as exc:
            tail = self._closed_with_tail()
            raise WorkerFailure("channel", f"result channel tampered with: {exc}", tail) from None
        except (ChannelClosed, ChannelError, OSError):
            raise self._dead(phase) from None

    def _dead(self, phase: str) -> WorkerFailure:
        for _ in range(50):  # the exit status may lag the closed socket by a moment
            if self.running.exit_code() is not None:
                break
            time.sleep(0.02)
        reason = self.running.exit_reason()
        tail = self._closed_with_tail()
        return WorkerFailure(phase, f"worker {reason} without a result", tail)

    def limit_memory(self, nbytes: int) -> None:
        """The worker's resident-memory limit from now on: the watchdog's, and the kernel's
        where the sandbox can move it (bot.sandbox.base.RunningWorker.set_memory_limit)."""
        self.memory_limit_bytes = nbytes
        self.running.set_memory_limit(nbytes)

    def bound_messages(self, nbytes: int) -> None:
        """The longest message this worker may send from now on (bot.protocol.channel.outputs_bound)."""
        self.channel.max_message_bytes = nbytes

    def pin(self, timed: bool) -> None:
        """Move the worker's launching thread onto the reserved timing core, or back off it.

        Every contender is timed from the same, otherwise idle core (`bot.sandbox.cores`), so a
        difference between processes is not a difference between cores or neighbours."""
        pid = getattr(self.running, "pid", None)
        core = timing_core(self.gpu_index)
        if pid is None or core is None or self.device != Device.CUDA:
            return  # on CPU the kernel's own threads share the cores: pinning would starve them
        try:
            os.sched_setaffinity(pid, {core} if timed else worker_cores())
        except OSError:
            pass

    def _closed_with_tail(self) -> str:
        """Stop the worker, then read its log's tail: once it is killed, all it wrote is in the
        log (a container's output reaches its log on the engine's schedule), then clean up."""
        self.running.kill()
        tail = self.running.log_tail()
        self.close()
        return tail

    def close(self) -> None:
        try:
            if self.running.exit_code() is None:
                self.channel.send(Exit().to_wire())
        except (OSError, ValueError):
            pass
        self.running.kill()
        freezer.unregister(self)
        shutil.rmtree(self.workdir, ignore_errors=True)


def ask(
    worker: WorkerClient,
    request: Request,
    timeout_s: float,
    phase: str,
    gate: Callable[[str], str] | None = None,
    fds: Sequence[int] = (),
) -> Any:
    """Send a typed request (bot.protocol.messages, .batches) and return its reply, checked field by
    field and against the request. The reply is the candidate's process's word: a malformed
    one fails the contender (phase "protocol"), never the bot."""
    wire = request.to_wire()
    with current().phase(part_of(worker, request)):  # where the problem's time goes
        # Only what was given: stand-ins of `request` take neither.
        given = {k: v for k, v in (("gate", gate), ("fds", fds)) if v}
        reply = worker.request(wire, timeout_s, phase, **given)
    return parse_reply(worker, request, reply)


def parse_reply(worker: WorkerClient, request: Request, reply: dict[str, Any]) -> Any:
    """`request`'s reply as it came from `worker`, checked (see `ask`); its new threads, where
    it reports them, as the parent counts them from outside (`WorkerClient.threads_seen`)."""
    try:
        checked = request.parse_reply(reply)
    except ProtocolError as exc:
        raise WorkerFailure("protocol", str(exc)) from None
    reported = getattr(checked, "new_threads", None)
    return checked if reported is None else replace(checked, new_threads=worker.threads_seen(reported))


class _Progress:
    """The CPU time of a worker's tree while the parent waits: when it last rose by
    `step_s`, and how much frozen time to add to deadlines."""

    def __init__(self, running: RunningWorker, now: float, step_s: float):
        self.running, self.step_s = running, step_s
        self.since = now
        self.read_at = now
        self.first = self.mark = running.cpu_seconds()
        self.frozen = running.frozen_seconds()

    def update(self, now: float) -> float:
        """Read the CPU time (every PROGRESS_POLL_S); the frozen seconds since the last call."""
        frozen = self.running.frozen_seconds()
        paused, self.frozen = frozen - self.frozen, frozen
        self.since += paused
        if self.mark is None or now - self.read_at < PROGRESS_POLL_S:
            return paused
        self.read_at = now
        cpu = self.running.cpu_seconds()
        if cpu is not None and cpu - self.mark >= self.step_s:
            self.mark, self.since = cpu, now
        return paused

    def cpu_since(self) -> float:
        cpu = self.running.cpu_seconds()
        return 0.0 if cpu is None or self.mark is None else cpu - self.mark

    def cpu_total(self) -> float:
        cpu = self.running.cpu_seconds()
        return 0.0 if cpu is None or self.first is None else cpu - self.first


def _gpu_holders(gpu_index: int | None) -> str:
    """Who held the GPU's memory right after a worker ran out of it: the bot's live workers by
    name, and processes that are none of them."""
    used = gpu_process_memory(gpu_index)
    if used is None:
        return "nvidia-smi could not say who held the GPU's memory"
    return holders_line(used, (c.holder() for c in freezer.live() if isinstance(c, WorkerClient)))


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()[:32]
    except OSError:
        return "?"


def _tail(text: str, limit: int = 3000) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
