"""The timing protocol: contenders interleaved in random order, warm-up first, fresh inputs
for every call, adaptive repetition, and checks on calls made while timing."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from bot.core import stats as bench
from bot.core.domain import CheckResult, Measurement, Problem, Shape
from bot.engine import verify
from bot.engine.compare import check_commitment, compare_outputs
from bot.engine.harness_cost import HarnessCost, timed_exchange
from bot.engine.staging import StagingRefused, stage
from bot.engine.trials import ReferenceInfo, failure_check
from bot.engine.workers import WorkerClient, WorkerFailure, ask
from bot.protocol.batches import Outputs, Time
from bot.protocol.messages import Fingerprints


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
    # each call, the GPU's time alone (bot/harness/worker.py, op_time).
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
    # unexplained beyond the harness's measured work (HarnessCost; bot.engine.hidden.check_hidden_time).
    reported_us: list[float] = field(default_factory=list)
    unexplained_us: list[float] = field(default_factory=list)
    harness_us: list[float] = field(default_factory=list)  # per kept batch, per call: HarnessCost's median
    noise_us: list[float] = field(default_factory=list)  # and its spread
    counted_us: float = 0.0  # hidden time per call counted in the samples, set once timing is done
    checks: list[CheckResult] = field(default_factory=list)
    batch: int = 1
    failed: bool = False

    def measurement(self) -> Measurement | None:
        """The samples, each with `counted_us` added: the time per call the parent's clock saw
        and the worker's report left out (bot.engine.hidden.hidden_time), so that the work of a contender
        that hid it below the rejection bound is still counted."""
        if not self.samples_us:
            return None
        workers = tuple(self.batch_workers) if len(set(self.batch_workers)) > 1 else ()
        return Measurement(tuple(s + self.counted_us for s in self.samples_us), tuple(self.batch_sizes), workers)


@dataclass(frozen=True)
class Run:
    """What every batch of one shape's timing shares."""

    problem: Problem
    shape: Shape
    reference: WorkerClient
    dtypes: list[str]
    rng: random.Random
    options: TimingOptions
    call_timeout_s: float
    harness: HarnessCost
    window: Window


