"""The loop: propose -> verify -> measure -> feedback, under a budget; then select honestly."""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from bot.core.domain import CandidateSource, Environment, Problem, Progress
from bot.core.errors import BotError, ProblemError
from bot.core.outcomes import ContenderOutcome, Evaluation
from bot.core.plausible import DEFAULT_MAX_PLAUSIBLE_SPEEDUP, Implausible, implausibility
from bot.core.results import ProblemResult
from bot.core.results import Skipped as SkippedResult
from bot.core.results_contenders import BestResult, ContenderResult
from bot.engine.evaluate import EvalOptions, evaluate
from bot.propose.base import H200, BudgetExhausted, Feedback, Hardware, ProposalRequest
from bot.propose.derive import Base, bases_for
from bot.propose.paths import path_of
from bot.propose.search import Skipped, search_candidates
from bot.propose.split import input_bytes, plan_split, split_candidate
from bot.propose.tuning import autotune_variants, setting_of, tunable_constants

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OptimizeOptions:
    strategy: str = "search"  # "search" | "llm" | "all"
    model: str | None = None
    backend: str = "triton"  # "triton" | "cuda"
    samples: int = 2
    budget_s: float = 900.0  # wall clock per problem (NVIDIA's loop used about 15 minutes)
    max_rounds: int = 5
    max_total_tokens: int | None = None
    min_speedup: float = 1.05
    max_plausible_speedup: float = DEFAULT_MAX_PLAUSIBLE_SPEEDUP  # above it: flagged, never claimed
    roofline_stop_pct: float = 90.0  # stop refining once the best reaches this % of the floor
    exclude: tuple[str, ...] = ()  # fnmatch patterns of search candidate names to leave out
    evaluation: EvalOptions = field(default_factory=EvalOptions)


@dataclass(frozen=True)
class Attempt:
    round: int
    outcome: ContenderOutcome

    @property
    def status(self) -> str:
        return self.outcome.verdict.status

    @property
    def reason(self) -> str:
        if not self.outcome.verdict.accepted:
            return "; ".join(self.outcome.verdict.reasons)
        if self.outcome.not_timed:
            return f"correct; not timed: {self.outcome.not_timed}"
        ci = self.outcome.speedup_ci
        if ci is None:
            return "accepted (not timed against a baseline)"
        slower = self.outcome.slower_shapes()
        return f"accepted: {self.outcome.speedup:.3f}x [{ci[0]:.3f}, {ci[1]:.3f}]" + (
            f"; significantly slower on {', '.join(slower)}" if slower else ""
        )

    def to_result(self, min_speedup: float) -> ContenderResult:
        return ContenderResult.of(self.outcome, self.round, self.reason, self.outcome.significant(min_speedup))


@dataclass(frozen=True)
class OptimizeResult:
    problem: Problem
    environment: Environment
    baseline: ContenderOutcome | None
    best: ContenderOutcome | None
    attempts: tuple[Attempt, ...]
    skipped: tuple[Skipped, ...]
    stopped: str
    wall_s: float
    llm: dict[str, Any] = field(default_factory=dict)  # tokens, cost, transcript
    error: str | None = None  # the problem could not be evaluated (one clear line)
    implausible: tuple[Implausible, ...] = ()  # timed, kept from a claim by the guard
    max_plausible_speedup: float = DEFAULT_MAX_PLAUSIBLE_SPEEDUP

    @property
    def outcome(self) -> str:
        if self.error:
            return "failed"
        if self.best:
            return "improved"
        if self.baseline is not None and self.baseline.not_timed:
            return "not timed"
        return "implausible" if self.implausible else "no significant improvement"

    def to_result(self, min_speedup: float) -> ProblemResult:
        """Its entry in results.json."""
        p = self.problem
        return ProblemResult(
            p.name,
            self.outcome,
            tuple(a.to_result(min_speedup) for a in self.attempts),
            str(p.path),
            p.target_relpath,
            BestResult.of(self.best) if self.best is not None else None,
            tuple(p.distributions),
            dict(p.skipped_distributions),
            self.error or None,
            self.baseline.not_timed if self.baseline else None,
            self.implausible,
            min_speedup,
            self.max_plausible_speedup,
            self.stopped,
            self.wall_s,
            ContenderResult.of(self.baseline) if self.baseline else None,
            tuple(SkippedResult(s.transformation, s.reason) for s in self.skipped),
            # A failed problem measured nothing: no environment for the reports to show.
            None if self.error else self.environment,
            {k: v for k, v in self.llm.items() if k != "transcript"},
        )

    def to_json(self, min_speedup: float) -> dict[str, Any]:
        return self.to_result(min_speedup).to_json()


