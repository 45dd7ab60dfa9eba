"""Verify and measure contenders of one problem: the reference, the baseline and candidates
each in its own sandboxed worker, the verdicts judged here in the parent."""

from __future__ import annotations

import logging
import random
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from bot.core.domain import CandidateSource, CheckResult, Environment, Problem, Verdict, source_hash
from bot.core.errors import GpuOutOfMemory
from bot.core.outcomes import BASELINE_LOST, ContenderOutcome, Evaluation, ShapeOutcome
from bot.core.progress import EvaluationStarted, Note, Progress, silent
from bot.core.settings import Device, TolerancePolicy
from bot.engine.evaluation.cache import ResultCache, environment_key, protocol_of
from bot.engine.evaluation.options import EvalOptions
from bot.engine.evaluation.shape_run import ProblemRun, evaluate_shape
from bot.engine.evaluation.simulated import simulated_reason
from bot.engine.evaluation.worker_pool import Replicas, Split, TooLargeTogether, materialise, open_session
from bot.engine.verification import verify
from bot.engine.verification.budget_cut import BUDGET_CUT
from bot.engine.verification.trials import (
    failure_check,
    tunes_on_first_call,
)
from bot.engine.workers.client import WorkerClient, WorkerFailure
from bot.engine.workers.failures import problem_failure, ran_out_of_gpu_memory

log = logging.getLogger(__name__)


