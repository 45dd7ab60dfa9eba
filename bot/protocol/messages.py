"""The requests the bot sends a worker and the replies it takes back, as typed messages.

Each request (an op) and each reply is a frozen dataclass with `to_wire()` (the dict the
channel carries) and `from_wire(dict)`, which raises ProtocolError, naming the field, on
anything missing or of the wrong type. A reply is checked against its request too
(`Request.parse_reply`): as many fingerprints as calls timed, as many outputs as picks.

The worker runs in the candidate's process, so every reply is the candidate's to forge: the
parent reads replies only through `parse_reply`, and a malformed one is a clean failure of
that contender, never an exception of the bot. Tensors are held by reference, never copied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from bot.protocol.typed import (
    Done,
    Failure,
    Message,
    ProtocolError,
    Reply,
    Request,
    bool_,
    count,
    dict_,
    duration,
    durations,
    expect,
    int_,
    ints,
    list_of,
    local,
    one_of,
    optional,
    output_meta,
    prints,
    regions,
    str_,
    strs,
    tensors,
    wire,
)


# Start-up: the only unsigned exchange; the hello carries the run key.
@dataclass(frozen=True)
class HelloReply(Reply):
    env: dict = wire(dict_)
    overhead_us: float = wire(duration, 0.0)
    threads: int | None = wire(optional(int_), None)  # the worker's threads before any candidate code


@dataclass(frozen=True)
class Hello(Request):
    op, Reply = "hello", HelloReply
    key: str = wire(str_)
    device: str = wire(str_)
    threads: int | None = wire(optional(int_), None)
    describe: bool = wire(bool_, True)


@dataclass(frozen=True)
class Exit(Request):
    op, Reply = "exit", Done


# Set-up: the problem and the contender's module, then the model for a shape.
@dataclass(frozen=True)
class LoadReply(Reply):
    new_threads: list[str] = wire(strs)


@dataclass(frozen=True)
class Load(Request):
    op, Reply = "load", LoadReply
    problem: str = wire(str_)
    module: str | None = wire(optional(str_), None)  # None: the problem's own Model
    class_name: str = wire(str_, "ModelNew")
    precision: str = wire(str_, "native")


@dataclass(frozen=True)
class ConstructReply(Reply):
    param_bytes: int = wire(int_)
    new_threads: list[str] = wire(strs)


@dataclass(frozen=True)
class Construct(Request):
    op, Reply = "construct", ConstructReply
    seed: int = wire(int_)
    overrides: dict = wire(dict_, default_factory=dict)


# Checked calls: a trial (full outputs), or the reference's answers for the same inputs.
WANTS = (None, "outputs", "fingerprint", "both")


@dataclass(frozen=True)
class RunReply(Reply):
    meta: list[dict] = wire(list_of(output_meta))
    inputs_before: list[str] = wire(strs)
    inputs_after: list[str] | None = wire(optional(strs), None)
    host_us: float | None = wire(optional(duration), None)
    new_threads: list[str] | None = wire(optional(strs), None)
    outputs: list[torch.Tensor] | None = wire(optional(tensors), None)
    fingerprints: list[list[float]] | None = wire(optional(prints), None)
    # The reference's (precision other than native): the shape's size, for roofline and reports.
    bytes: int | None = wire(optional(int_), None)
    flops: int | None = wire(optional(int_), None)
    input_meta: list[str] | None = wire(optional(strs), None)


@dataclass(frozen=True)
class Run(Request):
    op, Reply = "run", RunReply
    seed: int = wire(int_)
    distribution: str = wire(str_)
    gate: bool = wire(bool_, False)  # a gated trial: timing of kernel variants asks for the GPU
    want: str | None = wire(one_of(*WANTS), None)  # None: a full trial (inputs hashed too)
    fp_seed: int | None = wire(optional(int_), None)

    def validate(self) -> None:
        expect(
            self.want not in ("fingerprint", "both") or self.fp_seed is not None,
            f"Run: want={self.want!r} needs fp_seed",
        )

    def check_reply(self, reply: RunReply) -> None:
        answered = all(m["type"] == "Tensor" for m in reply.meta)  # else the parent fails its structure
        if self.want in ("fingerprint", "both") and answered:
            count("fingerprints", reply.fingerprints, len(reply.meta))
        if self.want != "fingerprint" and answered:
            count("outputs", reply.outputs, len(reply.meta))
        if self.want is None:
            expect(reply.inputs_after is not None, "missing field 'inputs_after'")
            count("inputs_after", reply.inputs_after, len(reply.inputs_before))
            expect(reply.new_threads is not None, "missing field 'new_threads'")


@dataclass(frozen=True)
class ReferenceRun(Run):
    """A full trial of the reference: its reply also sizes the shape."""

    def check_reply(self, reply: RunReply) -> None:
        count("outputs", reply.outputs, len(reply.meta))
        expect(reply.bytes is not None, "missing field 'bytes'")
        expect(reply.input_meta is not None, "missing field 'input_meta'")


@dataclass(frozen=True)
class FingerprintsReply(Reply):
    fingerprints: list = wire(list_of(optional(prints)))
    outputs: list = wire(list_of(optional(tensors)))


@dataclass(frozen=True)
class Fingerprints(Request):
    """The reference's fingerprints and outputs for the timed calls the parent picked."""

    op, Reply = "fingerprints", FingerprintsReply
    seeds: list[int] = wire(ints)
    distribution: str = wire(str_)
    fp_seed: int = wire(int_)
    want: str = wire(one_of("outputs", "fingerprint", "both"), "both")

    def check_reply(self, reply: FingerprintsReply) -> None:
        count("fingerprints", reply.fingerprints, len(self.seeds))
        count("outputs", reply.outputs, len(self.seeds))
        if self.want != "outputs":
            expect(None not in reply.fingerprints, "fingerprints: one is missing")
        if self.want != "fingerprint":
            expect(None not in reply.outputs, "outputs: one is missing")


