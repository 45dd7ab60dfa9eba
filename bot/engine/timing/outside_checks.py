"""Every timed call's outputs and inputs checked from outside the candidate's process (CPU).

After a timed batch the parent reads, with process_vm_readv
(bot.sandbox.memory), the memory where each call named its outputs and where the parent
itself wrote the batch's inputs. It checks there, by its own code:

- the inputs are byte for byte what the parent wrote into them when it staged the batch;
- each output's bytes are those the call committed to by digest inside the parent's window
  (bytes written after the window cannot match a digest sent before it), for
  DIGESTS_PER_BATCH calls of each batch the parent chooses after it;
- no output lies in the memory of another output of the batch, of an input, or of an output
  of the last `hold_calls` timed calls, which the worker holds across batches like a caller
  that keeps its results (bot.harness.held): an output ring or a shared output buffer is seen
  however many batches it spans, up to the calls held (HOLD_BYTES of outputs);
- every output against the reference's for the same seed: the calls the parent picked
  elementwise in full, the others by a projection on a secret random vector that only the
  parent and the trusted reference worker know (bot.engine.verification.compare.compare_fingerprints).

Nothing here runs in the candidate's process; what the worker says (where its outputs lie)
is only where to look.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import math
import random
import time
import weakref
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from bot.core.domain import CheckResult
from bot.core.tolerance import Rule
from bot.engine.timing.harness_cost import HarnessCost
from bot.engine.verification.compare import REUSED_OUTPUT, compare_fingerprints, compare_outputs
from bot.engine.workers.client import WorkerClient, ask
from bot.protocol import measures
from bot.protocol.batches import TimeReply
from bot.protocol.messages import Fingerprints
from bot.sandbox import memory


class RunView(Protocol):
    """What these checks read of a shape's timing run. bot.engine.timing.batch_run.Run holds the checks
    and answers to this; declared here, the two modules need not import each other."""

    @property
    def reference(self) -> WorkerClient: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def dtypes(self) -> list[str]: ...
    @property
    def rules(self) -> Sequence[Rule | None]: ...
    @property
    def call_timeout_s(self) -> float: ...
    @property
    def harness(self) -> HarnessCost: ...


# The outputs a worker holds across batches, at most: with scale_add's 32 KiB outputs the last
# 8192 timed calls, more than a whole timing phase makes; with a 64 MiB output the last 4.
HOLD_BYTES = 256 << 20
STACK_BYTES = 64 << 20  # float64 outputs projected in one product, at most
# Calls per batch whose bytes the parent hashes against their in-window digests, chosen after
# the batch: hashing all cost the parent as much as the worker's own commitments (70 µs per
# 32 KiB output, 3.5 ms per 50-call scale_add batch). A candidate that finishes a fraction f of
# its calls after the window escapes a batch with probability (1 - f)^8: f = 0.25, 0.10; over
# the 7 batches every contender has at least, 10^-7.
DIGESTS_PER_BATCH = 8
ALIASING, INPUTS, OUTPUTS = "timed-call aliasing", "timed-call inputs", "timed-call outputs"

Span = tuple[int, int]  # [start, end) of an output's bytes in the worker's address space


class HeldRegions:
    """The parent's account of where the outputs a worker holds lie (disjoint spans), each with
    the number of the timed call that returned it."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.owner: dict[int, tuple[int, int]] = {}  # start -> (end, call number)
        self.calls: deque[tuple[int, list[Span]]] = deque()
        self.seen = 0  # timed calls of this worker so far

    def find(self, start: int, end: int) -> int | None:
        """The call whose held output overlaps [start, end), if any."""
        i = bisect.bisect_right(self.starts, start)
        for j in (i - 1, i):
            if 0 <= j < len(self.starts):
                s = self.starts[j]
                e, call = self.owner[s]
                if s < end and start < e:
                    return call
        return None

    def add(self, call: int, spans: list[Span]) -> None:
        for s, e in spans:
            bisect.insort(self.starts, s)
            self.owner[s] = (e, call)
        self.calls.append((call, spans))

    def trim(self, last: int) -> None:
        """Forget all but the last `last` calls, as the worker does (bot.harness.held.Held)."""
        while len(self.calls) > last:
            _, spans = self.calls.popleft()
            for s, _ in spans:
                del self.owner[s]
                self.starts.pop(bisect.bisect_left(self.starts, s))


