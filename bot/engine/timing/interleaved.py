"""The timing protocol: contenders interleaved in random order, warm-up first, fresh inputs
for every call, adaptive repetition, and checks on calls made while timing."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from bot.core import stats as bench
from bot.core.domain import Problem, Shape
from bot.core.progress import Note, Progress, Screened, TimingRound, silent
from bot.core.settings import Device
from bot.core.tolerance import rules_of
from bot.engine.timing.batch_run import Run, Window, no_window
from bot.engine.timing.harness_cost import HarnessCost
from bot.engine.timing.records import TimingOptions, TimingRecord
from bot.engine.timing.timed_batch import one_batch
from bot.engine.verification.trials import ReferenceInfo
from bot.engine.workers.client import WorkerClient

Workers = Mapping[str, Sequence[WorkerClient]]  # each contender's worker processes (replicas)
Replicate = Callable[[Mapping[str, WorkerClient]], Workers]
Stop = Callable[[Mapping[str, TimingRecord], Workers], set]  # contenders to time no further


@dataclass(frozen=True)
class TimedShape:
    """What one shape's timing run times, and under which options."""

    problem: Problem
    shape: Shape
    reference: WorkerClient  # the trusted worker that stages inputs and checks timed calls
    info: ReferenceInfo
    options: TimingOptions
    call_timeout_s: float
    rng: random.Random


@dataclass(frozen=True)
class TimingHooks:
    """How the caller takes part in a timing run; each does nothing by default."""

    progress: Progress = silent
    keep: frozenset[str] = frozenset()  # never screened out (the baseline)
    replicate: Replicate | None = None
    exclusive: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    retire: Callable[[Sequence[WorkerClient]], None] | None = None
    window: Window = no_window
    phase: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
    stop: Stop | None = None


def time_interleaved(
    timed: TimedShape, contenders: Mapping[str, WorkerClient], hooks: TimingHooks = TimingHooks()
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
    to time no further (bot.engine.timing.futility); their records are kept as they are.
    """
    dtypes = [m["dtype"] for m in timed.info.meta]
    harness = HarnessCost(
        timed.reference, timed.info.meta, timed.info.nbytes, timed.options.mode, timed.rng, timed.call_timeout_s
    )
    # Set by the shape's trials; a shape timed without them holds the problem's own bounds.
    rules = timed.info.rules or tuple(rules_of(dtypes, timed.problem.tolerance))
    run = Run(
        timed.problem,
        timed.shape,
        timed.reference,
        dtypes,
        timed.rng,
        timed.options,
        timed.call_timeout_s,
        harness,
        hooks.window,
        rules,
    )
    records = {name: TimingRecord() for name in contenders}
    active: Workers = {n: (w,) for n, w in contenders.items()}
    everyone: dict[int, WorkerClient] = {id(w): w for w in contenders.values()}
    warmed: set[int] = set()

    def let_go(still_timed: Workers) -> None:
        staying = {id(w) for workers in still_timed.values() for w in workers}
        leaving = [w for key, w in everyone.items() if key not in staying]
        for worker in leaving:
            del everyone[id(worker)]
        if hooks.retire is not None and leaving:
            hooks.retire(leaving)

    if len(active) > timed.options.finalists + len(hooks.keep & set(active)):
        with hooks.exclusive(), _pinned(active), hooks.phase():
            active = _warm_up(run, active, records, warmed)
            for _ in range(2):
                active = _visit_all(run, active, records, keep=True)
        if len(active) > timed.options.finalists + len(hooks.keep & set(active)):
            active = _finalists(active, records, hooks.keep, timed.options.finalists)
            hooks.progress(Screened(timed.problem.name, timed.shape.name, len(active)))
        let_go(active)
    if hooks.replicate is not None and active:
        active = hooks.replicate({n: workers[0] for n, workers in active.items()})
        everyone.update((id(w), w) for workers in active.values() for w in workers)
    with hooks.exclusive(), _pinned(active), hooks.phase():
        active = _warm_up(run, active, records, warmed)
        _time(run, active, hooks.progress, records, hooks.stop)
    let_go({})
    if timed.reference.device == Device.CPU and not harness.fills_from_outside:
        hooks.progress(Note(harness.staging_note, timed.problem.name, timed.shape.name))
    if run.picks.note:
        hooks.progress(Note(run.picks.note, timed.problem.name, timed.shape.name))
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
            one_batch(run, active[name][i], i, records[name], keep)
    return {n: w for n, w in active.items() if not records[n].failed}


def _time(
    run: Run,
    active: Workers,
    progress: Progress,
    records: dict[str, TimingRecord],
    stop: Stop | None = None,
) -> dict[str, TimingRecord]:
    """Rounds until every median is known well enough, or the cap. The cap is the final
    contenders' own: screening many can take longer than the cap, and then the choice
    would rest on two batches each."""
    deadline, hard_deadline = _deadlines(run.options.time_cap_s)
    rounds = 0
    while active:
        rounds += 1
        active = _visit_all(run, active, records, keep=True)
        if stop is not None:
            stopped = stop(records, active)
            active = {n: w for n, w in active.items() if n not in stopped}
        # A contender whose only batches were timed again (GPU left busy) has no measurement yet.
        measured = {n: records[n].measurement() for n in active}
        done = all(
            m is not None
            and bench.converged(m, run.options.target_rel_se, run.options.min_samples, run.options.min_batches)
            for m in measured.values()
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
            worst = max((m.rel_se for m in measured.values() if m is not None), default=0.0)
            progress(TimingRound(run.problem.name, run.shape.name, rounds, len(active), worst))
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
    measured = {n: records[n].measurement() for n in active}
    # One with no kept batch yet (its batches timed again) is not ranked, so not screened out.
    medians = {n: m.median_us for n, m in measured.items() if m is not None}
    out = screened_out(medians, keep, finalists)
    return {n: w for n, w in active.items() if n not in out}
