"""One shape of one problem's evaluation: construct every worker for the shape, run the
trials, time those that pass against each other, and add the checks the times call for."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, replace

from bot.core import stats as bench
from bot.core.domain import CheckResult, Environment, Problem, Shape
from bot.core.outcomes import ShapeOutcome
from bot.core.progress import Note, Progress, ShapeTimed, ShapeVerified
from bot.core.roofline import floor_us, peaks_for
from bot.core.settings import Device
from bot.core.time_split import Waited
from bot.engine.evaluation.options import EvalOptions
from bot.engine.evaluation.worker_pool import Replicas, construct_all, release_caches
from bot.engine.timing.futility import Futility, bar
from bot.engine.timing.hidden import check_hidden_time, counts_within_gain, hidden_time_checks
from bot.engine.timing.interleaved import TimedShape, TimingHooks, time_interleaved
from bot.engine.timing.records import TimingRecord
from bot.engine.verification import trials, verify
from bot.engine.verification.budget_cut import FirstCallBudget
from bot.engine.verification.trials import (
    DeviceHolds,
    ReferenceInfo,
    TrialRun,
    TrialStats,
    run_trials,
    timed_seeds,
)
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.engine.workers.failures import problem_failure
from bot.engine.workers.gpulock import device_key, gpu_exclusive, gpu_shared
from bot.engine.workers.phase_clock import current
from bot.protocol.messages import Construct, Run
from bot.sandbox import freezer

_log = logging.getLogger(__name__)
REPLICAS = "replicas"  # a passed check: timed in fewer worker processes than asked, and why


@dataclass(frozen=True)
class ProblemRun:
    """One problem's evaluation, shared by its shapes: the workers and options, and the checks
    and per-shape outcomes each shape adds to."""

    problem: Problem
    reference: WorkerClient
    workers: dict[str, WorkerClient]
    replicas: Replicas
    rng: random.Random
    options: EvalOptions
    environment: Environment
    names: list[str]  # the baseline first, where there is one
    has_baseline: bool
    progress: Progress
    self_tuning: frozenset[str]
    untimed: frozenset[str]
    checks: dict[str, list[CheckResult]]
    per_shape: dict[str, list[ShapeOutcome]]

    @property
    def baseline(self) -> str | None:
        """The baseline contender's name, where the run has one (always the first)."""
        return self.names[0] if self.has_baseline else None

    @property
    def untrialled(self) -> frozenset[str]:
        """Built and timed, not trialled: the baseline where an earlier run of this evaluation
        trialled it (EvalOptions.baseline_trialled)."""
        return frozenset(self.names[:1]) if self.has_baseline and self.options.baseline_trialled else frozenset()


