"""What the harness's own work costs the parent's clock, measured on the trusted reference
worker (`HarnessCost`, `Calibration`), and the reference's look at the GPU after each batch."""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

from bot.core.domain import CheckResult
from bot.core.settings import Device
from bot.engine.timing.hidden import spread
from bot.engine.verification import verify
from bot.engine.workers.client import WorkerClient, ask, parse_reply
from bot.protocol.batches import Outputs, Quiet, Stage, StageInto, Time
from bot.protocol.typed import Request
from bot.sandbox import memory


def timed_exchange(worker: WorkerClient, request: Request, timeout_s: float, phase: str) -> tuple[Any, float]:
    """The reply and the parent's wall time of the exchange (the reply checked after it)."""
    wire = request.to_wire()
    started = time.perf_counter()
    reply = worker.request(wire, timeout_s, phase)
    wall_us = (time.perf_counter() - started) * 1e6
    return parse_reply(worker, request, reply), wall_us


_DTYPE_BYTES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


class Calibration:
    """The expected time of one harness phase around n calls, from batches of calls that do
    nothing: the time of one call's (median of one-call batches) and a part per further call,
    measured once in every round so that a machine that slows down or speeds up moves it too.

    A one-call batch already holds one call's work: a round of n calls adds n - 1 of them to it.
    Divided by n instead, the part per call came out (n - 1) / n of the truth, and a batch of a
    few slow calls was expected to cost up to twice what it did (on tall_matmul's 2.8 ms GPU
    call, 867 us a call too much: the time a contender hid vanished under it)."""

    ROUNDS_KEPT = 3  # the per-call part is the median of the latest rounds' measurements

    def __init__(self, low: bool = False) -> None:
        # `low`: the fastest measurement, not the median, of the singles and the latest rounds.
        # What is subtracted from a contender's samples: a busy moment in a calibration batch
        # (on 2 shared vCPUs, milliseconds) subtracted from every sample after it could take a
        # sample below its real time, a ratio out of bounds; too little subtracted only moves
        # every contender's samples up alike, and a ratio towards 1.
        self.low = low
        self.fixed_us: float | None = None  # a one-call batch
        self.fixed_spread_us = 0.0
        self.per_call_us: list[float] = []  # each round's time per call beyond the first

    def set_fixed(self, singles: Sequence[float]) -> None:
        self.fixed_us = min(singles) if self.low else statistics.median(singles)
        self.fixed_spread_us = spread(singles)

    def add_round(self, n: int, measured_us: float) -> None:
        if n < 2:
            raise ValueError("a calibration round needs two calls at least: one call is the fixed part")
        self.per_call_us.append(max(measured_us - (self.fixed_us or 0.0), 0.0) / (n - 1))

    def of(self, n: int) -> tuple[float, float]:
        """(expected, spread) in us around n calls: as measured in the latest rounds, and how
        much one batch's measurement scatters over the whole run."""
        recent = self.per_call_us[-self.ROUNDS_KEPT :] or [0.0]
        more = max(n - 1, 0)
        return (
            (self.fixed_us or 0.0) + more * (min(recent) if self.low else statistics.median(recent)),
            self.fixed_spread_us + more * spread(self.per_call_us or [0.0]),
        )


