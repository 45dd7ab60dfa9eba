"""Verify and measure contenders of one problem: the reference, the baseline and candidates
each in its own sandboxed worker, the verdicts judged here in the parent."""

from __future__ import annotations

import os
import random
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bot.core import stats as bench
from bot.core.domain import CandidateSource, CheckResult, Environment, Problem, Progress, Shape, source_hash
from bot.core.errors import BotError, GpuOutOfMemory, HarnessError, ProblemError
from bot.core.outcomes import ContenderOutcome, Evaluation, ShapeOutcome
from bot.core.roofline import floor_us, peaks_for
from bot.engine import verify
from bot.engine.eval_workers import Replicas, construct_all, materialise, open_session, release_caches
from bot.engine.futility import Futility, bar
from bot.engine.gpulock import device_key, gpu_exclusive, gpu_shared
from bot.engine.hidden import check_hidden_time, hidden_time_checks
from bot.engine.simulated import simulated_reason
from bot.engine.timing import TimingOptions, TimingRecord, time_interleaved
from bot.engine.trials import ReferenceInfo, TrialStats, failure_check, run_trials, tunes_on_first_call
from bot.engine.workers import WorkerClient, WorkerFailure, ask
from bot.protocol.messages import Construct
from bot.sandbox import Limits, freezer


@dataclass(frozen=True)
class EvalOptions:
    device: str = "cpu"
    sandbox: str = "process"
    limits: Limits = field(default_factory=Limits)
    timing: TimingOptions = field(default_factory=TimingOptions)
    min_speedup: float = 1.05
    trials_per_distribution: int = 1
    parallel: int = max(1, (os.cpu_count() or 2) // 2)  # workers compiling/verifying at once
    # Threads per worker for torch's CPU kernels; None: one on CPU (workers take turns there,
    # and a tiny kernel split over threads is timed by its slowest, descheduled one: A/A runs
    # of gelu on 2 vCPUs moved 100x between workers with 2), torch's default on a GPU.
    threads: int | None = None
    gpu_index: int | None = None
    # Other problems may be evaluated on this GPU at the same time (`bot optimize --jobs N`).
    # A contender still short of memory when re-run alone is then not proven too big: the
    # problem is raised as GpuOutOfMemory, for bot.engine.lanes to run it again after the others.
    beside_others: bool = False
    cache_root: Path = Path.home() / ".cache" / "kernel-bot"
    use_cache: bool = False  # reuse verdicts and timings of candidates judged before (bot.engine.cache)


def _environment(env: dict[str, Any]) -> Environment:
    return Environment(
        device=env["device"],
        device_name=env.get("device_name", "?"),
        torch=env["torch"],
        triton=env.get("triton"),
        cuda=env.get("cuda"),
        driver=env.get("driver"),
        python=env["python"],
        clocks=env.get("clocks", {}),
        host=env.get("host", ""),
        containment=env.get("containment", ""),
    )


# The last alternative: when an allocation fails, torch's caching allocator asks NVML which
# processes hold the GPU's memory, for the OutOfMemoryError's message (reportProcessMemoryInfo).
# Where NVML does not start in the worker, an assertion in that report is what the caller sees
# instead (tests/test_gpu_memory_retry.py has the message an H200 printed).
OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED"
    r'|nvml\w*\(\) INTERNAL ASSERT FAILED at "[^"]*CUDACachingAllocator\.cpp"'
)


def _says_out_of_memory(text: str) -> bool:
    return OUT_OF_MEMORY.search(text) is not None


def _problem_failure(problem: Problem, exc: WorkerFailure) -> BotError:
    if _says_out_of_memory(exc.reason):
        # Before the phase: a reference can run out of memory while building its inputs beside
        # other workers; that is not a broken problem file.
        return GpuOutOfMemory(f"{problem.path}: reference worker ran out of GPU memory: {exc.reason}")
    if exc.phase in ("problem", "import", "construct"):
        return ProblemError(f"{problem.path}: {exc.reason}")
    return HarnessError(f"{problem.path}: reference worker failed: {exc.reason}")


