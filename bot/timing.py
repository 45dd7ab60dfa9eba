"""The timing protocol: contenders interleaved in random order, warm-up first, fresh inputs
for every call, adaptive repetition, and checks on calls made while timing."""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator, Mapping, Sequence

from bot import bench, verify
from bot.domain import CheckResult, Measurement, Problem, Shape
from bot.trials import failure_check
from bot.workers import WorkerClient, WorkerFailure


@dataclass(frozen=True)
class TimingOptions:
    time_cap_s: float = 5.0  # per shape, all contenders together
    target_rel_se: float = 0.01  # stop once every median is known to 1%
    min_samples: int = 10
    # Each contender's samples come from at least this many interleaved visits, so that no
    # single moment (a clock change, a busy host) decides a median.
    min_batches: int = 6
    # Many contenders: after two screening rounds only the baseline and this many fastest
    # go on, so the cap buys precise intervals where a choice is being made.
    finalists: int = 4
    # CUDA only: "latency" synchronises before each call (host launch path + GPU work, back
    # to back); "throughput" times back-to-back calls; "graph" times CUDA-graph replays of
    # each call, the GPU's time alone (bot/worker.py, op_time).
    mode: str = "latency"
    # Worker processes per contender when contenders are compared, visited in turn: each
    # process carries an offset of its own (on the H200, 5 % between fresh processes on a
    # 5 us kernel), which only a second process of the same code can reveal (bench.speedup).
    replicas: int = 2
    batch_target_us: float = 10_000.0  # calls per batch chosen to fill about this long
    max_batch: int = 50
    warmup_batches: int = 1
    checks_per_batch: int = 1  # timed calls re-checked against the reference, chosen afterwards


@dataclass
class TimingRecord:
    samples_us: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    batch_workers: list[int] = field(default_factory=list)  # which replica took each batch
    # Pairs for the stream check: device-synchronised host time and the event time on the
    # current stream, per call ("latency") or per batch ("throughput", "graph").
    host_us: list[float] = field(default_factory=list)
    event_us: list[float] = field(default_factory=list)
    # Per kept batch, per call: the host time the worker reported (the calls' own, or on CUDA in
    # "throughput" and "graph" its whole batch's), and the parent's wall time it leaves
    # unexplained (verify.check_hidden_time).
    reported_us: list[float] = field(default_factory=list)
    unexplained_us: list[float] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    batch: int = 1
    failed: bool = False

    def measurement(self) -> Measurement | None:
        if not self.samples_us:
            return None
        workers = tuple(self.batch_workers) if len(set(self.batch_workers)) > 1 else ()
        return Measurement(tuple(self.samples_us), tuple(self.batch_sizes), workers)