def evaluate_shape(run: ProblemRun, shape: Shape) -> None:
    limits = run.options.limits
    seed = run.rng.getrandbits(62)
    construct = Construct(seed=seed, overrides=dict(shape.overrides))
    try:
        ask(run.reference, construct, limits.construct_timeout_s * 4, "problem")
    except WorkerFailure as exc:
        raise problem_failure(run.problem, exc) from None
    alive = construct_all(run.workers, construct, run.checks, limits.construct_timeout_s, run.options.parallel)
    lock_key = device_key(run.options.device, run.options.gpu_index)
    clock = current()  # holds are taken on other threads: the problem's clock, taken here

    def waited(what: str) -> Waited:
        return clock.waits(f"{run.problem.name} [{shape.name}]: {what}", "the device")

    try:
        info, trial_checks, stats = run_trials(
            TrialRun(
                run.problem,
                shape,
                run.reference,
                run.rng,
                run.options.trials_per_distribution,
                (limits.first_call_timeout_s, limits.call_timeout_s),
                run.options.parallel,
                policy=run.options.tolerance,
                admit=run.replicas.session.admit,
                sizing=run.replicas.session.sizing,
                lend_over=trials.lend_over(run.options.device),  # read here, so that tests can lower it
                budget=FirstCallBudget(run.options.deadline, frozenset(run.names[:1] if run.has_baseline else ())),
            ),
            {n: w for n, w in alive.items() if n not in run.untrialled},
            run.progress,
            DeviceHolds(
                alone=run.self_tuning,
                shared=lambda: gpu_shared(lock_key, waited("a trial call")),
                exclusive=lambda: gpu_exclusive(lock_key, waited("a tuning contender's grant or trial alone")),
            ),
        )
    except WorkerFailure as exc:
        raise problem_failure(run.problem, exc) from None
    for name, found in trial_checks.items():
        run.checks[name].extend(found)
    verified = {n: w for n, w in alive.items() if all(c.passed for c in run.checks[n])}
    run.progress(ShapeVerified(run.problem.name, shape.name, len(verified), len(run.workers)))
    passed = {n: w for n, w in verified.items() if n not in run.untimed}

    def warm(name: str, worker: WorkerClient) -> list[str]:
        """A replica's first call (compilation), as a trial call is made: the device shared;
        the threads it left. One that tunes by timing makes it in the warm-up batch, with the
        device to itself. The reply is checked as a trial's is: a malformed one fails the
        contender (phase "protocol"), never the problem."""
        if name in run.self_tuning:
            return []
        with gpu_shared(lock_key, waited("a replica's first call")):
            seed = timed_seeds(run.problem, random.SystemRandom(), 1)[0]
            return ask(worker, Run(seed=seed), limits.first_call_timeout_s, "call").new_threads

    records: dict[str, TimingRecord] = {}
    # A candidate that can no longer be selected on this shape is timed no further (bot.engine.timing.futility).
    futility = (
        Futility(
            run.names[0],
            bar(run.options.min_speedup, len(run.problem.shapes_for(run.options.device))),
            run.options.min_speedup,
            run.options.timing.min_batches,
        )
        if run.has_baseline
        else None
    )
    if passed:
        # Fewer workers per contender where all of them would not fit the GPU in the timing
        # (KernelBench's 6 GiB elementwise shapes on an H100), said in each one's checks.
        count, why = run.replicas.session.timing_replicas(info, run.reference, passed, run.replicas.wanted)
        run.replicas.count = count
        if why is not None:
            run.progress(Note(why, run.problem.name, shape.name))
            for name in passed:
                run.checks[name].append(CheckResult(REPLICAS, True, why))
        try:
            records = time_interleaved(
                TimedShape(run.problem, shape, run.reference, info, run.options.timing, limits.call_timeout_s, run.rng),
                passed,
                TimingHooks(
                    progress=run.progress,
                    keep=frozenset(run.names[:1]) if run.has_baseline else frozenset(),
                    replicate=lambda chosen: run.replicas.ready(
                        chosen, construct, run.checks, limits.construct_timeout_s, run.progress, warm
                    ),
                    exclusive=lambda: gpu_exclusive(lock_key, waited("a timing")),  # one measurement at a time
                    retire=lambda done: release_caches(done, lock_key, limits.call_timeout_s, run.options.parallel),
                    window=freezer.freeze_all_but,
                    phase=lambda: clock.around("timing", freezer.timing_phase()),  # the lock's wait is outside
                    stop=futility,
                ),
            )
        except WorkerFailure as exc:
            raise problem_failure(run.problem, exc) from None
        early = [n for n in (futility.stopped if futility else {}) if n in records]
        batches = sum(len(r.batch_sizes) for r in records.values())
        run.progress(
            ShapeTimed(run.problem.name, shape.name, batches, len(early), futility.below if futility else None)
        )
        # The reference's float64 outputs for the timed calls' checks are held until the next
        # shape's references otherwise, through other problems' trials.
        release_caches([run.reference], lock_key, limits.call_timeout_s, 1)
    floor = floor_us(
        info.nbytes,
        info.flops,
        peaks_for(run.environment.device_name) if run.environment.device == Device.CUDA else None,
    )
    # The worker's reports against the parent's clock: on the CPU evidence only, since the
    # samples are the parent's own (bot.engine.timing.outside_clock); on CUDA, whose samples are the
    # worker's events, what they left out is counted into them and gross hiding rejects.
    hidden = hidden_time_checks({n: r for n, r in records.items() if not r.failed}, run.baseline)
    events = run.options.device == Device.CUDA
    if events:
        hidden = counts_within_gain(records, hidden, run.baseline)
    for name, found in hidden.items():
        run.checks[name].append(check_hidden_time(found, rejects=events))
        if events:
            records[name].counted_us = found.counted_us
        # Where a contender's hidden time came from, batch by batch: the figures behind a
        # count or a rejection, which the check's summary (medians) cannot show.
        _log.debug(
            "%s [%s] %s: hidden time %s; per batch (calls, replica, wall us, worker's op us, "
            "reported, unexplained, harness and staging us a call): %s",
            run.problem.name,
            shape.name,
            run.replicas.modules[name][1].name if name in run.replicas.modules else name,
            {k: round(v, 1) for k, v in found.details().items()},
            records[name].window_figures(),
        )
    for name, rec in records.items():
        run.checks[name].extend(rec.checks)
        m = rec.measurement()
        if m is not None and not rec.failed:
            if rec.event_us:
                run.checks[name].append(
                    verify.check_stream_timing(rec.host_us, rec.event_us, run.workers[name].overhead_us)
                )
            run.checks[name].append(verify.check_roofline(m.median_us, floor))
    base_rec = records.get(run.names[0]) if run.has_baseline else None
    base_m = base_rec.measurement() if base_rec and all(c.passed for c in run.checks[run.names[0]]) else None
    # How far processes of one code disagree: from the accepted contenders' workers (a
    # rejected one's times may be of wrong work), never under the baseline's own.
    spread = bench.worker_spread(
        (m for n, r in records.items() if all(c.passed for c in run.checks[n]) and (m := r.measurement()) is not None),
        trusted=base_m,
    )
    for name in run.names:
        rec = records.get(name)
        m = rec.measurement() if rec and all(c.passed for c in run.checks[name]) else None
        sp = None
        if base_m is not None and m is not None and name != run.names[0]:
            against = futility.baseline_for(name, base_m) if futility else base_m
            # Never narrower than what the baseline's batches of those rounds show by themselves.
            own = bench.worker_spread([against]).log_sd
            sp = bench.speedup(
                against, m, run.options.min_speedup, spread=replace(spread, log_sd=max(spread.log_sd, own))
            )
        st = stats.get(name, TrialStats())
        run.per_shape[name].append(
            ShapeOutcome(
                shape.name,
                _describe(info),
                info.meta[0]["dtype"] if info.meta else None,
                m,
                sp,
                floor,
                st.max_abs_err if name in stats else None,
                st.norm_rel_err if name in stats else None,
                info.nbytes,
                info.flops,
            )
        )


def _describe(info: ReferenceInfo) -> str:
    return ", ".join(info.inputs)
