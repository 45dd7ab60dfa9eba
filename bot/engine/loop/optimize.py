"""The loop: propose -> verify -> measure -> feedback, under a budget; then select honestly."""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bot.core.domain import CandidateSource, Environment, Problem, Skipped, source_sha256
from bot.core.errors import BotError, ProblemError
from bot.core.judge import Thresholds, judge, problem_outcome
from bot.core.outcomes import ContenderOutcome, Evaluation
from bot.core.plausible import Implausible
from bot.core.progress import Note, Progress, RoundStarted, silent
from bot.core.results import ProblemResult
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.settings import Device
from bot.core.time_split import TimeSplit
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.loop.attempts import Attempt, OptimizeOptions
from bot.engine.loop.llm_rounds import Rounds, llm_rounds
from bot.engine.loop.problem_run import ProblemRun
from bot.engine.workers.phase_clock import PhaseClock, recording
from bot.engine.workspace.device_name import device_name
from bot.propose.base import Hardware, Proposer, hardware_for
from bot.propose.derive import Base, bases_for
from bot.propose.paths import path_of
from bot.propose.search import search_candidates
from bot.propose.split import input_bytes, plan_split, split_candidate
from bot.propose.tuning import autotune_variants, setting_of, tunable_constants

log = logging.getLogger(__name__)
# Why a candidate has no outcome: the budget ran out before its group's turn
# (bot.engine.evaluation.evaluate._in_groups) or while its first call was still compiling
# (bot.engine.verification.budget_cut); the run's progress said which, when it happened.
NOT_EVALUATED = (
    "not evaluated: the budget ran out before its turn (candidates a few at a time, too large "
    "for the GPU together) or during its first call (compiling, autotuning)"
)


def problem_result(
    problem: Problem,
    baseline: ContenderOutcome | None,
    attempts: Sequence[Attempt],
    best: ContenderOutcome | None,
    thresholds: Thresholds,
    implausible: tuple[Implausible, ...] = (),
    error: str | None = None,
    **fields: Any,
) -> ProblemResult:
    """`problem`'s entry in results.json from what the engine evaluated and selected (`best`, and
    the `implausible` wins the guard flagged, both judged at `thresholds`): every contender in its
    results.json form, each attempt with the judge's word on its significance, and the outcome
    decided once (bot.core.judge.problem_outcome). `fields` are the rest of ProblemResult's own,
    by name (environment, stopped, wall_s, ...)."""
    chosen = BestResult.of(best) if best is not None else None
    not_timed = baseline.not_timed if baseline is not None else None
    return ProblemResult(
        problem.name,
        problem_outcome(error=error, best=chosen, not_timed=not_timed, implausible=implausible),
        attempts=tuple(a.judged(thresholds) for a in attempts),
        problem_path=str(problem.path),
        target=problem.target_relpath,
        best=chosen,
        distributions=tuple(problem.distributions),
        skipped_distributions=dict(problem.skipped_distributions),
        error=error or None,
        not_timed=not_timed,
        implausible=implausible,
        min_speedup=thresholds.min_speedup,
        max_plausible_speedup=thresholds.max_plausible_speedup,
        baseline=ContenderResult.of(baseline) if baseline is not None else None,
        **fields,
    )


def failed_result(
    problem: Problem,
    error: str,
    wall_s: float = 0.0,
    time_split: TimeSplit | None = None,
    thresholds: Thresholds | None = None,
) -> ProblemRun:
    """A problem that could not be evaluated, as a result: the sweep goes on and reports it
    (with where its time went, where that is known). It measured nothing: no environment, no
    tolerance for the reports to show."""
    wall_s = time_split.wall_s if time_split is not None else wall_s
    bars = thresholds or Thresholds()  # the run's, which its document records
    return ProblemRun(
        problem_result(
            problem, None, (), None, bars, error=error, stopped="failed", wall_s=wall_s, time_split=time_split
        )
    )


def select_best(attempts: list[Attempt], thresholds: Thresholds) -> ContenderOutcome | None:
    """The fastest candidate the judge (bot.core.judge) lets claim: accepted, its whole
    confidence interval over `min_speedup`, no shape slower, and not implausible."""
    winners = [a for a in attempts if judge(a.result, thresholds).claimed]
    best = max(winners, key=lambda a: (a.outcome.speedup_ci[0], a.outcome.speedup), default=None)  # type: ignore[index]
    return best.outcome if best is not None else None