def evaluate(
    problem: Problem,
    candidates: list[CandidateSource],
    baseline: CandidateSource | None,
    options: EvalOptions,
    progress: Progress = silent,
) -> Evaluation:
    """Verify every candidate (and the baseline) on every shape; time the accepted ones.

    With `options.use_cache`, candidates already judged against the same problem, baseline and
    machine stack, under the same protocol, are taken from the cache (bot.engine.evaluation.cache) instead
    of being run again, where their outcome was conclusive."""
    if not options.use_cache:
        return untimed_where_simulated(
            _evaluate_fresh(problem, candidates, baseline, options, progress), options.device
        )
    cache = ResultCache(
        options.cache_root,
        environment_key(options.device, options.gpu_index),
        protocol_of(options),
        options.min_speedup,
    )
    cached = [cache.get(problem, baseline, c) for c in candidates]
    fresh = [c for c, hit in zip(candidates, cached) if hit is None]
    if len(fresh) < len(candidates):
        progress(Note(f"{len(candidates) - len(fresh)} candidate(s) from the cache", problem.name))
    evaluation = _evaluate_fresh(problem, fresh, baseline, options, progress)
    by_candidate = {id(o.candidate): o for o in evaluation.candidates}
    for outcome in evaluation.candidates:
        cache.put(problem, baseline, outcome)
    merged = tuple(
        hit if hit is not None else by_candidate[id(c)]
        for c, hit in zip(candidates, cached)
        if hit is not None or id(c) in by_candidate
    )
    # A cache written before a contender was known to be simulated may still hold its speedup.
    return untimed_where_simulated(
        Evaluation(problem, evaluation.environment, evaluation.baseline, merged, evaluation.not_evaluated),
        options.device,
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
    evaluated again, each beside the baseline alone, before that counts against them (a
    candidate that needs more than the GPU has fails again alone). Where the reference itself
    ran out beside them (and no other problem shares the GPU), every candidate is. Where the
    reference's first trial shows that the contenders cannot all be held at once
    (bot.engine.evaluation.worker_pool.TooLargeTogether), they go in groups that fit from the start."""
    try:
        first = _evaluate_once(problem, candidates, baseline, options, progress)
    except TooLargeTogether as exc:
        room = exc.fits - (baseline is not None)  # fewer than all: fits < contenders
        size = max(1, room)
        alone = "each candidate beside the baseline alone" if size == 1 else f"{size} candidates at a time"
        if room < 1:  # what a split can do; a run that still runs out rejects its candidate for it
            alone += " (by this estimate even that exceeds it)"
        progress(Note(f"{exc}: evaluating {alone}", problem.name))
        return _unless_still_short(_in_groups(problem, candidates, baseline, options, progress, size), options)
    except GpuOutOfMemory as exc:
        # Beside other problems the problem runs again after them, alone (bot.engine.loop.lanes).
        if options.device != Device.CUDA or options.beside_others or len(candidates) < 2:
            raise
        log.info("%s: %s", problem.name, exc)  # who held the memory, for whoever reads the log
        progress(
            Note(
                f"its reference ran out of GPU memory beside {len(candidates) + (baseline is not None)} "
                "contenders; evaluating each candidate again beside the baseline alone",
                problem.name,
            )
        )
        return _unless_still_short(_in_groups(problem, candidates, baseline, options, progress, 1), options)
    if options.device != Device.CUDA or len(candidates) + (baseline is not None) < 2:
        return first
    short = _short_of_memory(first)
    if not short:
        return first
    # Without a baseline timed beside them no speedup of the first run stands: all again.
    again = candidates if any(o is first.baseline for o in short) else [o.candidate for o in short]
    progress(
        Note(
            f"{len(short)} contender(s) ran out of GPU memory beside others; evaluating "
            f"{len(again)} again, one at a time",
            problem.name,
        )
    )
    redone = _in_groups(problem, again, baseline, options, progress, 1)
    by_candidate = {id(o.candidate): o for o in redone.candidates}
    # One the budget left out has no outcome: its first, out of memory, says nothing of it.
    left = {id(c) for c in redone.not_evaluated}
    merged = tuple(by_candidate.get(id(o.candidate), o) for o in first.candidates if id(o.candidate) not in left)
    base = redone.baseline if any(o is first.baseline for o in short) else first.baseline
    evaluation = Evaluation(problem, first.environment, base, merged, first.not_evaluated + redone.not_evaluated)
    return _unless_still_short(evaluation, options)


def _in_groups(
    problem: Problem,
    candidates: list[CandidateSource],
    baseline: CandidateSource | None,
    options: EvalOptions,
    progress: Progress,
    size: int,
) -> Evaluation:
    """Candidates evaluated `size` at a time with the reference and the baseline only, their
    speedups against that run's own timing of the baseline (as every speedup is). Fewer at once
    in one run is not enough: every contender's worker holds memory while it waits (its CUDA
    graphs' static buffers, 12.8 GiB each on KernelBench's 19_ReLU on the H100). A group of
    several gets _evaluate_fresh's own fallbacks, down to one at a time; a candidate whose run
    alone still ran the reference out of memory is rejected for it; the baseline's outcome is
    from a run where it fit, if any did. After the first group, run or run out of memory, the
    problem's budget (`options.deadline`) stops new ones: on the H100 each of 46_Average_Pooling_3D's
    nine groups ran its reference out of memory in about 33 s, 300 s past a 60 s budget."""
    runs: list[Evaluation] = []
    outcomes: list[ContenderOutcome] = []
    left: list[CandidateSource] = []
    for start in range(0, len(candidates), size):
        if start and options.deadline is not None and time.monotonic() > options.deadline:
            # A group's own split may have left some out already, and said so: these are more.
            more = "more " if left else ""
            left.extend(candidates[start:])
            in_all = f" ({len(left)} in all)" if more else ""
            progress(
                Note(
                    f"the budget ran out: {len(candidates) - start} {more}candidate(s) not evaluated{in_all}",
                    problem.name,
                )
            )
            break
        group = candidates[start : start + size]
        # Once a run has accepted the baseline, later groups build and time it (each group's
        # speedups are against its own timing of it) but do not trial it again: on 19_ReLU on
        # the H100 each group's eight trials of the baseline and one candidate took 12.6 s.
        trialled = any(r.baseline is not None and r.baseline.verdict.accepted for r in runs)
        these = replace(options, baseline_trialled=options.baseline_trialled or trialled)
        try:
            if len(group) > 1:
                run = _evaluate_fresh(problem, group, baseline, these, progress)
            else:
                run = _evaluate_once(problem, group, baseline, replace(these, parallel=1), progress)
        except GpuOutOfMemory as exc:
            if options.beside_others and len(group) > 1:
                raise  # the problem runs again after the others, alone (bot.engine.loop.lanes)
            failed = CheckResult("call", False, f"beside the baseline alone, the reference ran out: {exc}")
            outcomes.extend(ContenderOutcome(c, "candidate", Verdict("rejected", (failed,)), ()) for c in group)
            continue
        runs.append(run)
        outcomes.extend(_timed_without_their_baseline(run))
        left.extend(run.not_evaluated)
    if not runs:  # not one candidate tried fits beside the reference: the problem's own failure
        tried = (
            "every candidate"
            if not left
            else f"each of the {len(outcomes)} candidate(s) tried before the budget ran out"
        )
        raise GpuOutOfMemory(
            f"{problem.path}: its reference ran out of GPU memory beside {tried} alone "
            f"({outcomes[0].verdict.checks[0].evidence})"
        )
    # The baseline's outcome from the first run where it fit: the one that trialled it.
    fits = [r.baseline for r in runs if r.baseline is not None and not ran_out_of_gpu_memory(r.baseline)]
    base = fits[0] if fits else runs[0].baseline
    return Evaluation(problem, runs[0].environment, base, tuple(outcomes), tuple(left))


def _timed_without_their_baseline(run: Evaluation) -> tuple[ContenderOutcome, ...]:
    """A run's candidates; where its baseline failed (the problem's baseline then comes from
    another run), an accepted one has no speedup, and its verdict says why in a passed check
    (BASELINE_LOST): on 47_Sum on the H100 one read only "not timed against a baseline". Not
    `not_timed`, which would make the cache keep it as a conclusion."""
    base = run.baseline
    if base is None or base.verdict.accepted:
        return run.candidates
    why = CheckResult(BASELINE_LOST, True, f"its baseline failed beside it: {'; '.join(base.verdict.reasons)}")
    return tuple(
        replace(o, verdict=replace(o.verdict, checks=(*o.verdict.checks, why)))
        if o.verdict.accepted and o.speedup is None
        else o
        for o in run.candidates
    )


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


def reference_precision(problem: Problem, options: EvalOptions) -> str:
    """What the reference worker computes in: the problem's oracle precision, or under
    `kernelbench` the problem's own dtype, as KernelBench compares."""
    return "native" if options.tolerance == TolerancePolicy.KERNELBENCH else problem.reference_precision


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
    # On a GPU, two or more candidates too large to hold at once go a few at a time (_in_groups).
    split = (
        Split(options.timing.finalists, replica_count)
        if len(candidates) > 1 and options.device == Device.CUDA
        else None
    )
    with open_session(problem, options, 1 + len(contenders) * replica_count, split) as session:
        ref_hash = source_hash(problem.source)
        workers: dict[str, WorkerClient] = {}
        replicas = Replicas(session, replica_count, options.parallel)
        progress(EvaluationStarted(problem.name, len(contenders) + 1, len(problem.shapes_for(options.device))))

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
            ref_future = pool.submit(
                session.start, "reference", None, "Model", reference_precision(problem, options), ref_hash
            )
            list(pool.map(start, names, contenders))
            try:
                reference = ref_future.result()
            except WorkerFailure as exc:
                raise problem_failure(problem, exc) from None
        progress(session.started(time.monotonic() - began))
        environment = Environment.from_json(reference.env)
        workers = {n: workers[n] for n in names if n in workers}
        # On a GPU, code that picks its kernels by timing them does so with the GPU to itself.
        self_tuning = frozenset(
            n for n, c in zip(names, contenders) if options.device == Device.CUDA and tunes_on_first_call(c.source)
        )
        # Verified, not timed (bot.engine.evaluation.simulated); with a simulated baseline there is nothing to
        # time against. rmsnorm's interpreted Triton baseline took 181 ms a call on 2 vCPUs.
        simulated = {n for n, c in zip(names, contenders) if simulated_reason(c.source, options.device)}
        untimed = frozenset(names if baseline is not None and names[0] in simulated else simulated)
        if untimed:
            progress(
                Note(
                    f"{len(untimed)} contender(s) verified but not timed: they run under a simulator on this device",
                    problem.name,
                )
            )
        run = ProblemRun(
            problem,
            reference,
            workers,
            replicas,
            rng,
            options,
            environment,
            names,
            baseline is not None,
            progress,
            self_tuning,
            untimed,
            checks,
            per_shape,
        )
        for name in run.untrialled:  # its values were compared in that run; this one checks its timed calls
            checks[name].append(CheckResult("values", True, "its trials passed in an earlier group of this evaluation"))
        for shape in problem.shapes_for(options.device):
            evaluate_shape(run, shape)
    # A candidate whose first call the budget stopped was not evaluated, not rejected.
    cut = {n for n in names if any(c.name == BUDGET_CUT and not c.passed for c in checks[n])}
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
    kept = [o for n, o in zip(names, outcomes) if n not in cut and o is not base]
    left = tuple(c for n, c in zip(names, contenders) if n in cut)
    return Evaluation(problem, environment, base, tuple(kept), left)