def evaluate(
    problem: Problem,
    candidates: list[CandidateSource],
    baseline: CandidateSource | None,
    options: EvalOptions,
    progress: Progress = lambda _: None,
) -> Evaluation:
    """Verify every candidate (and the baseline) on every shape; time the accepted ones.

    With `options.use_cache`, candidates already judged against the same problem, baseline and
    machine stack are taken from the cache (bot.engine.cache) instead of being run again."""
    if not options.use_cache:
        return untimed_where_simulated(
            _evaluate_fresh(problem, candidates, baseline, options, progress), options.device
        )
    from bot.engine.cache import ResultCache, environment_key

    # The timing mode is part of what a cached time means (bot.engine.timing.TimingOptions.mode).
    cache = ResultCache(
        options.cache_root,
        environment_key(options.device, options.gpu_index)
        + f"|timing={options.timing.mode}|replicas={options.timing.replicas}",
        options.min_speedup,
    )
    cached = [cache.get(problem, baseline, c) for c in candidates]
    fresh = [c for c, hit in zip(candidates, cached) if hit is None]
    if len(fresh) < len(candidates):
        progress(f"{problem.name}: {len(candidates) - len(fresh)} candidate(s) from the cache")
    evaluation = _evaluate_fresh(problem, fresh, baseline, options, progress)
    by_candidate = {id(o.candidate): o for o in evaluation.candidates}
    for outcome in evaluation.candidates:
        cache.put(problem, baseline, outcome)
    merged = tuple(hit if hit is not None else by_candidate[id(c)] for c, hit in zip(candidates, cached))
    # A cache written before a contender was known to be simulated may still hold its speedup.
    return untimed_where_simulated(
        Evaluation(problem, evaluation.environment, evaluation.baseline, merged), options.device
    )


def untimed_where_simulated(evaluation: Evaluation, device: str) -> Evaluation:
    """Every contender that runs under a simulator on `device` marked not timed, its times and
    speedups dropped; with a simulated baseline, no candidate keeps a speedup either."""

    def mark(outcome: ContenderOutcome, reason: str | None) -> ContenderOutcome:
        if reason is None:
            return outcome
        shapes = tuple(replace(s, measurement=None, speedup=None) for s in outcome.shapes)
        return replace(outcome, shapes=shapes, not_timed=reason)

    base = evaluation.baseline
    base_reason = simulated_reason(base.candidate.source, device) if base is not None else None
    candidates = tuple(mark(c, simulated_reason(c.candidate.source, device)) for c in evaluation.candidates)
    if base_reason is not None:
        # Correct or not, a candidate's ratio to a simulated baseline measures the simulator.
        candidates = tuple(
            c
            if c.not_timed
            else replace(
                c, shapes=tuple(replace(s, speedup=None) for s in c.shapes), not_timed=f"its baseline {base_reason}"
            )
            for c in candidates
        )
    return replace(evaluation, baseline=mark(base, base_reason) if base is not None else None, candidates=candidates)


def ran_out_of_gpu_memory(outcome: ContenderOutcome) -> bool:
    return not outcome.verdict.accepted and any(
        _says_out_of_memory(c.evidence) for c in outcome.verdict.checks if not c.passed
    )


def _short_of_memory(evaluation: Evaluation) -> list[ContenderOutcome]:
    """The contenders, baseline first where it is one, that ran out of GPU memory."""
    outcomes = ([evaluation.baseline] if evaluation.baseline else []) + list(evaluation.candidates)
    return [o for o in outcomes if ran_out_of_gpu_memory(o)]


def _evaluate_fresh(
    problem: Problem,
    candidates: list[CandidateSource],
    baseline: CandidateSource | None,
    options: EvalOptions,
    progress: Progress,
) -> Evaluation:
    """One evaluation; on a GPU, contenders that ran out of memory beside the others are
    evaluated again, one worker at a time, before that counts against them (a candidate
    that needs more than the GPU has fails again alone)."""
    first = _evaluate_once(problem, candidates, baseline, options, progress)
    if options.device != "cuda" or len(candidates) + (baseline is not None) < 2:
        return first
    short = _short_of_memory(first)
    if not short:
        return first
    progress(
        f"{problem.name}: {len(short)} contender(s) ran out of GPU memory beside "
        "others; evaluating them again, one at a time"
    )
    alone = replace(options, parallel=1)
    if any(o is first.baseline for o in short):  # no speedup of the first run has a baseline: all of it again
        return _unless_still_short(_evaluate_once(problem, candidates, baseline, alone, progress), options)
    again = _evaluate_once(problem, [o.candidate for o in short], baseline, alone, progress)
    # The re-run's speedups are against its own timing of the baseline, as every speedup is.
    redone = {id(o.candidate): o for o in again.candidates}
    merged = tuple(redone.get(id(o.candidate), o) for o in first.candidates)
    return _unless_still_short(Evaluation(problem, first.environment, first.baseline, merged), options)


def _unless_still_short(evaluation: Evaluation, options: EvalOptions) -> Evaluation:
    """The evaluation, or GpuOutOfMemory where contenders re-run one at a time still ran out
    of memory while other problems shared the GPU: rejecting them would charge them for the
    others' memory."""
    still = [o.candidate.name for o in _short_of_memory(evaluation)]
    if still and options.beside_others:
        raise GpuOutOfMemory(
            f"{evaluation.problem.path}: {len(still)} contender(s) ran out of GPU "
            f"memory even one at a time, beside other problems ({', '.join(still)})"
        )
    return evaluation