def flagged(attempts: list[Attempt], thresholds: Thresholds) -> tuple[Implausible, ...]:
    """Accepted candidates the plausibility guard flags, the largest speedup first."""
    verdicts = [judge(a.result, thresholds) for a in attempts]
    found = [v.implausible for v in verdicts if v.accepted and v.implausible is not None]
    return tuple(sorted(found, key=lambda f: -(f.speedup or 0.0)))


def split_candidates(
    problem: Problem, baseline: CandidateSource, searched: list[Attempt], evaluation: Evaluation
) -> list[CandidateSource]:
    """Where small (launch-bound) shapes and large ones were won by different paths of the
    same base (e.g. CUDA graphs and torch.compile), one candidate that takes each path by
    input size."""
    base_shapes = evaluation.baseline.shapes if evaluation.baseline else ()
    names = [s.shape for s in base_shapes]
    sizes = [input_bytes(s.inputs) for s in base_shapes]
    if len(names) < 2 or any(b is None for b in sizes):
        return []
    out = []
    for base in bases_for(problem):
        speedups: dict[str, list[float | None]] = {}
        if base.source == baseline.source:
            speedups["eager"] = [1.0] * len(names)  # the baseline itself
        for attempt in searched:
            path = path_of(attempt.outcome.candidate.name, base.label)
            if path is None or not attempt.outcome.verdict.accepted:
                continue
            ratio = {s.shape: s.speedup.ratio if s.speedup else None for s in attempt.outcome.shapes}
            speedups[path] = [ratio.get(n) for n in names]
        split = plan_split(sizes, speedups)  # type: ignore[arg-type]
        if split is not None:
            out.append(split_candidate(base, split, round_=0))
    return out


def tuning_step(bases: list[Base], attempts: list[Attempt], round_: int = 0, limit: int = 8) -> list[CandidateSource]:
    """One step of coordinate descent on a Triton base's knobs: where the fastest accepted
    tuned variant of it beat the baseline (its whole interval over 1), the moves from that
    variant's setting that no attempt has tried yet."""
    out: list[CandidateSource] = []
    for base in bases:
        if not tunable_constants(base.source):
            continue
        mine = [
            a.outcome
            for a in attempts
            if a.outcome.candidate.name.startswith("tune-") and a.outcome.candidate.origin.parent == base.parent_hash
        ]
        timed = [o for o in mine if o.verdict.accepted and o.speedup_ci is not None]
        best = max(timed, key=lambda o: o.speedup or 0.0, default=None)
        if best is None or best.speedup_ci[0] <= 1.0:
            continue
        tried = frozenset(setting_of(o.candidate.source) for o in mine) | {setting_of(base.source)}
        out.extend(
            autotune_variants(
                Base(base.label, best.candidate.source, base.class_name),
                round_=round_,
                limit=limit,
                tried=tried,
                pairs=False,
            )
        )
    return out


def refuse_rejected_baseline(problem: Problem, evaluation: Evaluation, first: bool, progress: Progress) -> None:
    """Every speedup is against the baseline: one the verifier rejected leaves none to report.
    Without this a baseline rejected for a wrong TARGET or an unrecognised out-of-memory reads
    "no significant improvement", as if its candidates had lost.
    After a round that accepted it, a rejection is the machine's (memory, a flake), not the
    code's: that round's candidates go without speedups, and the rounds before are kept."""
    base = evaluation.baseline
    if base is None or base.verdict.accepted:
        return
    what = f"the baseline {base.candidate.name} was rejected by the verifier"
    if first:
        raise ProblemError(f"{problem.path}: {what}, so no speedup can be measured: " + "; ".join(base.verdict.reasons))
    progress(
        Note(f"{what} in this round ({'; '.join(base.verdict.reasons)}); its candidates have no speedups", problem.name)
    )


