"""The requests the bot sends a worker and the replies it takes back, as typed messages:
start-up, set-up, checked calls and housekeeping. The timed batches' ops are in
bot.protocol.batches; the worker's side of an exchange (a frame parsed into its request and
served) in bot.protocol.dispatch.

Each request (an op) and each reply is a frozen dataclass with `to_wire()` (the dict the
channel carries) and `from_wire(dict)`, which raises ProtocolError, naming the field, on
anything missing or of the wrong type. A reply is checked against its request too
(`Request.parse_reply`): as many fingerprints as calls timed, as many outputs as picks.

The worker runs in the candidate's process, so every reply is the candidate's to forge: the
parent reads replies only through `parse_reply`, and a malformed one is a clean failure of
that contender, never an exception of the bot. Tensors are held by reference, never copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from bot.protocol.typed import (
    Done,
    Message,
    Reply,
    Request,
    bool_,
    count,
    dict_,
    duration,
    expect,
    finite,
    int_,
    ints,
    list_of,
    one_of,
    optional,
    output_meta,
    prints,
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
    # The reference's, where it runs an oracle: per output, the problem's own result's error
    # against it, [normwise, largest over its row's max] (bot.harness.own_error).
    own_error: list[list[float]] | None = wire(optional(list_of(list_of(finite))), None)
    # The reference's on a GPU (torch.cuda.max_memory_allocated, inputs included): its eager
    # model's peak, and its own with the float64 copies; the scheduler sizes the problem by them.
    native_peak_bytes: int | None = wire(optional(int_), None)
    peak_bytes: int | None = wire(optional(int_), None)
    # The reference's outputs kept in its process for `Judge`, not sent (`Run.send_up_to`).
    kept: bool = wire(bool_, False)
    # A gated call's timings of kernel variants, by the worker's own account (bot.harness.
    # tuning_gate): [first began, last ended, how many], seconds from the call's start. Quoted
    # in a progress note only; never a verdict or a time.
    tuning: list[float] | None = wire(optional(list_of(finite)), None)


@dataclass(frozen=True)
class Run(Request):
    op, Reply = "run", RunReply
    seed: int = wire(int_)  # also names the inputs' distribution (bot.core.distributions.seed_for)
    gate: bool = wire(bool_, False)  # a gated trial: timing of kernel variants asks for the GPU
    want: str | None = wire(one_of(*WANTS), None)  # None: a full trial (inputs hashed too)
    fp_seed: int | None = wire(optional(int_), None)
    # The reference's: call the problem's own Model a second time on the same inputs, and fail
    # the problem where the answers differ (bot.harness.checked, Checked._reference_run).
    repeat: bool = wire(bool_, False)
    # The reference's: send its outputs where they take at most this many bytes, else keep them
    # for `Judge` (None: always send).
    send_up_to: int | None = wire(optional(int_), None)
    # A contender's: write the outputs into the blocks lent with this request (their sizes, in
    # order; the descriptors travel with it) instead of sending them (bot.harness.blocks).
    into: list[int] | None = wire(optional(ints), None)

    def validate(self) -> None:
        expect(
            self.want not in ("fingerprint", "both") or self.fp_seed is not None,
            f"Run: want={self.want!r} needs fp_seed",
        )

    def check_reply(self, reply: RunReply) -> None:
        answered = all(m["type"] == "Tensor" for m in reply.meta)  # else the parent fails its structure
        if self.want in ("fingerprint", "both") and answered:
            count("fingerprints", reply.fingerprints, len(reply.meta))
        if self.want != "fingerprint" and answered and self.into is None and not reply.kept:
            count("outputs", reply.outputs, len(reply.meta))
        if self.want is None:
            expect(reply.inputs_after is not None, "missing field 'inputs_after'")
            count("inputs_after", reply.inputs_after, len(reply.inputs_before))
            expect(reply.new_threads is not None, "missing field 'new_threads'")
        if reply.tuning is not None:
            expect(len(reply.tuning) == 3, "tuning: three figures")


@dataclass(frozen=True)
class ReferenceRun(Run):
    """A full trial of the reference: its reply also sizes the shape."""

    def check_reply(self, reply: RunReply) -> None:
        if not reply.kept:
            count("outputs", reply.outputs, len(reply.meta))
        expect(reply.bytes is not None, "missing field 'bytes'")
        expect(reply.input_meta is not None, "missing field 'input_meta'")
        if reply.own_error is not None:
            count("own_error", reply.own_error, len(reply.meta))
            expect(all(len(e) == 2 for e in reply.own_error), "own_error: two figures per output")


@dataclass(frozen=True)
class FingerprintsReply(Reply):
    fingerprints: list = wire(list_of(optional(prints)))
    outputs: list = wire(list_of(optional(tensors)))


@dataclass(frozen=True)
class Fingerprints(Request):
    """The reference's fingerprints and outputs for the timed calls the parent picked."""

    op, Reply = "fingerprints", FingerprintsReply
    seeds: list[int] = wire(ints)
    fp_seed: int = wire(int_)
    want: str = wire(one_of("outputs", "fingerprint", "both"), "both")

    def check_reply(self, reply: FingerprintsReply) -> None:
        count("fingerprints", reply.fingerprints, len(self.seeds))
        count("outputs", reply.outputs, len(self.seeds))
        if self.want != "outputs":
            expect(None not in reply.fingerprints, "fingerprints: one is missing")
        if self.want != "fingerprint":
            expect(None not in reply.outputs, "outputs: one is missing")


# Outputs compared where they lie: blocks the reference lends for one contender call, and its
# verdict on what the contender wrote there (bot.harness.blocks, bot.harness.judge).
@dataclass(frozen=True)
class LendReply(Reply):
    token: str = wire(str_)
    sizes: list[int] = wire(ints)  # bytes of each output's block; their descriptors come with it


@dataclass(frozen=True)
class Lend(Request):
    """Blocks for the outputs the reference keeps (its latest `Run` that kept them); with
    `alone`, those outputs are kept for these blocks only (a timed call's: no other contender
    call is compared with them), and go once they are judged."""

    op, Reply = "lend", LendReply
    alone: bool = wire(bool_, False)


@dataclass(frozen=True)
class JudgeReply(Reply):
    results: list[dict] = wire(list_of(dict_))  # per output compared: a CheckResult's to_json()


@dataclass(frozen=True)
class Judge(Request):
    """Compare the blocks lent as `token` with the kept outputs, each by its rule (None: the
    dtype's default; bot.core.tolerance.rule_to_wire), then free them; with
    `compare` False only free them."""

    op, Reply = "judge", JudgeReply
    token: str = wire(str_)
    rules: list = wire(list_of(optional(dict_)), default_factory=list)
    labels: list[str] = wire(strs, default_factory=list)
    compare: bool = wire(bool_, True)

    def validate(self) -> None:
        expect(len(self.rules) == len(self.labels), "Judge: one label per rule")

    def check_reply(self, reply: JudgeReply) -> None:
        count("results", reply.results, len(self.rules) if self.compare else 0)


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


__all__ = [
    "Construct",
    "ConstructReply",
    "Exit",
    "Fingerprints",
    "FingerprintsReply",
    "Gate",
    "GateAnswer",
    "GateAsk",
    "GateReply",
    "Hello",
    "HelloReply",
    "Judge",
    "JudgeReply",
    "Lend",
    "LendReply",
    "Load",
    "LoadReply",
    "ReferenceRun",
    "Release",
    "Run",
    "RunReply",
]