def failed_result(problem: Problem, error: str, device: str, wall_s: float = 0.0) -> OptimizeResult:
    """A problem that could not be evaluated, as a result: the sweep goes on and reports it."""
    import platform

    nowhere = Environment(device, "", "", None, None, None, platform.python_version())
    return OptimizeResult(problem, nowhere, None, None, (), (), "failed", wall_s, error=error)


def select_best(
    attempts: list[Attempt], min_speedup: float, max_plausible: float = DEFAULT_MAX_PLAUSIBLE_SPEEDUP
) -> ContenderOutcome | None:
    """The fastest accepted candidate whose whole confidence interval clears `min_speedup`,
    and that the plausibility guard (bot.core.plausible) does not flag."""
    winners = [
        a.outcome
        for a in attempts
        if a.outcome.significant(min_speedup) and implausibility(a.outcome, max_plausible) is None
    ]
    return max(winners, key=lambda o: (o.speedup_ci[0], o.speedup), default=None)


def flagged(attempts: list[Attempt], max_plausible: float) -> tuple[Implausible, ...]:
    """Accepted candidates the plausibility guard flags, the largest speedup first."""
    found = [
        f
        for a in attempts
        if a.outcome.verdict.accepted and (f := implausibility(a.outcome, max_plausible)) is not None
    ]
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


def feedback_for(outcome: ContenderOutcome) -> Feedback:
    """What the next prompt learns about a candidate: the verifier's evidence, or its timing."""
    verdict = outcome.verdict
    if verdict.accepted:
        shape = outcome.shapes[0] if outcome.shapes else None
        return Feedback(
            outcome.candidate,
            "accepted",
            "passed every check",
            speedup=outcome.speedup,
            median_us=outcome.median_us,
            baseline_us=(
                shape.measurement.median_us / shape.speedup.ratio
                if shape and shape.speedup and shape.measurement
                else None
            ),
            floor_us=shape.floor_us if shape else None,
        )
    failed = [c for c in verdict.checks if not c.passed]
    first = failed[0]
    log_tail = str(first.details.get("log_tail", ""))[-1500:]
    if first.name == "import":
        status = "syntax_error" if "SyntaxError" in first.evidence else "compile_error"
    elif first.name in ("call", "construction", "start"):
        status = "runtime_error"
    else:
        status = "rejected"
    message = "\n".join(verdict.reasons) + (f"\n{log_tail}" if log_tail else "")
    return Feedback(outcome.candidate, status, message)


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
        f"{problem.name}: {what} in this round ({'; '.join(base.verdict.reasons)}); its candidates have no speedups"
    )


def _near_roofline(attempts: list[Attempt], pct: float) -> bool:
    return any(
        a.outcome.verdict.accepted and a.outcome.shapes and all((s.pct_of_floor or 0) >= pct for s in a.outcome.shapes)
        for a in attempts
    )