def optimize(
    problem: Problem,
    baseline: CandidateSource,
    options: OptimizeOptions,
    progress: Progress = silent,
    proposer: Proposer | None = None,
    hardware: Hardware | None = None,
) -> ProblemRun:
    """Search (no LLM) and/or LLM rounds with feedback; every candidate verified and timed
    against the same-run baseline; only a significant improvement is selected. The LLM is told
    the ceilings of `hardware`, by default those of the device this job runs on."""
    started = time.monotonic()
    deadline = started + options.budget_s
    device = options.evaluation.device
    attempts: list[Attempt] = []
    skipped: list[Skipped] = []
    evaluations: list[Evaluation] = []
    stopped = "done"
    clock = PhaseClock(started)  # where the wall time goes, on this process's own clock

    def run(round_: int, cands: list[CandidateSource]) -> None:
        remaining = deadline - time.monotonic()
        ev_opts = options.evaluation
        if remaining < ev_opts.timing.time_cap_s * 4:  # keep the timing inside the budget
            ev_opts = replace(ev_opts, timing=replace(ev_opts.timing, time_cap_s=max(remaining / 4, 0.5)))
        ev_opts = replace(ev_opts, deadline=deadline)
        try:
            with recording(clock):
                evaluation = evaluate(problem, cands, baseline, ev_opts, progress)
            refuse_rejected_baseline(problem, evaluation, not evaluations, progress)
        except BotError as exc:  # the problem fails: where its time went is still reported
            exc.time_split = clock.split()
            raise
        evaluations.append(evaluation)
        attempts.extend(Attempt(round_, o) for o in evaluation.candidates)
        skipped.extend(Skipped(c.name, NOT_EVALUATED) for c in evaluation.not_evaluated)

    def descend(bases: list[Base], round_: int) -> None:
        # On a CPU Triton runs interpreted: which setting is faster there says nothing of a GPU.
        step = tuning_step(bases, attempts, round_) if device == Device.CUDA else []
        if step and time.monotonic() < deadline:
            progress(RoundStarted(problem.name, "tuning", round_, len(step)))
            run(round_, step)

    if options.strategy in ("search", "all"):
        cands, skipped = search_candidates(problem, bases_for(problem), device, options.evaluation.timing.mode)
        left_out = [c for c in cands if any(fnmatch.fnmatch(c.name, p) for p in options.exclude)]
        skipped = skipped + [Skipped(c.name, "excluded by --exclude") for c in left_out]
        cands = [c for c in cands if c not in left_out]
        progress(RoundStarted(problem.name, "search", 0, len(cands), len(skipped)))
        run(0, cands)
        descend(bases_for(problem), 0)
        splits = [
            c
            for c in split_candidates(problem, baseline, attempts, evaluations[-1])
            if not any(fnmatch.fnmatch(c.name, p) for p in options.exclude)
        ]
        if splits and time.monotonic() < deadline:
            progress(RoundStarted(problem.name, "split", 0, len(splits)))
            run(0, splits)

    llm_info: dict[str, Any] = {}
    if options.strategy in ("llm", "all"):
        if hardware is None:
            hardware = hardware_for(_device_name(options, evaluations))
        rounds = Rounds(problem, baseline, options, hardware, attempts, run, deadline, progress)
        stopped = llm_rounds(rounds, proposer, llm_info)
        best_llm = select_best(
            [a for a in attempts if a.outcome.candidate.origin.strategy == "llm"], options.thresholds
        )
        if best_llm is not None and time.monotonic() < deadline:
            llm_base = Base("llm", best_llm.candidate.source, "ModelNew")
            tuning_round = max(a.round for a in attempts) + 1
            variants = autotune_variants(llm_base, round_=tuning_round, limit=12)
            if variants:
                progress(RoundStarted(problem.name, "autotune", tuning_round, len(variants)))
                run(tuning_round, variants)
                descend([llm_base], tuning_round)

    if options.strategy == "search" and time.monotonic() > deadline:
        stopped = "budget"
    base = next((e.baseline for e in reversed(evaluations) if e.baseline), None)
    env = evaluations[-1].environment if evaluations else Environment(device, "?", "?", None, None, None, "?")
    ended = time.monotonic()
    result = problem_result(
        problem,
        base,
        attempts,
        select_best(attempts, options.thresholds),
        options.thresholds,
        flagged(attempts, options.thresholds),
        environment=env,
        stopped=stopped,
        wall_s=ended - started,
        skipped=tuple(skipped),
        llm={k: v for k, v in llm_info.items() if k != "transcript"},
        tolerance=str(options.evaluation.tolerance),
        time_split=clock.split(ended),
    )
    sources = {source_sha256(a.outcome.candidate.source): a.outcome.candidate.source for a in attempts}
    return ProblemRun(result, sources, tuple(llm_info.get("transcript") or ()))


def _device_name(options: OptimizeOptions, evaluations: list[Evaluation]) -> str:
    """The device's name as the reference worker reported it, else as its driver reports it."""
    known = [e.environment.device_name for e in evaluations if e.environment.device_name not in ("", "?")]
    if known:
        return known[-1]
    return device_name(options.evaluation.device, options.evaluation.gpu_index)