def _evaluate_once(
    problem: Problem,
    candidates: list[CandidateSource],
    baseline: CandidateSource | None,
    options: EvalOptions,
    progress: Progress,
) -> Evaluation:
    rng = random.Random(secrets.randbits(64))  # the secret seed: from the OS, never fixed
    contenders = ([baseline] if baseline else []) + list(candidates)
    names = [f"c{i}" for i in range(len(contenders))]
    checks: dict[str, list[CheckResult]] = {n: [] for n in names}
    per_shape: dict[str, list[ShapeOutcome]] = {n: [] for n in names}
    # Speedups compare timings from different processes: each contender gets replicas.
    replica_count = options.timing.replicas if baseline is not None else 1
    with open_session(problem, options, 1 + len(contenders) * replica_count) as session:
        ref_hash = source_hash(problem.source)
        workers: dict[str, WorkerClient] = {}
        replicas = Replicas(session, replica_count, options.parallel)
        progress(f"{problem.name}: starting {len(contenders) + 1} worker(s)")

        def start(name: str, cand: CandidateSource) -> None:
            try:
                module = materialise(cand, session.root / "candidates")
                replicas.modules[name] = (module, cand)
                workers[name] = session.start(name, module, cand.class_name, "native", cand.source_hash)
            except WorkerFailure as exc:
                checks[name].append(failure_check(exc))

        # The reference and every contender start together: imports (and CUDA builds) overlap.
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(2, options.parallel)) as pool:
            ref_future = pool.submit(session.start, "reference", None, "Model", problem.reference_precision, ref_hash)
            list(pool.map(start, names, contenders))
            try:
                reference = ref_future.result()
            except WorkerFailure as exc:
                raise _problem_failure(problem, exc) from None
        progress(f"{problem.name}: {session.start_summary(time.monotonic() - began)}")
        environment = _environment(reference.env)
        workers = {n: workers[n] for n in names if n in workers}
        # On a GPU, code that picks its kernels by timing them does so with the GPU to itself.
        self_tuning = frozenset(
            n for n, c in zip(names, contenders) if options.device == "cuda" and tunes_on_first_call(c.source)
        )
        # Verified, not timed (bot.engine.simulated); with a simulated baseline there is nothing to
        # time against. rmsnorm's interpreted Triton baseline took 181 ms a call on 2 vCPUs.
        simulated = {n for n, c in zip(names, contenders) if simulated_reason(c.source, options.device)}
        untimed = frozenset(names if baseline is not None and names[0] in simulated else simulated)
        if untimed:
            progress(
                f"{problem.name}: {len(untimed)} contender(s) verified but not timed: "
                "they run under a simulator on this device"
            )
        for shape in problem.shapes_for(options.device):
            _evaluate_shape(
                problem,
                shape,
                reference,
                workers,
                replicas,
                checks,
                per_shape,
                rng,
                options,
                environment,
                baseline is not None,
                names,
                progress,
                self_tuning,
                untimed,
            )
    outcomes = [
        ContenderOutcome(
            c,
            "baseline" if baseline is not None and i == 0 else "candidate",
            verify.judge(checks[n]),
            tuple(per_shape[n]),
        )
        for i, (n, c) in enumerate(zip(names, contenders))
    ]
    base = outcomes[0] if baseline is not None else None
    return Evaluation(problem, environment, base, tuple(outcomes[1:] if base else outcomes))