# Timed batches: inputs staged, the calls timed, then the picked calls' outputs revealed.
@dataclass(frozen=True)
class StageReply(Reply):
    regions: list | None = wire(optional(regions), None)  # per call, per tensor: [address, bytes]
    layout: list | None = wire(optional(list_of(list_of(dict_))), None)  # bot.harness.staging.Layout
    why: str | None = wire(optional(str_), None)  # why the inputs cannot be laid out


@dataclass(frozen=True)
class Stage(Request):
    """A batch's inputs drawn in the worker from the parent's seeds; `stub` (the reference):
    its calibration stand-in returns outputs of `meta`; `expose`: the inputs described for
    the parent to copy (StageInto)."""

    op, Reply = "stage", StageReply
    seeds: list[int] = wire(ints)
    distribution: str = wire(str_)
    stub: bool = wire(bool_, False)
    meta: list[dict] | None = wire(optional(list_of(output_meta)), None)
    expose: bool = wire(bool_, False)

    def validate(self) -> None:
        expect(not self.stub or self.meta is not None, "Stage: a stub needs meta")

    def check_reply(self, reply: StageReply) -> None:
        if self.expose and reply.layout is not None:
            count("layout", reply.layout, len(self.seeds))
            count("regions", reply.regions, len(self.seeds))


@dataclass(frozen=True)
class StageInto(Request):
    """Empty buffers of `layout` (per call, per input), which the parent fills from outside."""

    op, Reply = "stage", StageReply
    layout: list = wire(list_of(list_of(dict_)))

    def check_reply(self, reply: StageReply) -> None:
        count("regions", reply.regions, len(self.layout))


@dataclass(frozen=True)
class TimeReply(Reply):
    host_us: list[float] = wire(durations)  # per call; on CUDA unsynchronised: the whole batch's
    event_us: list[float] | None = wire(optional(durations))  # per call on CUDA, None on the CPU
    fingerprints: list[list[Any]] = wire(list_of(prints))  # per call, per output
    new_threads: list[str] = wire(strs)
    batch_span_us: float | None = wire(optional(duration), None)  # unsynchronised: the batch's events
    samples_us: list[float] | None = wire(optional(durations), None)  # per call, where not event_us
    graph_copies: int | None = wire(optional(int_), None)

    @property
    def samples(self) -> list[float]:
        """Per call: the time the parent records."""
        if self.samples_us:
            return self.samples_us
        return self.event_us if self.event_us is not None else self.host_us


@dataclass(frozen=True)
class Time(Request):
    """The staged batch timed (`mode`: "latency", "throughput" or "graph" on CUDA); `stub`:
    the reference's calibration. `calls`, the parent's own count of the staged calls, checks
    the reply."""

    op, Reply = "time", TimeReply
    fp_seed: int = wire(int_)
    mode: str = wire(one_of("latency", "throughput", "graph"), "latency")
    stub: bool = wire(bool_, False)
    calls: int | None = local()
    outputs: int | None = local()  # per call: as many commitments
    digests: bool | None = local()  # the calls commit by digest (CPU) or by fingerprint (CUDA)

    def check_reply(self, reply: TimeReply) -> None:
        if self.calls is not None:
            count("fingerprints", reply.fingerprints, self.calls)
            count("samples", reply.samples, self.calls)
        if reply.event_us is not None and reply.batch_span_us is None:
            count("event_us", reply.event_us, len(reply.host_us))  # the stream check's pairs
        for i, call in enumerate(reply.fingerprints):
            if self.outputs is not None:
                count(f"fingerprints[{i}]", call, self.outputs)
            if self.digests is not None and any(isinstance(c, str) != self.digests for c in call):
                raise ProtocolError(f"fingerprints[{i}]: expected {'digests' if self.digests else 'fingerprints'}")


