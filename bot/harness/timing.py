"""The harness's timed calls (op "time"): calls one by one ("latency"), back to back
("throughput") and as CUDA-graph replays ("graph"), each on fresh inputs with the L2 flushed
before it on CUDA, every output fingerprinted for the parent to check.

A part of bot.harness.worker.Harness, kept apart for size: the harness supplies the model, its device,
the inputs drawn from a seed (`_inputs`), the fingerprints (`_fingerprints`,
`_fingerprint_tensors`, bot/harness/checked.py) and the thread listing (`_new_threads`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from bot.core.memory import FLUSH_BYTES
from bot.core.settings import Device, TimingMode
from bot.harness import held, shared
from bot.protocol.batches import Quiet, QuietReply, Time, TimeReply
from bot.protocol.typed import Failure

# Mode "graph" replays several captured copies of a call in turn, each with its own input and
# output tensors: a few-us kernel's replay time depends on where its tensors lie
# (docs/benchmark.md), so one copy per worker would make a run's median hang on one
# placement. (A per-process offset remains, with or without an L2 flush: bot.engine.timing.interleaved times each
# contender in more than one worker for that.) As many copies as fit in GRAPH_SETS_BYTES, at
# most GRAPH_SETS_MAX.
GRAPH_SETS_MAX = 32
GRAPH_SETS_BYTES = 64 << 20
LAUNCHES_KEPT = 64  # mode "graph": the replays whose launch times set the spin before each


class TimedCalls:
    """The timing ops; the state they keep lives on the harness (see bot.harness.worker.Harness)."""

    device: str
    model: Any
    flush_buf: torch.Tensor | None  # allocated at the first timed call on CUDA
    captured: Rotation | None  # mode "graph": this shape's captured calls
    replays: int  # mode "graph": which captured copy replays next
    cycles_per_us: float | None  # the GPU spin kernel's clock, measured once
    launch_us: deque[float]  # mode "graph": the host's latest times to record and launch a replay

    def op_time(self, msg: Time) -> dict:
        """Timed calls on the inputs staged by op "stage", L2 flushed before each on CUDA.

        Warm-up calls are made by the parent with this same op, so a candidate cannot tell
        warm-up from measurement. After its timed region, every call commits to its outputs
        (their digest on the CPU, a fingerprint on CUDA: a call that skipped its work cannot
        commit to the right answer without doing it, inside the parent's window) and keeps
        them, so that the parent can pick calls after the batch and check them in full
        (op "outputs").

        On CUDA, mode "latency" synchronises the device before each call: a call's time is
        its host-side launch path and its GPU work back to back, as for one request on an
        idle GPU. Mode "throughput" times back-to-back calls with no synchronisation between
        them (L2 flush and fingerprints are enqueued on the stream): host work overlaps the
        GPU's, as in a pipelined loop, and counts only where it is the slower. Mode "graph"
        captures one call in a CUDA graph and times its replays: the GPU's time alone, as a
        serving engine that replays its decode step as a graph pays it. With "stub", the
        reference's calibration: the same work around calls that do nothing (bot.engine.timing.interleaved).
        """
        started = shared.perf_ns()
        reply = self._timed_calls(msg)
        if "host_us" in reply:
            reply["op_us"] = (shared.perf_ns() - started) / 1e3
        return reply

    def _timed_calls(self, msg: Time) -> dict:
        cuda = self.device == Device.CUDA
        digests = not cuda if msg.digests is None else msg.digests
        if self.staged is None:
            return Failure("protocol", "no staged inputs to time").to_wire()
        if cuda and self.flush_buf is None:
            # Here, not at start-up: a worker that is never timed (rejected in verification)
            # does not hold 256 MB of the GPU that other workers need.
            try:
                self.flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
            except BaseException as exc:  # out of memory: reported, and retried alone
                return shared.failure("call", exc)
        model = self._stub if msg.stub else self.model
        if cuda and msg.mode == TimingMode.THROUGHPUT:
            return self._time_back_to_back(msg, model)
        if cuda and msg.mode == TimingMode.GRAPH:
            return self._time_graph_replays(msg, model)
        host, event, prints, spans, strides = [], [], [], [], []
        try:
            for inputs in self.staged:
                with torch.no_grad():
                    if cuda:
                        shared.flush_l2(self.flush_buf)
                        e0, e1 = shared.Event(enable_timing=True), shared.Event(enable_timing=True)
                        shared.cuda_sync()
                        t0 = shared.perf_ns()
                        shared.ev_record(e0)
                        result = model(*inputs)
                        shared.ev_record(e1)
                        shared.cuda_sync()  # device-wide: waits for work on every stream
                        host.append((shared.perf_ns() - t0) / 1e3)
                        event.append(shared.ev_elapsed(e0, e1) * 1e3)
                    else:
                        t0 = shared.perf_ns()
                        result = model(*inputs)
                        host.append((shared.perf_ns() - t0) / 1e3)
                outputs = shared.as_outputs(result)
                if (wrong := shared.not_tensors(outputs)) is not None:
                    return wrong
                # The commitment, as the parent asks: on CUDA a projection computed on the device
                # (no copy to the host); on the CPU the outputs' digest, exact and a third of the
                # cost (46 us against 148 us for a 64x512 bf16 output).
                prints.append(
                    [shared.hash_tensor(o) for o in outputs] if digests else self._fingerprints(outputs, msg.fp_seed)
                )
                if msg.outside:
                    where = held.where(outputs)
                    spans.append(where[0])
                    strides.append(where[1])
                self.kept.append(outputs)
                del result, outputs
        except BaseException as exc:
            return shared.failure("call", exc)
        return TimeReply(
            host_us=host,
            event_us=event if cuda else None,
            fingerprints=prints,
            new_threads=self._new_threads(),
            regions=spans if msg.outside else None,
            strides=strides if msg.outside else None,
        ).to_wire()

    def _stub(self, *inputs: Any) -> list[torch.Tensor]:
        # Fresh outputs per call, as a real call's: committing to memory just written costs
        # what it costs a contender (the same tensor each time ran 20 us a call cheaper on CPU).
        return [shared.clone(o) for o in self.stub_outputs or []]

    def _time_back_to_back(self, msg: Time, model: Callable[..., Any]) -> dict:
        """Mode "throughput" (see op_time). The stream check moves to the whole batch: the
        device-synchronised wall time of the batch against its event span on this stream."""

        def call(inputs: list[Any]) -> tuple | dict:
            with torch.no_grad():
                shared.flush_l2(self.flush_buf)
                e0, e1 = shared.Event(enable_timing=True), shared.Event(enable_timing=True)
                h0 = shared.perf_ns()
                shared.ev_record(e0)
                result = model(*inputs)
                shared.ev_record(e1)
                enqueue_us = (shared.perf_ns() - h0) / 1e3
            outputs = shared.as_outputs(result)
            if (wrong := shared.not_tensors(outputs)) is not None:
                return wrong
            return (e0, e1), outputs, enqueue_us

        batch = self._enqueued_batch(msg, call)
        if isinstance(batch, dict):
            return batch
        reply, enqueue_us = batch
        # A call costs at least the host's time to issue it: where the GPU was still busy with
        # earlier work when the call began, its event span shows only its GPU time and would
        # hide a slow launch path (on the H200 that made one kernel's launch-bound time move 2x).
        return replace(reply, samples_us=[max(e, h) for e, h in zip(reply.event_us, enqueue_us)]).to_wire()

    def _time_graph_replays(self, msg: Time, model: Callable[..., Any]) -> dict:
        """Mode "graph" (see op_time). Each call's fresh inputs are copied into the captured
        call's input tensors, the L2 flushed, and the replay timed by events. A spin kernel
        queued before each replay keeps the GPU busy while the host records and launches, so
        the host's launch path never lands between the events. Only GPU work captured in the
        graph is replayed: a candidate that computed on the host or on a stream outside the
        capture returns stale outputs on fresh inputs, which the fingerprints expose."""
        try:
            rotation = self._capture(self.staged[0], model)
        except BaseException as exc:
            failure = shared.failure("call", exc)
            failure["error"] = "CUDA graph capture for --timing graph failed: " + failure["error"]
            return failure
        try:
            cycles_per_us = self._gpu_cycles_per_us()
        except BaseException as exc:
            return shared.failure("call", exc)
        # The spin before each replay covers the host's time to record and launch it: twice its
        # median over the latest replays, fixed for the batch. Not the batch's slowest launch so
        # far: one hiccup of the host (a page fault, a preempted vCPU) would lengthen every later
        # call's spin, by a different amount in each batch and worker, and that spin is in the
        # parent's window (hidden time), not in the sample.
        cover_us = _launch_cover_us(self.launch_us)

        def replay(inputs: list[Any]) -> tuple:
            captured = rotation.sets[self.replays % len(rotation.sets)]
            self.replays += 1
            for static, fresh in zip(captured.inputs, inputs):
                if shared.is_tensor(static):
                    shared.copy_(static, fresh)
            shared.flush_l2(self.flush_buf)
            shared.gpu_sleep(int(cover_us * cycles_per_us))
            e0, e1 = shared.Event(enable_timing=True), shared.Event(enable_timing=True)
            h0 = shared.perf_ns()
            shared.ev_record(e0)
            shared.graph_replay(captured.graph)
            shared.ev_record(e1)
            enqueue_us = (shared.perf_ns() - h0) / 1e3
            self.launch_us.append(enqueue_us)
            # The captured copy's outputs are overwritten when it replays again: a copy is kept.
            return (e0, e1), [shared.clone(o) for o in captured.outputs], enqueue_us

        batch = self._enqueued_batch(msg, replay)
        if isinstance(batch, dict):
            return batch
        reply, _ = batch
        return replace(reply, samples_us=reply.event_us, graph_copies=len(rotation.sets)).to_wire()

    def _enqueued_batch(
        self, msg: Time, enqueue: Callable[[list[Any]], tuple | dict]
    ) -> tuple[TimeReply, list[float]] | dict:
        """What both unsynchronised modes share: per seed, `enqueue(inputs)` puts one call on
        the stream between its own events and returns (events, outputs, host µs to enqueue),
        or a failure reply; fingerprints stay on the device; one device-wide synchronise ends
        the batch, whose host time and event span make the stream check's one pair. The
        reply, and each call's host time to enqueue it; or a failure reply."""
        event_pairs, print_tensors, enqueue_us = [], [], []
        try:
            begin, end = shared.Event(enable_timing=True), shared.Event(enable_timing=True)
            shared.cuda_sync()
            t0 = shared.perf_ns()
            shared.ev_record(begin)
            for inputs in self.staged:
                called = enqueue(inputs)
                if isinstance(called, dict):
                    return called
                pair, outputs, host_us = called
                print_tensors.append(self._fingerprint_tensors(outputs, msg.fp_seed))
                self.kept.append(outputs)
                event_pairs.append(pair)
                enqueue_us.append(host_us)
                del inputs, outputs, called
            shared.ev_record(end)
            shared.cuda_sync()  # device-wide: waits for work on every stream
            batch_host = (shared.perf_ns() - t0) / 1e3
            event = [shared.ev_elapsed(e0, e1) * 1e3 for e0, e1 in event_pairs]
            batch_span = shared.ev_elapsed(begin, end) * 1e3
            prints = [[t.tolist() for t in call] for call in print_tensors]
        except BaseException as exc:
            return shared.failure("call", exc)
        return TimeReply(
            host_us=[batch_host],
            event_us=event,
            fingerprints=prints,
            new_threads=self._new_threads(),
            batch_span_us=batch_span,
        ), enqueue_us

    def _capture(self, inputs: list[Any], model: Callable[..., Any]) -> Rotation:
        """This input signature's call, captured once per copy of the rotation (see
        GRAPH_SETS_MAX); another signature replaces them, so one shape's graphs are held at
        a time. The first copy's footprint (its tensors, or the memory its capture reserved,
        whichever is larger) decides how many copies fit."""
        signature = tuple((tuple(x.shape), x.dtype) if shared.is_tensor(x) else repr(x) for x in inputs)
        signature = (signature, model is self.model)
        if self.captured is not None and self.captured.signature == signature:
            return self.captured
        self.captured = None
        shared.cuda_sync()
        torch.cuda.empty_cache()
        reserved = _memory_reserved()
        first = self._capture_copy(inputs, model, warm_ups=3)
        footprint = max(_tensor_bytes([*first.inputs, *first.outputs]), _memory_reserved() - reserved, 1)
        copies = [first]
        while len(copies) < min(GRAPH_SETS_MAX, GRAPH_SETS_BYTES // footprint):
            copies.append(self._capture_copy(inputs, model, warm_ups=1))
        self.captured = Rotation(signature, tuple(copies))
        return self.captured

    def _capture_copy(self, inputs: list[Any], model: Callable[..., Any], warm_ups: int) -> Captured:
        """One capture on input tensors of its own (warm-up calls on a side stream first, as
        CUDA graph capture requires); its outputs live in the graph's own memory pool."""
        static = [shared.clone(x) if shared.is_tensor(x) else x for x in inputs]
        side = shared.Stream()
        side.wait_stream(shared.current_stream())
        with torch.no_grad(), shared.stream_ctx(side):
            for _ in range(warm_ups):
                model(*static)
        shared.current_stream().wait_stream(side)
        shared.cuda_sync()
        graph = shared.CUDAGraph()
        with torch.no_grad(), shared.graph_capture(graph):
            result = model(*static)
        outputs = shared.as_outputs(result)
        if (wrong := shared.not_tensors(outputs)) is not None:
            raise TypeError(wrong["error"])
        # The first launch of a graph uploads it to the device (several times a launch's host
        # time): done here, so that no timed replay pays it and no spin is sized by it.
        shared.graph_replay(graph)
        shared.cuda_sync()
        return Captured(graph, static, outputs)

    def op_quiet(self, msg: Quiet) -> dict:
        """The reference's look at the GPU right after a contender's batch (bot.engine.timing.harness_cost,
        `HarnessCost.gpu_left_busy`): a row of short spin kernels with an event between each,
        and the host's time for the whole row. Another process's work still on the GPU makes
        the row wait for a time slice, before it starts or between its kernels."""
        try:
            shared.cuda_sync()
            cycles = int(msg.chunk_us * self._gpu_cycles_per_us())
            events = [shared.Event(enable_timing=True) for _ in range(msg.chunks + 1)]
            t0 = shared.perf_ns()
            shared.ev_record(events[0])
            for event in events[1:]:
                shared.gpu_sleep(cycles)
                shared.ev_record(event)
            shared.cuda_sync()
            wall_us = (shared.perf_ns() - t0) / 1e3
            gaps = [shared.ev_elapsed(a, b) * 1e3 for a, b in zip(events, events[1:])]
        except BaseException as exc:
            return shared.failure("call", exc)
        return QuietReply(wall_us=wall_us, intervals_us=gaps).to_wire()

    def _gpu_cycles_per_us(self) -> float:
        """The spin kernel counts clock cycles; how many make a microsecond, measured once: the
        fastest of three spins after one that lets the clock ramp up. Sized by a single spin, one
        reference's looks on an H100 lasted 570 us, another's 2.1 ms (both asked for 3 ms): the
        first, shorter than the time slice a look must outlast, could miss work left running.
        Spins sized from the fastest run longer, never shorter, wherever the clock is lower."""
        if self.cycles_per_us is None:
            shared.gpu_sleep(20_000_000)
            rates = []
            for _ in range(3):
                e0, e1 = shared.Event(enable_timing=True), shared.Event(enable_timing=True)
                shared.ev_record(e0)
                shared.gpu_sleep(2_000_000)
                shared.ev_record(e1)
                shared.cuda_sync()
                rates.append(2_000_000 / max(shared.ev_elapsed(e0, e1) * 1e3, 1.0))
            self.cycles_per_us = max(rates)
        return self.cycles_per_us


@dataclass(frozen=True)
class Captured:
    graph: Any  # torch.cuda.CUDAGraph
    inputs: list[Any]  # the tensors the graph reads: each call's inputs are copied in
    outputs: list[torch.Tensor]  # the tensors the graph writes


@dataclass(frozen=True)
class Rotation:
    signature: tuple  # the input shapes and dtypes these copies were captured for
    sets: tuple[Captured, ...]  # replayed in turn


def _launch_cover_us(launches: Sequence[float]) -> float:
    """The spin before each replay: twice the median launch, 50 us to 5 ms."""
    if not launches:
        return 50.0
    ordered = sorted(launches)
    return min(max(2 * ordered[len(ordered) // 2], 50.0), 5000.0)


def _tensor_bytes(values: list[Any]) -> int:
    return sum(shared.numel(x) * x.element_size() for x in values if shared.is_tensor(x))


def _memory_reserved() -> int:
    return shared.cuda_reserved() if shared.cuda_available() else 0