def _evaluate_shape(
    problem: Problem,
    shape: Shape,
    reference: WorkerClient,
    workers: dict[str, WorkerClient],
    replicas: Replicas,
    checks: dict[str, list[CheckResult]],
    per_shape: dict[str, list[ShapeOutcome]],
    rng: random.Random,
    options: EvalOptions,
    environment: Environment,
    has_baseline: bool,
    names: list[str],
    progress: Progress,
    self_tuning: frozenset[str],
    untimed: frozenset[str] = frozenset(),
) -> None:
    limits = options.limits
    seed = rng.getrandbits(62)
    construct = Construct(seed=seed, overrides=dict(shape.overrides))
    try:
        ask(reference, construct, limits.construct_timeout_s * 4, "problem")
    except WorkerFailure as exc:
        raise _problem_failure(problem, exc) from None
    alive = construct_all(workers, construct, checks, limits.construct_timeout_s, options.parallel)
    lock_key = device_key(options.device, options.gpu_index)
    try:
        info, trial_checks, stats = run_trials(
            problem,
            shape,
            reference,
            alive,
            rng,
            options.trials_per_distribution,
            (limits.first_call_timeout_s, limits.call_timeout_s),
            options.parallel,
            progress,
            alone=self_tuning,
            shared=lambda: gpu_shared(lock_key),
            exclusive=lambda: gpu_exclusive(lock_key),
        )
    except WorkerFailure as exc:
        raise _problem_failure(problem, exc) from None
    for name, found in trial_checks.items():
        checks[name].extend(found)
    verified = {n: w for n, w in alive.items() if all(c.passed for c in checks[n])}
    progress(f"{problem.name} [{shape.name}] verified: {len(verified)} of {len(workers)} contender(s) pass")
    passed = {n: w for n, w in verified.items() if n not in untimed}

    def warm(name: str, worker: WorkerClient) -> dict:
        """A replica's first call (compilation), as a trial call is made: the device shared.
        One that tunes by timing makes it in the warm-up batch, with the device to itself."""
        if name in self_tuning:
            return {"new_threads": []}
        with gpu_shared(lock_key):
            return worker.request(
                {"op": "run", "seed": secrets.randbits(62), "distribution": "standard"},
                limits.first_call_timeout_s,
                "call",
            )

    records: dict[str, TimingRecord] = {}
    # A candidate that can no longer be selected on this shape is timed no further (bot.engine.futility).
    futility = (
        Futility(
            names[0],
            bar(options.min_speedup, len(problem.shapes_for(options.device))),
            options.min_speedup,
            options.timing.min_batches,
        )
        if has_baseline
        else None
    )
    if passed:
        try:
            records = time_interleaved(
                problem,
                shape,
                reference,
                passed,
                info,
                rng,
                options.timing,
                limits.call_timeout_s,
                progress,
                keep=frozenset(names[:1]) if has_baseline else frozenset(),
                replicate=lambda chosen: replicas.ready(
                    chosen, construct, checks, limits.construct_timeout_s, progress, warm
                ),
                exclusive=lambda: gpu_exclusive(lock_key),  # one measurement at a time per device
                retire=lambda done: release_caches(done, lock_key, limits.call_timeout_s, options.parallel),
                window=freezer.freeze_all_but,
                phase=freezer.timing_phase,
                stop=futility,
            )
        except WorkerFailure as exc:
            raise _problem_failure(problem, exc) from None
        early = [n for n in (futility.stopped if futility else {}) if n in records]
        progress(
            f"{problem.name} [{shape.name}] timed: "
            f"{sum(len(r.batch_sizes) for r in records.values())} batches"
            + (
                f"; {len(early)} candidate(s) stopped early: their 99% intervals were under {futility.below:.3g}x"
                if early
                else ""
            )
        )
        # The reference's float64 outputs for the timed calls' checks are held until the next
        # shape's references otherwise, through other problems' trials.
        release_caches([reference], lock_key, limits.call_timeout_s, 1)
    floor = floor_us(
        info.nbytes, info.flops, peaks_for(environment.device_name) if environment.device == "cuda" else None
    )
    # First: the times below count what the parent's clock saw and a report left out.
    hidden = hidden_time_checks({n: r for n, r in records.items() if not r.failed}, names[0] if has_baseline else None)
    for name, found in hidden.items():
        checks[name].append(check_hidden_time(found))
        records[name].counted_us = found.counted_us
    for name, rec in records.items():
        checks[name].extend(rec.checks)
        m = rec.measurement()
        if m is not None and not rec.failed:
            if rec.event_us:
                checks[name].append(verify.check_stream_timing(rec.host_us, rec.event_us, workers[name].overhead_us))
            checks[name].append(verify.check_roofline(m.median_us, floor))
    base_rec = records.get(names[0]) if has_baseline else None
    base_m = base_rec.measurement() if base_rec and all(c.passed for c in checks[names[0]]) else None
    # How far processes of one code disagree: from the accepted contenders' workers (a
    # rejected one's times may be of wrong work), never under the baseline's own.
    spread = bench.worker_spread(
        (m for n, r in records.items() if all(c.passed for c in checks[n]) and (m := r.measurement()) is not None),
        trusted=base_m,
    )
    for name in names:
        rec = records.get(name)
        m = rec.measurement() if rec and all(c.passed for c in checks[name]) else None
        sp = None
        if base_m is not None and m is not None and name != names[0]:
            against = futility.baseline_for(name, base_m) if futility else base_m
            # Never narrower than what the baseline's batches of those rounds show by themselves.
            own = bench.worker_spread([against]).log_sd
            sp = bench.speedup(against, m, options.min_speedup, spread=replace(spread, log_sd=max(spread.log_sd, own)))
        st = stats.get(name, TrialStats())
        per_shape[name].append(
            ShapeOutcome(
                shape.name,
                _describe(info),
                info.meta[0]["dtype"] if info.meta else None,
                m,
                sp,
                floor,
                st.max_abs_err if name in stats else None,
                st.norm_rel_err if name in stats else None,
            )
        )


def _describe(info: ReferenceInfo) -> str:
    return ", ".join(info.inputs)