@dataclass(frozen=True)
class OutputsReply(Reply):
    outputs: list[list[torch.Tensor]] = wire(list_of(tensors))


@dataclass(frozen=True)
class Outputs(Request):
    """The full outputs of the batch's calls the parent picked, after the batch."""

    op, Reply = "outputs", OutputsReply
    picks: list[int] = wire(ints)

    def check_reply(self, reply: OutputsReply) -> None:
        count("outputs", reply.outputs, len(self.picks))


@dataclass(frozen=True)
class QuietReply(Reply):
    wall_us: float = wire(duration)
    intervals_us: list[float] = wire(durations)


@dataclass(frozen=True)
class Quiet(Request):
    """The reference's look at the GPU before a window: `chunks` spin kernels of `chunk_us`."""

    op, Reply = "quiet", QuietReply
    chunks: int = wire(int_)
    chunk_us: float = wire(duration)

    def check_reply(self, reply: QuietReply) -> None:
        count("intervals_us", reply.intervals_us, self.chunks)


# Housekeeping.
@dataclass(frozen=True)
class GateReply(Reply):
    hooks: list[str] = wire(strs)


@dataclass(frozen=True)
class Gate(Request):
    """Hook the timing of kernel variants (bot.harness.tuning_gate)."""

    op, Reply = "gate", GateReply


@dataclass(frozen=True)
class GateAsk(Message):
    """Inside a gated Run, before its first timing of kernel variants: the worker asks the bot
    for the GPU ("want"); its reply to the Run comes after the bot's GateAnswer."""

    gate: str = wire(str_)


@dataclass(frozen=True)
class GateAnswer(Message):
    gate: str = wire(str_)  # GRANTED: the GPU is the worker's until its reply; anything else refuses

    GRANTED: ClassVar[str] = "granted"


@dataclass(frozen=True)
class Release(Request):
    """Give the GPU memory cached in the worker back."""

    op, Reply = "release", Done


REQUESTS: dict[str, type[Request]] = {
    r.op: r for r in (Hello, Exit, Load, Construct, Run, Fingerprints, Stage, Time, Outputs, Quiet, Gate, Release)
}


def parse_request(message: Any) -> Request:
    """The worker's side: the request a frame carries (ProtocolError if it is none)."""
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a request object, got {type(message).__name__}")
    op = message.get("op")
    kind = REQUESTS.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ProtocolError(f"unknown op {op!r}")
    if kind is Stage and "layout" in message:
        kind = StageInto
    return kind.from_wire({k: v for k, v in message.items() if k != "op"})


def to_wire(reply: Message | dict) -> dict[str, Any]:
    """A handler's reply as the channel carries it (handlers may return plain dicts)."""
    return reply.to_wire() if isinstance(reply, Message) else reply


def serve(handlers: Mapping[str, Callable[[Any], Message | dict]], message: Any) -> dict[str, Any]:
    """The worker's side of one exchange: the request parsed and given to the handler of its
    op; the reply as the channel carries it. A request that does not parse, or that no
    handler serves, is answered with a Failure in phase "protocol"."""
    try:
        request = parse_request(message)
    except ProtocolError as exc:
        return Failure("protocol", str(exc)).to_wire()
    handler = handlers.get(request.op)
    if handler is None:
        return Failure("protocol", f"op {request.op!r} is not served here").to_wire()
    return to_wire(handler(request))


__all__ = [
    "Construct",
    "ConstructReply",
    "Done",
    "Exit",
    "Failure",
    "Fingerprints",
    "FingerprintsReply",
    "Gate",
    "GateAnswer",
    "GateAsk",
    "GateReply",
    "Hello",
    "HelloReply",
    "Load",
    "LoadReply",
    "Message",
    "Outputs",
    "OutputsReply",
    "ProtocolError",
    "Quiet",
    "QuietReply",
    "ReferenceRun",
    "Release",
    "Reply",
    "Request",
    "Run",
    "RunReply",
    "Stage",
    "StageInto",
    "StageReply",
    "Time",
    "TimeReply",
    "parse_request",
    "serve",
    "to_wire",
]