def _one_batch(run: Run, worker: WorkerClient, replica: int, record: TimingRecord, keep: bool) -> None:
    """One batch: inputs staged, the calls timed inside the parent's own window, then calls the
    parent picks checked against the reference in full (docs/verifier.md, "timed calls")."""
    problem, shape, reference, dtypes, rng = run.problem, run.shape, run.reference, run.dtypes, run.rng
    options, call_timeout_s, harness, window = run.options, run.call_timeout_s, run.harness, run.window
    seeds = [rng.getrandbits(62) for _ in range(record.batch)]
    fp_seed = rng.getrandbits(40)
    try:
        # Every other contender's processes frozen from here on. The staging is inside this
        # window too and on the parent's clock: the worker holds the inputs from then on, and
        # work it does with them before the calls (their answers, ahead of time) counts.
        window(worker)
        _blame_work_left_running(run)
        staging_us = stage(run, worker, seeds)
        reply, wall_us = timed_exchange(
            worker,
            Time(
                fp_seed=fp_seed,
                mode=options.mode,
                calls=len(seeds),
                outputs=len(dtypes),
                digests=reference.device != "cuda",
            ),
            call_timeout_s * len(seeds),
            "call",
        )
        harness.last_timed = record
        # Picked after the batch, from calls the worker had to commit to (fingerprints) inside
        # the window: what it returns now cannot change what it computed then.
        picked = rng.sample(range(len(seeds)), min(options.checks_per_batch, len(seeds)))
        full = harness.reveals_in_full
        got = ask(worker, Outputs(picks=picked if full else []), call_timeout_s * 20, "call")
    except WorkerFailure as exc:
        record.checks.append(failure_check(exc))
        record.failed = True
        return
    except StagingRefused as exc:
        record.checks.append(
            CheckResult(
                "staged inputs",
                False,
                f"the parent could not write the batch's inputs into the buffers this worker named: {exc}",
            )
        )
        record.failed = True
        return
    samples = reply.samples
    results = [verify.check_wall_clock(sum(samples), wall_us), verify.check_threads(reply.new_threads, "timed calls")]
    # On the CPU timed calls commit by digest: the reference's fingerprints are not needed.
    cuda = reference.device == "cuda"
    ref = ask(
        reference,
        Fingerprints(
            seeds=[seeds[i] for i in picked],
            distribution="standard",
            fp_seed=fp_seed,
            want=("both" if full else "fingerprint") if cuda else "outputs",
        ),
        call_timeout_s * 20 * max(len(picked), 1),
        "problem",
    )
    for n, i in enumerate(picked):
        label = f"shape {shape.name}, timed call {len(record.samples_us) + i + 1}"
        revealed = got.outputs[n] if full else []
        results.append(
            check_commitment(reply.fingerprints[i], revealed, ref.fingerprints[n], dtypes, problem.tolerance, label)
        )
        if full:
            results.extend(compare_outputs(ref.outputs[n], revealed, dtypes, problem.tolerance, label))
    record.checks.extend(results)
    if not all(r.passed for r in results):
        record.failed = True
        return
    if keep:
        record.samples_us.extend(samples)
        record.batch_sizes.append(len(samples))
        record.batch_workers.append(replica)
        record.host_us.extend(reply.host_us)
        if reply.batch_span_us is not None:  # back to back: one host/stream pair for the whole batch
            record.event_us.append(reply.batch_span_us)
        else:
            record.event_us.extend(reply.event_us or [])
        reported = sum(reply.host_us)
        usual, noise = harness.of(len(seeds))
        unexplained = wall_us - reported - usual
        if staging_us is not None:  # drawn in the worker: its staging is on the parent's clock too
            usual_staging, staging_noise = harness.staging_of(len(seeds))
            unexplained += staging_us - usual_staging
            noise = math.hypot(noise, staging_noise)
        record.reported_us.append(reported / len(seeds))
        record.unexplained_us.append(unexplained / len(seeds))
        # The allowance grows with the window's harness work only, never with input generation.
        record.harness_us.append(usual / len(seeds))
        record.noise_us.append(noise / len(seeds))
    else:  # warm-up: also sizes the batches of the measured rounds
        per_call = max(sorted(samples)[len(samples) // 2], 1.0)
        record.batch = max(1, min(int(options.batch_target_us / per_call), options.max_batch, harness.max_batch))


def _blame_work_left_running(run: Run) -> None:
    """On CUDA, before a window: GPU work still running is the last timed contender's, which
    fails (its record; the contender about to be timed is not at fault)."""
    found = run.harness.gpu_left_busy()
    last = run.harness.last_timed
    if found is not None and last is not None:
        last.checks.append(found)
        if not found.passed:
            last.failed = True


# Called right before each timed batch with its worker: the sandbox freezes every other
# contender's processes there (bot.sandbox.freezer), until the timing phase ends.
Window = Callable[[WorkerClient], object]


def _no_window(worker: WorkerClient) -> None:
    return None


Workers = Mapping[str, Sequence[WorkerClient]]  # each contender's worker processes (replicas)
Replicate = Callable[[Mapping[str, WorkerClient]], Workers]
Stop = Callable[[Mapping[str, TimingRecord], Workers], set]  # contenders to time no further


def time_interleaved(
    problem: Problem,
    shape: Shape,
    reference: WorkerClient,
    contenders: Mapping[str, WorkerClient],
    info: ReferenceInfo,
    rng: random.Random,
    options: TimingOptions,
    call_timeout_s: float,
    progress: Callable[[str], None],
    keep: frozenset[str] = frozenset(),
    replicate: Replicate | None = None,
    exclusive: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    retire: Callable[[Sequence[WorkerClient]], None] | None = None,
    window: Window = _no_window,
    phase: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    stop: Stop | None = None,
) -> dict[str, TimingRecord]:
    """Time all contenders in one run; each round visits every worker of every contender
    once, in a fresh random order.

    Many contenders are first screened: two rounds, then only `keep` (the baseline, never
    screened out) and the fastest go on. Those timed to the end may then get more worker
    processes from `replicate` (the contenders it returns go on, each with its workers, its
    first one first). Timing phases run inside `exclusive()`; building replicas does not.
    `retire` gets each worker once, outside `exclusive()`, when it will not be timed again on
    this shape: the screened-out (and failed) ones when screening ends, the rest at the end,
    so that their GPU memory is not held while others work. `window(worker)` is called right
    before each timed batch, inside `phase()`, which wraps each timing phase (the sandbox
    freezes every other contender's processes for the batch, and thaws them all when the phase
    ends). After each round of the final phase, `stop(records, active)` may name contenders
    to time no further (bot.engine.futility); their records are kept as they are.
    """
    dtypes = [m["dtype"] for m in info.meta]
    harness = HarnessCost(reference, info.meta, info.nbytes, options.mode, rng, call_timeout_s)
    run = Run(problem, shape, reference, dtypes, rng, options, call_timeout_s, harness, window)
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
        with exclusive(), _pinned(active), phase():
            active = _warm_up(run, active, records, warmed)
            for _ in range(2):
                active = _visit_all(run, active, records, keep=True)
        if len(active) > options.finalists + len(keep & set(active)):
            active = _finalists(active, records, keep, options.finalists)
            progress(f"{problem.name} [{shape.name}] screened: {len(active)} contender(s) go on")
        let_go(active)
    if replicate is not None and active:
        active = replicate({n: workers[0] for n, workers in active.items()})
        everyone.update((id(w), w) for workers in active.values() for w in workers)
    with exclusive(), _pinned(active), phase():
        active = _warm_up(run, active, records, warmed)
        _time(run, active, progress, records, stop)
    let_go({})
    if reference.device == "cpu" and not harness.fills_from_outside:
        progress(f"{problem.name} [{shape.name}]: {harness.staging_note}")
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


def _warm_up(
    run: Run, active: Workers, records: dict[str, TimingRecord], warmed: set[int]
) -> dict[str, Sequence[WorkerClient]]:
    """Warm-up rounds, not kept, for the workers that have had none."""
    skip = set(warmed)
    for _ in range(run.options.warmup_batches):
        active = _visit_all(run, active, records, keep=False, skip=skip)
    warmed.update(id(w) for workers in active.values() for w in workers)
    return active


def _visit_all(
    run: Run, active: Workers, records: dict[str, TimingRecord], keep: bool, skip: set[int] = frozenset()
) -> dict[str, Sequence[WorkerClient]]:
    """One round: a batch from each worker of each contender (but those in `skip`, by id), in
    random order; the contenders still standing (one failed batch, on any of its workers,
    ends a contender)."""
    visits = [(name, i) for name, workers in active.items() for i, w in enumerate(workers) if id(w) not in skip]
    if keep and visits:  # the harness's own work, measured among this round's batches
        visits.append((None, max(records[name].batch for name, _ in visits)))
    for name, i in run.rng.sample(visits, len(visits)):
        if name is None:
            run.harness.measure_round(i)
        elif not records[name].failed:
            _one_batch(run, active[name][i], i, records[name], keep)
    return {n: w for n, w in active.items() if not records[n].failed}


def _time(
    run: Run,
    active: Workers,
    progress: Callable[[str], None],
    records: dict[str, TimingRecord],
    stop: Stop | None = None,
) -> dict[str, TimingRecord]:
    """Rounds until every median is known well enough, or the cap. The cap is the final
    contenders' own: screening many can take longer than the cap, and then the choice
    would rest on two batches each."""
    options, problem, shape = run.options, run.problem, run.shape
    deadline, hard_deadline = _deadlines(options.time_cap_s)
    rounds = 0
    while active:
        rounds += 1
        active = _visit_all(run, active, records, keep=True)
        if stop is not None:
            stopped = stop(records, active)
            active = {n: w for n, w in active.items() if n not in stopped}
        done = all(
            bench.converged(records[n].measurement(), options.target_rel_se, options.min_samples, options.min_batches)
            for n in active
        )
        now = time.monotonic()
        if (
            done
            or now > hard_deadline
            or (
                now > deadline
                and all(min(records[n].batch_workers.count(i) for i in range(len(w))) >= 2 for n, w in active.items())
            )
        ):
            break
        if rounds % 5 == 0:
            worst = max((records[n].measurement().rel_se for n in active), default=0.0)
            progress(
                f"{problem.name} [{shape.name}] timing round {rounds}: "
                f"{len(active)} contender(s), worst relative error {worst:.1%}"
            )
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


def _finalists(
    active: Workers, records: dict[str, TimingRecord], keep: frozenset[str], finalists: int
) -> dict[str, Sequence[WorkerClient]]:
    medians = {n: records[n].measurement().median_us for n in active}
    out = screened_out(medians, keep, finalists)
    return {n: w for n, w in active.items() if n not in out}