@dataclass
class OutsideChecks:
    """One timing run's outside checks: the secret projection seed, and per worker the outputs
    it holds. `seconds`: the parent's own time in them (reads, digests, projections,
    comparisons), `reference_s`: the reference's, answering for every timed call."""

    secret: int | None = None
    # By the worker itself, not its id(): a retired worker's id can come back as a new replica's.
    held: weakref.WeakKeyDictionary[WorkerClient, HeldRegions] = field(default_factory=weakref.WeakKeyDictionary)
    weights: dict[tuple, torch.Tensor] = field(default_factory=dict)
    seconds: float = 0.0
    reference_s: float = 0.0

    def hold_calls(self, meta: Sequence[dict]) -> int:
        """How many of its latest timed calls' outputs a worker holds: HOLD_BYTES' worth."""
        per_call = sum(math.prod(m["shape"]) * _itemsize(m["dtype"]) for m in meta)
        return max(1, HOLD_BYTES // max(per_call, 1))

    def read(self, run: RunView, worker: WorkerClient, reply: TimeReply, filled: tuple[list, list]) -> Batch:
        """The batch's outputs and inputs read from outside the worker, and what that found."""
        with _one_thread():
            return self._read(run, worker, reply, filled)

    def _read(self, run: RunView, worker: WorkerClient, reply: TimeReply, filled: tuple[list, list]) -> Batch:
        started = time.perf_counter()
        held = self.held.setdefault(worker, HeldRegions())
        first = held.seen + 1
        batch = Batch(first, [], [])
        meta = run.harness.meta
        try:
            spans = _output_spans(reply, meta, first)
        except _Refused as exc:
            batch.failed.append(CheckResult(OUTPUTS, False, str(exc)))
            return batch
        batch.failed.extend(_aliasing(spans, filled[1], held, first, self.hold_calls(meta)))
        held.seen += len(spans)
        # Not frozen: whatever the worker writes now can only fail it. Its outputs are bound to
        # the digests sent inside the window, its inputs to the reference's bytes.
        try:
            mine = memory.read(worker.running.pid or 0, [tuple(r) for call in filled[1] for r in call])
            raw = memory.read(worker.running.pid or 0, [s for call in spans for s in call])
        except (memory.MemoryCopyError, PermissionError) as exc:
            batch.failed.append(CheckResult(OUTPUTS, False, f"the parent could not read the batch from outside: {exc}"))
            return batch
        batch.failed.extend(_inputs_unchanged(mine, filled[0], filled[1], first))
        batch.outputs = _as_tensors(raw, reply, meta)
        bound = set(run.rng.sample(range(len(spans)), min(len(spans), DIGESTS_PER_BATCH)))
        batch.failed.extend(_committed(batch.outputs, raw, reply, first, bound))
        if not batch.failed:  # held spans stay disjoint: a failed batch ends its contender
            for i, call in enumerate(spans):
                held.add(first + i, [(a, a + n) for a, n in call if n])
            held.trim(self.hold_calls(meta))
        self.seconds += time.perf_counter() - started
        return batch

    def against_reference(
        self, run: RunView, seeds: Sequence[int], picked: Sequence[int], batch: Batch, label: str
    ) -> list[CheckResult]:
        """Every output of the batch against the reference's for its seed: the picked calls in
        full, the others by their projections on the parent's secret vectors."""
        with _one_thread():
            return self._against_reference(run, seeds, picked, batch, label)

    def _against_reference(
        self, run: RunView, seeds: Sequence[int], picked: Sequence[int], batch: Batch, label: str
    ) -> list[CheckResult]:
        if self.secret is None:
            self.secret = run.rng.getrandbits(40)
        dtypes, rules, results = run.dtypes, run.rules, []
        rest = [i for i in range(len(seeds)) if i not in picked]
        timeout_s = run.call_timeout_s * 20 * max(len(seeds), 1)
        for group, want in ((list(picked), "outputs"), (rest, "fingerprint")):
            if not group:
                continue
            started = time.perf_counter()
            request = Fingerprints(seeds=[seeds[i] for i in group], fp_seed=self.secret, want=want)
            ref = ask(run.reference, request, timeout_s, "problem")
            began = time.perf_counter()
            self.reference_s += began - started
            if want == "outputs":
                for n, i in enumerate(group):
                    call = f"{label}, timed call {batch.first + i}"
                    results.extend(compare_outputs(ref.outputs[n], batch.outputs[i], dtypes, rules, call))
            else:
                prints = self._fingerprints([batch.outputs[i] for i in group])
                found = [
                    compare_fingerprints(r, p, dtypes, rules, f"{label}, timed call {batch.first + i}")
                    for r, p, i in zip(ref.fingerprints, prints, group)
                ]
                results.extend([c for c in found if not c.passed] or found[:1])  # one line per batch passed
            self.seconds += time.perf_counter() - began
        return results

    def _fingerprints(self, calls: list[list[torch.Tensor]]) -> list[list[list[float]]]:
        """Per call, per output: (projection on the secret vector, norm, non-finite count), the
        calls' outputs of one index converted and projected together (one matrix-vector
        product, STACK_BYTES of float64 at a time): per call, the parent's work on scale_add's
        32 KiB outputs is then a few µs beside the window's 300 µs."""
        prints: list[list[list[float]]] = [[] for _ in calls]
        for j in range(len(calls[0]) if calls else 0):
            column = [call[j] for call in calls]
            w = self._weights(j, tuple(column[0].shape))
            if column[0].numel() > w.numel():  # projected chunk by chunk (measures.FP_CHUNK)
                for n, t in enumerate(column):
                    prints[n].append([float(v) for v in measures.fingerprint(t, w).tolist()])
                continue
            step = max(1, STACK_BYTES // max(8 * column[0].numel(), 1))
            for k in range(0, len(column), step):
                part = column[k : k + step]
                x = torch.stack([t.reshape(-1) for t in part]).to(torch.float64)
                norms = torch.linalg.vector_norm(x, dim=1).tolist()
                projections = (x @ w.reshape(-1)).tolist()
                for n, (t, p, norm) in enumerate(zip(part, projections, norms)):
                    # A finite norm: every value finite, as the harness's form would count them.
                    exact = [p, norm, 0.0] if math.isfinite(norm) else measures.fingerprint(t, w).tolist()
                    prints[k + n].append([float(v) for v in exact])
        return prints

    def _weights(self, j: int, shape: tuple[int, ...]) -> torch.Tensor:
        key = (j, shape)
        w = self.weights.get(key)
        if w is None:
            if len(self.weights) >= 4:  # a few output sizes at a time: bounded memory
                self.weights.clear()
            w = self.weights[key] = measures.fingerprint_weights(shape, "cpu", (self.secret or 0) + j)
        return w


@dataclass
class Batch:
    first: int  # the number of the batch's first call among the worker's timed calls
    outputs: list[list[torch.Tensor]]  # per call, per output: the bytes read, as the parent's tensors
    failed: list[CheckResult]  # what reading found wrong


class _Refused(Exception):
    pass


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """The parent's checks on one thread: with torch's two on this 2-vCPU machine under load, a
    64x1000 projection took 44 ms instead of 0.4 ms (its threads waiting for a busy core)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@functools.cache  # asked for every output of every call read: a tensor made each time cost 4 µs
def _itemsize(dtype: str) -> int:
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def _output_spans(reply: TimeReply, meta: Sequence[dict], first: int) -> list[list[Span]]:
    """Per call, per output: (address, bytes), checked to span what an output of the
    reference's shape and dtype with the named strides spans."""
    out = []
    for i, (regions, strides) in enumerate(zip(reply.regions or [], reply.strides or [])):
        call = []
        for j, ((address, nbytes), stride, m) in enumerate(zip(regions, strides, meta)):
            shape = m["shape"]
            empty = math.prod(shape) == 0
            want = 0 if empty else (1 + sum((n - 1) * s for n, s in zip(shape, stride))) * _itemsize(m["dtype"])
            if len(stride) != len(shape) or any(s < 0 for s in stride) or nbytes != want:
                raise _Refused(
                    f"timed call {first + i}: output {j} named {nbytes} bytes with strides {stride}, "
                    f"which do not hold a {m['dtype']}{list(shape)} output"
                )
            call.append((int(address), int(nbytes)))
        out.append(call)
    return out


def _aliasing(
    spans: list[list[Span]], inputs: list, held: HeldRegions, first: int, hold_calls: int
) -> list[CheckResult]:
    """Outputs in memory that a held output, another output of the batch or an input holds."""
    batch = HeldRegions()
    for call in inputs:
        for a, n in call:
            if n:
                batch.add(0, [(int(a), int(a) + int(n))])
    for i, call in enumerate(spans):
        for j, (a, n) in enumerate(call):
            if not n:
                continue
            where = held.find(a, a + n)
            if where is not None:
                why = (
                    f"an output of timed call {where}, which the caller still holds (it keeps the "
                    f"last {hold_calls} calls' outputs): {REUSED_OUTPUT}"
                )
            elif (where := batch.find(a, a + n)) is not None:
                why = "an input of the batch" if where == 0 else f"an output of timed call {where}: {REUSED_OUTPUT}"
            else:
                batch.add(first + i, [(a, a + n)])
                continue
            return [CheckResult(ALIASING, False, f"timed call {first + i}: output {j} lies in the memory of {why}")]
    return []


def _inputs_unchanged(mine: list[bytearray], staged: list[bytearray], regions: list, first: int) -> list[CheckResult]:
    """The worker's inputs as read back against the bytes the parent wrote into them."""
    k = 0
    for i, call in enumerate(regions):
        for j in range(len(call)):
            if mine[k] != staged[k]:
                return [
                    CheckResult(
                        INPUTS,
                        False,
                        f"timed call {first + i}: tensor input {j} was modified "
                        "(read back from outside after the batch)",
                    )
                ]
            k += 1
    return []


def _as_tensors(raw: list[bytearray], reply: TimeReply, meta: Sequence[dict]) -> list[list[torch.Tensor]]:
    out, k = [], 0
    for strides in reply.strides or []:
        call = []
        for stride, m in zip(strides, meta):
            dtype = getattr(torch, m["dtype"])
            data = raw[k]
            k += 1
            if not data:
                call.append(torch.empty(m["shape"], dtype=dtype))
                continue
            flat = torch.frombuffer(data, dtype=torch.uint8).view(dtype)
            call.append(torch.as_strided(flat, m["shape"], stride))
        out.append(call)
    return out


def _digest(t: torch.Tensor, raw: bytearray) -> str:
    """measures.hash_tensor's digest, from the bytes read where the output is dense (no copy)."""
    if not t.is_contiguous() or len(raw) != t.numel() * t.element_size():
        return measures.hash_tensor(t)
    return measures.digest(t.dtype, tuple(t.shape), raw)


def _committed(
    outputs: list[list[torch.Tensor]], raw: list[bytearray], reply: TimeReply, first: int, bound: set[int]
) -> list[CheckResult]:
    """The calls in `bound` (the parent's random choice): their bytes against their digests."""
    k = 0
    for i, (call, committed) in enumerate(zip(outputs, reply.fingerprints)):
        k += len(call)
        if i not in bound:
            continue
        digests = [_digest(t, raw[k - len(call) + j]) for j, t in enumerate(call)]
        if digests != list(committed):
            return [
                CheckResult(
                    OUTPUTS,
                    False,
                    f"timed call {first + i}: the outputs read from outside after the batch are not "
                    "those it committed to inside the timed window: computed after it?",
                )
            ]
    return []
