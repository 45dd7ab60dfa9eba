"""The timed batches' requests and replies (bot.protocol.messages has the others): a batch's
inputs staged in the worker, or empty buffers the parent fills from outside; the staged calls
timed, each committing to its outputs inside the parent's window; the outputs of the calls the
parent picked revealed after it; and the reference's look at the GPU after a batch.

Every reply is checked against its request (`Request.parse_reply`) before the parent reads
it: as many commitments as calls timed, as many outputs as picks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bot.protocol.typed import (
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
    seeds: list[int] = wire(ints)  # each also names its call's distribution (seed_for)
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
    # With `outside`: per call, per output, [address, bytes spanned] and its strides.
    regions: list | None = wire(optional(regions), None)
    strides: list | None = wire(optional(list_of(list_of(ints))), None)
    # The worker's own time for the whole op, from its request to its reply: where the parent's
    # window goes (a diagnostic, the candidate's word: never a time or a verdict).
    op_us: float | None = wire(optional(duration), None)

    @property
    def samples(self) -> list[float]:
        """Per call: the time the parent records."""
        if self.samples_us:
            return self.samples_us
        return self.event_us if self.event_us is not None else self.host_us


@dataclass(frozen=True)
class Time(Request):
    """The staged batch timed (`mode`: "latency", "throughput" or "graph" on CUDA); `stub`:
    the reference's calibration; `outside`: each call names where its outputs lie, for the
    parent to read them from outside (bot.harness.held). `calls`, the parent's own count of
    the staged calls, checks the reply."""

    op, Reply = "time", TimeReply
    fp_seed: int = wire(int_)
    mode: str = wire(one_of("latency", "throughput", "graph"), "latency")
    stub: bool = wire(bool_, False)
    outside: bool = wire(bool_, False)
    # The calls commit by digest (the CPU) or by fingerprint (CUDA); None: as the worker's
    # device has it (the reference's calibration batches).
    digests: bool | None = wire(optional(bool_), None)
    calls: int | None = local()
    outputs: int | None = local()  # per call: as many commitments

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
        if self.outside:
            count("regions", reply.regions, len(reply.fingerprints))
            count("strides", reply.strides, len(reply.fingerprints))
            for i, (spans, strides) in enumerate(zip(reply.regions, reply.strides)):
                count(f"regions[{i}]", spans, len(reply.fingerprints[i]))
                count(f"strides[{i}]", strides, len(reply.fingerprints[i]))


@dataclass(frozen=True)
class OutputsReply(Reply):
    outputs: list[list[torch.Tensor]] = wire(list_of(tensors))


@dataclass(frozen=True)
class Outputs(Request):
    """The full outputs of the batch's calls the parent picked, after the batch; then the
    worker holds the outputs of its last `hold_calls` timed calls (bot.harness.held). With
    `into`, each pick's outputs are written into blocks the reference lent instead of sent
    (their sizes, pick after pick; the descriptors travel with the request): their replies
    are empty."""

    op, Reply = "outputs", OutputsReply
    picks: list[int] = wire(ints)
    hold_calls: int = wire(int_, 0)
    into: list[int] | None = wire(optional(ints), None)

    def check_reply(self, reply: OutputsReply) -> None:
        count("outputs", reply.outputs, len(self.picks))
        if self.into is not None:
            expect(all(not call for call in reply.outputs), "outputs: written into lent blocks, yet sent")


@dataclass(frozen=True)
class QuietReply(Reply):
    wall_us: float = wire(duration)
    intervals_us: list[float] = wire(durations)


@dataclass(frozen=True)
class Quiet(Request):
    """The reference's look at the GPU after a batch: `chunks` spin kernels of `chunk_us`."""

    op, Reply = "quiet", QuietReply
    chunks: int = wire(int_)
    chunk_us: float = wire(duration)

    def check_reply(self, reply: QuietReply) -> None:
        count("intervals_us", reply.intervals_us, self.chunks)


__all__ = [
    "Outputs",
    "OutputsReply",
    "Quiet",
    "QuietReply",
    "Stage",
    "StageInto",
    "StageReply",
    "Time",
    "TimeReply",
]