def optimize(
    problem: Problem,
    baseline: CandidateSource,
    options: OptimizeOptions,
    progress: Progress = lambda _: None,
    proposer: Any = None,
    hardware: Hardware = H200,
) -> OptimizeResult:
    """Search (no LLM) and/or LLM rounds with feedback; every candidate verified and timed
    against the same-run baseline; only a significant improvement is selected."""
    started = time.monotonic()
    deadline = started + options.budget_s
    device = options.evaluation.device
    attempts: list[Attempt] = []
    skipped: list[Skipped] = []
    evaluations: list[Evaluation] = []
    stopped = "done"

    def run(round_: int, cands: list[CandidateSource]) -> None:
        remaining = deadline - time.monotonic()
        ev_opts = options.evaluation
        if remaining < ev_opts.timing.time_cap_s * 4:  # keep the timing inside the budget
            ev_opts = replace(ev_opts, timing=replace(ev_opts.timing, time_cap_s=max(remaining / 4, 0.5)))
        evaluation = evaluate(problem, cands, baseline, ev_opts, progress)
        refuse_rejected_baseline(problem, evaluation, not evaluations, progress)
        evaluations.append(evaluation)
        attempts.extend(Attempt(round_, o) for o in evaluation.candidates)

    def descend(bases: list[Base], round_: int) -> None:
        # On a CPU Triton runs interpreted: which setting is faster there says nothing of a GPU.
        step = tuning_step(bases, attempts, round_) if device == "cuda" else []
        if step and time.monotonic() < deadline:
            progress(f"{problem.name}: tuning step, {len(step)} variant(s) around the fastest tuned one")
            run(round_, step)

    if options.strategy in ("search", "all"):
        cands, skipped = search_candidates(problem, bases_for(problem), device, options.evaluation.timing.mode)
        left_out = [c for c in cands if any(fnmatch.fnmatch(c.name, p) for p in options.exclude)]
        skipped = skipped + [Skipped(c.name, "excluded by --exclude") for c in left_out]
        cands = [c for c in cands if c not in left_out]
        progress(f"{problem.name}: search round, {len(cands)} candidate(s), {len(skipped)} skipped")
        run(0, cands)
        descend(bases_for(problem), 0)
        splits = [
            c
            for c in split_candidates(problem, baseline, attempts, evaluations[-1])
            if not any(fnmatch.fnmatch(c.name, p) for p in options.exclude)
        ]
        if splits and time.monotonic() < deadline:
            progress(f"{problem.name}: {len(splits)} candidate(s) splitting shapes by input size")
            run(0, splits)

    llm_info: dict[str, Any] = {}
    if options.strategy in ("llm", "all"):
        stopped = _llm_rounds(
            problem, baseline, options, proposer, hardware, attempts, run, deadline, progress, llm_info
        )
        best_llm = select_best(
            [a for a in attempts if a.outcome.candidate.origin.strategy == "llm"],
            options.min_speedup,
            options.max_plausible_speedup,
        )
        if best_llm is not None and time.monotonic() < deadline:
            llm_base = Base("llm", best_llm.candidate.source, "ModelNew")
            tuning_round = max(a.round for a in attempts) + 1
            variants = autotune_variants(llm_base, round_=tuning_round, limit=12)
            if variants:
                progress(f"{problem.name}: autotuning the best LLM kernel ({len(variants)} variants)")
                run(tuning_round, variants)
                descend([llm_base], tuning_round)

    if options.strategy == "search" and time.monotonic() > deadline:
        stopped = "budget"
    base = next((e.baseline for e in reversed(evaluations) if e.baseline), None)
    env = evaluations[-1].environment if evaluations else Environment(device, "?", "?", None, None, None, "?")
    bound = options.max_plausible_speedup
    return OptimizeResult(
        problem,
        env,
        base,
        select_best(attempts, options.min_speedup, bound),
        tuple(attempts),
        tuple(skipped),
        stopped,
        time.monotonic() - started,
        llm_info,
        implausible=flagged(attempts, bound),
        max_plausible_speedup=bound,
    )


def _llm_rounds(
    problem: Problem,
    baseline: CandidateSource,
    options: OptimizeOptions,
    proposer: Any,
    hardware: Hardware,
    attempts: list[Attempt],
    run: Callable[[int, list], None],
    deadline: float,
    progress: Progress,
    info: dict[str, Any],
) -> str:
    if proposer is None:
        from bot.propose.llm import LlmProposer

        if not options.model:
            raise BotError("the llm strategy needs --model (and OPENAI_API_KEY / OPENAI_BASE_URL)")
        proposer = LlmProposer(options.model, samples=options.samples, max_total_tokens=options.max_total_tokens)
    history: list[Feedback] = [feedback_for(a.outcome) for a in attempts][-6:]
    floor = next((s.floor_us for a in attempts for s in a.outcome.shapes if s.floor_us), None)
    current = baseline.source
    stopped = "max rounds"
    for round_ in range(1, options.max_rounds + 1):
        if time.monotonic() > deadline:
            stopped = "budget"
            break
        if _near_roofline(attempts, options.roofline_stop_pct):
            stopped = "near the roofline floor"
            break
        request = ProposalRequest(
            problem, current, hardware, floor, round_, options.samples, tuple(history), options.backend
        )
        progress(f"{problem.name}: LLM round {round_}")
        try:
            cands = proposer.propose(request)
        except BudgetExhausted as exc:
            stopped = f"token budget: {exc}"
            break
        history.extend(getattr(proposer, "last_failures", []))
        if cands:
            before = len(attempts)
            run(round_, cands)
            history.extend(feedback_for(a.outcome) for a in attempts[before:])
            for a in attempts[before:]:
                if a.outcome.verdict.accepted:
                    floor = floor or next((s.floor_us for s in a.outcome.shapes if s.floor_us), None)
    info.update(
        {
            "tokens": getattr(proposer, "tokens_used", 0),
            "cost_usd": getattr(proposer, "cost_usd", 0.0),
            "transcript": [e.to_json() for e in getattr(proposer, "transcript", [])],
        }
    )
    return stopped