def _one_batch(problem: Problem, shape: Shape, worker: WorkerClient, replica: int,
               reference: WorkerClient, record: TimingRecord, dtypes: list[str], rng: random.Random,
               call_timeout_s: float, options: TimingOptions, keep: bool) -> None:
    seeds = [rng.getrandbits(62) for _ in range(record.batch)]
    fp_seed = rng.getrandbits(40)
    started = time.perf_counter()
    try:
        reply = worker.request({"op": "time", "seeds": seeds, "distribution": "standard",
                                "fp_seed": fp_seed, "mode": options.mode},
                               call_timeout_s * len(seeds), "call")
    except WorkerFailure as exc:
        record.checks.append(failure_check(exc))
        record.failed = True
        return
    wall_us = (time.perf_counter() - started) * 1e6
    samples = reply.get("samples_us") or (reply["event_us"] if reply["event_us"] is not None
                                          else reply["host_us"])
    results = [verify.check_wall_clock(sum(samples), wall_us),
               verify.check_threads(reply["new_threads"], "timed calls")]
    picked = rng.sample(range(len(seeds)), min(options.checks_per_batch, len(seeds)))
    ref = reference.request({"op": "fingerprints", "seeds": [seeds[i] for i in picked],
                             "distribution": "standard", "fp_seed": fp_seed},
                            call_timeout_s * 20 * max(len(picked), 1), "problem")
    for ref_print, i in zip(ref["fingerprints"], picked):
        results.append(verify.compare_fingerprints(
            ref_print, reply["fingerprints"][i], dtypes, problem.tolerance,
            f"shape {shape.name}, timed call {len(record.samples_us) + i + 1}"))
    record.checks.extend(results)
    if not all(r.passed for r in results):
        record.failed = True
        return
    if keep:
        record.samples_us.extend(samples)
        record.batch_sizes.append(len(samples))
        record.batch_workers.append(replica)
        record.host_us.extend(reply["host_us"])
        if "batch_span_us" in reply:  # back to back: one host/stream pair for the whole batch
            record.event_us.append(reply["batch_span_us"])
        else:
            record.event_us.extend(reply["event_us"] or [])
        reported = sum(reply["host_us"])
        record.reported_us.append(reported / len(seeds))
        record.unexplained_us.append((wall_us - reported) / len(seeds))
    else:  # warm-up: also sizes the batches of the measured rounds
        per_call = max(sorted(samples)[len(samples) // 2], 1.0)
        record.batch = max(1, min(int(options.batch_target_us / per_call), options.max_batch))


Workers = Mapping[str, Sequence[WorkerClient]]  # each contender's worker processes (replicas)
Replicate = Callable[[Mapping[str, WorkerClient]], Workers]


def time_interleaved(problem: Problem, shape: Shape, reference: WorkerClient,
                     contenders: Mapping[str, WorkerClient], dtypes: list[str], rng: random.Random,
                     options: TimingOptions, call_timeout_s: float,
                     progress: Callable[[str], None], keep: frozenset[str] = frozenset(),
                     replicate: Replicate | None = None,
                     exclusive: Callable[[], ContextManager] = contextlib.nullcontext,
                     retire: Callable[[Sequence[WorkerClient]], None] | None = None
                     ) -> dict[str, TimingRecord]:
    """Time all contenders in one run; each round visits every worker of every contender
    once, in a fresh random order.

    Many contenders are first screened: two rounds, then only `keep` (the baseline, never
    screened out) and the fastest go on. Those timed to the end may then get more worker
    processes from `replicate` (the contenders it returns go on, each with its workers, its
    first one first). Timing phases run inside `exclusive()`; building replicas does not.
    `retire` gets each worker once, outside `exclusive()`, when it will not be timed again on
    this shape: the screened-out (and failed) ones when screening ends, the rest at the end,
    so that their GPU memory is not held while others work.
    """
    records = {name: TimingRecord() for name in contenders}
    active: Workers = {n: (w,) for n, w in contenders.items()}
    everyone: dict[int, WorkerClient] = {id(w): w for w in contenders.values()}
    warmed: set[int] = set()

    def let_go(still_timed: Workers) -> None:
        staying = {id(w) for workers in still_timed.values() for w in workers}
        leaving = [w for key, w in everyone.items() if key not in staying]
        for worker in leaving:
            del everyone[id(worker)]
        if retire is not None and leaving:
            retire(leaving)

    if len(active) > options.finalists + len(keep & set(active)):
        with exclusive(), _pinned(active):
            active = _warm_up(problem, shape, reference, active, records, warmed, dtypes, rng, options,
                              call_timeout_s)
            for _ in range(2):
                active = _visit_all(problem, shape, reference, active, records, dtypes, rng, options,
                                    call_timeout_s, keep=True)
        if len(active) > options.finalists + len(keep & set(active)):
            active = _finalists(active, records, keep, options.finalists)
            progress(f"{problem.name} [{shape.name}] screened: {len(active)} contender(s) go on")
        let_go(active)
    if replicate is not None and active:
        active = replicate({n: workers[0] for n, workers in active.items()})
        everyone.update((id(w), w) for workers in active.values() for w in workers)
    with exclusive(), _pinned(active):
        active = _warm_up(problem, shape, reference, active, records, warmed, dtypes, rng, options,
                          call_timeout_s)
        _time(problem, shape, reference, active, dtypes, rng, options, call_timeout_s, progress, records)
    let_go({})
    return records


@contextlib.contextmanager
def _pinned(active: Workers) -> Iterator[None]:
    everyone = [w for workers in active.values() for w in workers]
    for worker in everyone:
        worker.pin(True)
    try:
        yield
    finally:
        for worker in everyone:
            worker.pin(False)


def _warm_up(problem: Problem, shape: Shape, reference: WorkerClient, active: Workers,
             records: dict[str, TimingRecord], warmed: set[int], dtypes: list[str],
             rng: random.Random, options: TimingOptions, call_timeout_s: float) -> dict[str, Sequence[WorkerClient]]:
    """Warm-up rounds, not kept, for the workers that have had none."""
    skip = set(warmed)
    for _ in range(options.warmup_batches):
        active = _visit_all(problem, shape, reference, active, records, dtypes, rng, options,
                            call_timeout_s, keep=False, skip=skip)
    warmed.update(id(w) for workers in active.values() for w in workers)
    return active


def _visit_all(problem: Problem, shape: Shape, reference: WorkerClient, active: Workers,
               records: dict[str, TimingRecord], dtypes: list[str], rng: random.Random,
               options: TimingOptions, call_timeout_s: float, keep: bool,
               skip: set[int] = frozenset()) -> dict[str, Sequence[WorkerClient]]:
    """One round: a batch from each worker of each contender (but those in `skip`, by id), in
    random order; the contenders still standing (one failed batch, on any of its workers,
    ends a contender)."""
    visits = [(name, i) for name, workers in active.items() for i, w in enumerate(workers) if id(w) not in skip]
    for name, i in rng.sample(visits, len(visits)):
        if not records[name].failed:
            _one_batch(problem, shape, active[name][i], i, reference, records[name], dtypes, rng,
                       call_timeout_s, options, keep)
    return {n: w for n, w in active.items() if not records[n].failed}


def _time(problem: Problem, shape: Shape, reference: WorkerClient, active: Workers,
          dtypes: list[str], rng: random.Random, options: TimingOptions, call_timeout_s: float,
          progress: Callable[[str], None], records: dict[str, TimingRecord]) -> dict[str, TimingRecord]:
    """Rounds until every median is known well enough, or the cap. The cap is the final
    contenders' own: screening many can take longer than the cap, and then the choice
    would rest on two batches each."""
    deadline, hard_deadline = _deadlines(options.time_cap_s)
    rounds = 0
    while active:
        rounds += 1
        active = _visit_all(problem, shape, reference, active, records, dtypes, rng, options,
                            call_timeout_s, keep=True)
        done = all(bench.converged(records[n].measurement(), options.target_rel_se,
                                   options.min_samples, options.min_batches) for n in active)
        now = time.monotonic()
        if done or now > hard_deadline or (now > deadline and all(
                min(records[n].batch_workers.count(i) for i in range(len(w))) >= 2 for n, w in active.items())):
            break
        if rounds % 5 == 0:
            worst = max((records[n].measurement().rel_se for n in active), default=0.0)
            progress(f"{problem.name} [{shape.name}] timing round {rounds}: "
                     f"{len(active)} contender(s), worst relative error {worst:.1%}")
    return records


def _deadlines(cap_s: float) -> tuple[float, float]:
    """The cap from now, and where it stops giving way: it waits until every worker has two
    batches (an interval needs a spread), but very slow contenders stop at ten times the cap."""
    now = time.monotonic()
    return now + cap_s, now + 10 * cap_s


def screened_out(medians: Mapping[str, float], keep: frozenset[str], finalists: int) -> set[str]:
    """Contenders that stop after screening: all but `keep` and the `finalists` fastest."""
    ranked = sorted((n for n in medians if n not in keep), key=lambda n: medians[n])
    return set(ranked[finalists:])


def _finalists(active: Workers, records: dict[str, TimingRecord],
               keep: frozenset[str], finalists: int) -> dict[str, Sequence[WorkerClient]]:
    medians = {n: records[n].measurement().median_us for n in active}
    out = screened_out(medians, keep, finalists)
    return {n: w for n, w in active.items() if n not in out}