class HarnessCost:
    """What the harness's own work around n calls costs the parent's clock, per phase: the
    window (the channel, clocks, L2 flushes, commitments to outputs of this shape: the part of a
    window the calls do not explain) and the staging of the batch's inputs before it. Measured
    on the reference worker with calls that do nothing, so the candidate's process cannot
    inflate it, interleaved with the contenders' batches (Calibration). The window's part does
    not grow with input generation (staged before the window); the staging's part is what
    drawing the inputs costs, so that work a candidate moves into the staging (its answers
    computed there, ahead of the window) is on the parent's clock too."""

    REPEATS = 5
    # On CUDA, a picked call's outputs come back in full up to this size; larger ones are checked
    # by their committed fingerprints alone (gelu's prefill output, 235 MB in bf16, would cross
    # the channel twice a batch, the reference's in float32 besides). On the CPU always.
    FULL_CHECK_BYTES = 64 << 20
    STAGE_BYTES = 1 << 30  # inputs and kept outputs of one batch at most; larger shapes: fewer calls

    def __init__(
        self,
        reference: WorkerClient,
        meta: list[dict],
        per_call_bytes: int,
        mode: str,
        rng: random.Random,
        timeout_s: float,
    ):
        self.reference, self.meta, self.mode, self.rng, self.timeout_s = reference, meta, mode, rng, timeout_s
        self.max_batch = max(1, self.STAGE_BYTES // max(per_call_bytes, 1))
        out_bytes = sum(math.prod(m["shape"]) * _DTYPE_BYTES.get(m["dtype"], 8) for m in meta)
        self.reveals_in_full = reference.device != Device.CUDA or out_bytes <= self.FULL_CHECK_BYTES
        # What a timed call commits to inside the window: its outputs' SHA-256 on the CPU; on
        # CUDA, whose outputs are hashed only through host memory, a fingerprint on the device.
        self.commits_by_digest = reference.device != Device.CUDA
        # The window alone and the staging alone (hidden time), and the whole batch (each sample).
        self.window, self.staging, self.span = Calibration(), Calibration(), Calibration(low=True)
        self._idle_quiet_us: float | None = None
        self._settled_first = False  # the look before the first window, for work the trials left
        # On the CPU the parent fills each batch's inputs from outside (bot.engine.timing.staging) until
        # it cannot; then `staging_note` says why and each worker stages its own.
        self.fills_from_outside = reference.device == Device.CPU and memory.supported()
        self.staging_note = "" if self.fills_from_outside else "inputs staged in each worker"

    QUIET_CHUNKS = 30  # the look at the GPU after each batch on CUDA: longer than a time
    QUIET_CHUNK_US = 100.0  # slice (2.4 ms on an H100), so work left running cannot hide in one

    def gpu_left_busy(self) -> CheckResult | None:
        """On CUDA, with every contender frozen: whether the GPU is the reference's (verify.
        check_gpu_quiet), after waiting out what the look found; None on the CPU."""
        if self.reference.device != Device.CUDA:
            return None
        if self._idle_quiet_us is None:
            self._idle_quiet_us = statistics.median(self._look()[0] for _ in range(3))
        found = verify.check_gpu_quiet(*self._look_against_idle())
        if not found.passed:  # let it drain before the window opens, about 60 ms at most
            for _ in range(20):
                if verify.check_gpu_quiet(*self._look_against_idle()).passed:
                    break
        return found

    def settle_before_first_window(self) -> None:
        """Before the first window: a look, waited out where busy, that blames no one. Every
        later window follows a batch whose contender was looked after (bot.engine.timing.timed_batch)."""
        if not self._settled_first:
            self._settled_first = True
            self.gpu_left_busy()

    def _look_against_idle(self) -> tuple[float, float, list[float]]:
        """A look, against the quickest look so far: work a contender left running (its trials'
        or a batch's) can make a look slower, never quicker, so looks made while such work ran
        cannot set the idle time that later looks are held to."""
        wall_us, gaps = self._look()
        self._idle_quiet_us = min(self._idle_quiet_us or wall_us, wall_us)
        return wall_us, self._idle_quiet_us, gaps

    def _look(self) -> tuple[float, list[float]]:
        reply = ask(
            self.reference, Quiet(chunks=self.QUIET_CHUNKS, chunk_us=self.QUIET_CHUNK_US), self.timeout_s, "problem"
        )
        return float(reply.wall_us), [float(g) for g in reply.intervals_us]

    def stop_filling(self, why: str) -> None:
        self.fills_from_outside, self.staging_note = False, why
        # Staged in the worker from now on: the calibration's staging and span start again so.
        self.window, self.staging, self.span = Calibration(), Calibration(), Calibration(low=True)

    def of(self, n: int) -> tuple[float, float]:
        """(expected, spread) in us of the harness's work in the window around n calls."""
        self._calibrated(n)
        return self.window.of(n)

    def staging_of(self, n: int) -> tuple[float, float]:
        """(expected, spread) in us of staging n calls' inputs."""
        self._calibrated(n)
        return self.staging.of(n)

    def span_of(self, n: int) -> tuple[float, float]:
        """(expected, spread) in us of a whole batch of n calls, staging to reply, that does
        nothing: what a batch's sample leaves out (bot.engine.timing.outside_clock)."""
        self._calibrated(n)
        return self.span.of(n)

    def _calibrated(self, n: int) -> None:
        """The fixed part, and the part per call from one round at least: rounds come among the
        contenders' batches in random order, and a batch costed before the first would be
        charged one call's harness work whatever its calls (docs/verifier.md, "Hidden time")."""
        self._calibrate_fixed()
        if not self.window.per_call_us:
            self.measure_round(n)

    def measure_round(self, n: int) -> None:
        """One batch of n calls that do nothing (two at least): the harness's per-call work in
        this round."""
        self._calibrate_fixed()
        n = max(n, 2)
        window_us, staging_us, span_us = self._stub_batch(n)
        self.window.add_round(n, window_us)
        self.staging.add_round(n, staging_us)
        self.span.add_round(n, span_us)

    def _calibrate_fixed(self) -> None:
        if self.window.fixed_us is None:
            singles = [self._stub_batch(1) for _ in range(self.REPEATS)]
            self.window.set_fixed([w for w, _, _ in singles])
            self.staging.set_fixed([s for _, s, _ in singles])
            self.span.set_fixed([b for _, _, b in singles])

    def _stub_batch(self, n: int) -> tuple[float, float, float]:
        """One calibration batch: the parent's wall time of its window less the calls' reported
        time, of its staging, and of the whole batch from staging to the calls' reply (less the
        calls' reported time too), staged
        as the contenders' batches are (bot.engine.timing.staging): where the parent fills inputs from
        outside, drawn and described, then empty buffers allocated; else drawn."""
        seeds = [self.rng.getrandbits(62) for _ in range(n)]
        started = time.perf_counter()
        stub = Stage(seeds=seeds, stub=True, meta=self.meta, expose=self.fills_from_outside)
        staged, staging_us = timed_exchange(self.reference, stub, self.timeout_s * n, "problem")
        if self.fills_from_outside and staged.layout is not None:
            # The reference's drawing is outside a contender's sample (bot.engine.timing.staging.Staged).
            started = time.perf_counter()
            into = StageInto(layout=staged.layout)
            staging_us = timed_exchange(self.reference, into, self.timeout_s * n, "problem")[1]
        reply, wall_us = timed_exchange(
            self.reference,
            # Naming where outputs lie is the harness's work in the window too (bot.engine.timing.outside_checks).
            Time(fp_seed=1, mode=self.mode, stub=True, outside=self.fills_from_outside, calls=n),
            self.timeout_s * n,
            "problem",
        )
        span_us = (time.perf_counter() - started) * 1e6
        ask(self.reference, Outputs(picks=[]), self.timeout_s, "problem")
        # The do-nothing calls' own time (copies of outputs, as a call allocates and writes its
        # own) is a call's, not the harness's: it stays in the contenders' samples.
        return wall_us - sum(reply.host_us), staging_us, span_us - sum(reply.host_us)
