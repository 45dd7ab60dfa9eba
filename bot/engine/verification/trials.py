"""Correctness trials: fresh secret-seeded inputs, full outputs compared in the parent."""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bot.core.distributions import seed_for, timed_mix
from bot.core.domain import CheckResult, Problem, Shape
from bot.core.progress import Note, Progress, ReferenceTrial, TrialsStarted
from bot.core.settings import DEFAULTS, Device, TolerancePolicy
from bot.engine.verification import verify
from bot.engine.verification.compare import compare_values
from bot.engine.verification.tolerance import Rule, distribution_rules, shape_rules, widening_notes
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.engine.workers.gpulock import GpuHandover
from bot.engine.workers.phase_clock import current
from bot.protocol.messages import Gate, ReferenceRun, Release, Run


@dataclass
class ReferenceInfo:
    """What the reference worker told us about one shape (for roofline and reports)."""

    meta: list[dict[str, Any]] = field(default_factory=list)
    nbytes: int = 0
    flops: int | None = None
    inputs: list[str] = field(default_factory=list)  # e.g. "bfloat16[8192, 4096]"
    # The rule each output is held to on this shape's timed calls (bot.engine.verification.tolerance),
    # and per input distribution, in its trials (as tight as the reference's own error there).
    rules: tuple[Rule | None, ...] = ()
    trial_rules: dict[str, tuple[Rule | None, ...]] = field(default_factory=dict)
    # The footprint (bot.core.memory) on a GPU: the reference's peak device memory in its eager
    # model, and in all (the float64 copies too).
    native_peak_bytes: int | None = None
    peak_bytes: int | None = None


@dataclass
class TrialStats:
    max_abs_err: float = 0.0
    norm_rel_err: float = 0.0

    def add(self, details: Mapping[str, Any], standard_inputs: bool) -> None:
        # Absolute errors on the x100 'large' inputs are 100x larger by construction: the
        # report's "max abs err" speaks of standard inputs; the normwise error of all of them.
        if standard_inputs:
            self.max_abs_err = max(self.max_abs_err, float(details.get("max_abs_err", 0.0)))
        self.norm_rel_err = max(self.norm_rel_err, float(details.get("norm_rel_err", 0.0)))


def failure_check(exc: WorkerFailure) -> CheckResult:
    """A worker failure as a check result; the log tail is the evidence a human needs."""
    names = {
        "import": "import",
        "construct": "construction",
        "call": "call",
        "start": "start",
        "channel": "result channel",
    }
    name = names.get(exc.phase, exc.phase)
    reason = exc.reason
    # A compiler's complaint (nvcc, g++, Triton) is the evidence a kernel author needs.
    errors = [
        line.strip()
        for line in exc.log_tail.splitlines()
        if "error" in line.lower() and not line.lstrip().startswith(("File ", "Traceback", "raise "))
    ]
    if exc.phase == "import" and errors:
        reason += "\n" + "\n".join(errors[:6])
    return CheckResult(name, False, reason, {"log_tail": exc.log_tail})


def trial_plan(problem: Problem, rng: random.Random, per_distribution: int) -> list[tuple[str, int]]:
    """Each of the problem's distributions `per_distribution` times, in the order of
    bot.core.distributions ("standard" first); where that makes a single trial, one more standard
    draw, so that every contender is called at least twice with different inputs (no caching
    across calls). Each trial is a call of every contender, so no draw is added beyond that."""
    plan = [(d, seed_for(d, rng.getrandbits(58))) for d in problem.distributions for _ in range(per_distribution)]
    if len(plan) < 2:
        plan.append(("standard", seed_for("standard", rng.getrandbits(58))))
    return plan


def timed_seeds(problem: Problem, rng: random.Random, calls: int) -> list[int]:
    """The seeds of `calls` timed calls, each in a distribution of the problem's timed mix
    picked by the parent's secret rng: a timed call draws the same inputs as some trial could."""
    mix = timed_mix(problem.distributions)
    return [seed_for(rng.choice(mix), rng.getrandbits(58)) for _ in range(calls)]


def skip_notes(problem: Problem) -> list[str]:
    """One line per distribution the problem leaves out, with its stated reason."""
    return [f"{problem.name}: no {name} inputs: {reason}" for name, reason in problem.skipped_distributions.items()]


# Code whose first call picks its kernels by timing them: Triton's autotuner, Inductor's
# max-autotune, coordinate descent and multi-kernel reductions.
SELF_TUNING = re.compile(
    r"triton\.autotune|@autotune\b|max-autotune|coordinate_descent_tuning|"
    r"multi_kernel"
)


def tunes_on_first_call(source: str) -> bool:
    """Whether a contender times kernel variants during its first call. Beside other
    contenders' trials it would time them on a busy GPU and keep a pick that only looked
    faster (docs/verifier.md)."""
    return bool(SELF_TUNING.search(source))


Hold = Callable[[], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class TrialRun:
    """One shape's trials: the problem, the trusted reference worker, and how hard to try."""

    problem: Problem
    shape: Shape
    reference: WorkerClient
    rng: random.Random
    per_distribution: int
    timeouts: tuple[float, float]  # (first call, later calls)
    parallel: int  # contenders running their trials at once
    policy: TolerancePolicy = DEFAULTS.tolerance
    # Told the reference's figures before any contender's trial: waits until the problem's
    # memory is admitted (bot.engine.workspace.memory_budget) and says how many contenders run at once.
    admit: Callable[[ReferenceInfo], int] | None = None
    # Held while the reference's trials measure the shape (MemoryBudget.sizing).
    sizing: Hold = contextlib.nullcontext


@dataclass(frozen=True)
class DeviceHolds:
    """How trials hold the device: `shared` for a call, `exclusive` for timing kernel variants,
    which the contenders named in `alone` do at their first call."""

    alone: frozenset[str] = frozenset()
    shared: Hold = contextlib.nullcontext
    exclusive: Hold = contextlib.nullcontext


def run_trials(
    trial: TrialRun,
    contenders: Mapping[str, WorkerClient],
    progress: Progress,
    holds: DeviceHolds = DeviceHolds(),
) -> tuple[ReferenceInfo, dict[str, list[CheckResult]], dict[str, TrialStats]]:
    """Run every trial on every contender; a contender stops at its first failed check.

    References are computed first (one process); then contenders run their trials in
    parallel, each in its own worker, so compilation (torch.compile, Triton, nvcc) at the
    first call of many candidates overlaps; each call holds the device `shared`. Those named
    in `alone` tune by timing at their first call: where their worker can hook that timing
    (bot.harness.tuning_gate), they run beside the others too, and from a call's first timing of
    kernel variants to its end the device is held `exclusive`ly, as for a measurement; the
    others run their trials afterwards, one at a time, each holding the device exclusively
    throughout. Either way no other trial or timing of this bot, of this problem or another,
    runs beside their tuning.
    """
    parallel = trial.parallel  # it narrows below
    info = ReferenceInfo()
    plan = trial_plan(trial.problem, trial.rng, trial.per_distribution)
    clock = current()  # contenders' trials run on other threads
    for note in skip_notes(trial.problem):
        progress(Note(f"{note} (shape {trial.shape.name})"))

    def trials_of(
        worker: WorkerClient, hold: Callable[[], contextlib.AbstractContextManager]
    ) -> tuple[list[CheckResult], TrialStats]:
        try:
            return checked(worker, hold)
        finally:
            release_cache(worker, trial.timeouts[1])

    def checked(
        worker: WorkerClient, hold: Callable[[], contextlib.AbstractContextManager]
    ) -> tuple[list[CheckResult], TrialStats]:
        found: list[CheckResult] = []
        stats = TrialStats()
        for n, ((dist, seed), ref) in enumerate(zip(plan, refs)):
            label = f"shape {trial.shape.name}, {dist} inputs"
            held = hold()
            gate = held if isinstance(held, GpuHandover) else None
            try:
                # The first call builds what the contender compiles (torch.compile, Triton JIT).
                with held, clock.phase("compile" if n == 0 else "verify"):
                    got = ask(
                        worker,
                        Run(seed=seed, gate=gate is not None),
                        trial.timeouts[0] if n == 0 else trial.timeouts[1],
                        "call",
                        gate=gate,
                    )
            except WorkerFailure as exc:
                return found + [failure_check(exc)], stats
            results = [
                verify.check_output_meta(ref.meta, got.meta),
                verify.check_inputs_unchanged(ref.inputs_before, got.inputs_before, got.inputs_after, label),
                verify.check_threads(got.new_threads, "a call"),
            ]
            if all(r.passed for r in results):
                for i, (expected, actual) in enumerate(zip(ref.outputs, got.outputs)):
                    out_label = label if len(dtypes) == 1 else f"{label}, output {i}"
                    with clock.phase("verify"):
                        rule = info.trial_rules[dist][i]
                        result = compare_values(expected, actual, dtypes[i], rule, out_label)
                    stats.add(result.details, dist == "standard")
                    results.append(result)
            found.extend(results)
            if not all(r.passed for r in results):
                break
        return found, stats

    checks: dict[str, list[CheckResult]] = {}
    stats: dict[str, TrialStats] = {}
    with trial.sizing(), holds.shared():
        refs = []
        for n, (dist, seed) in enumerate(plan, 1):
            progress(ReferenceTrial(trial.problem.name, trial.shape.name, n, len(plan), dist))
            refs.append(
                # The first trial of a shape asks for a second answer: a nondeterministic problem
                # fails there, saying so, not later as its own baseline's mismatch.
                ask(trial.reference, ReferenceRun(seed=seed, repeat=n == 1), trial.timeouts[1] * 20, "problem")
            )  # float64 runs are slower
        info.meta, info.nbytes, info.flops = refs[0].meta, refs[0].bytes, refs[0].flops
        info.inputs = refs[0].input_meta
        info.native_peak_bytes = max((r.native_peak_bytes or 0 for r in refs), default=0) or None
        info.peak_bytes = max((r.peak_bytes or 0 for r in refs), default=0) or None
        dtypes = [m["dtype"] for m in info.meta]
        own_errors = [r.own_error for r in refs]
        info.rules = shape_rules(info.meta, trial.problem.tolerance, own_errors, trial.policy)
        info.trial_rules = distribution_rules(
            info.meta, trial.problem.tolerance, own_errors, [dist for dist, _ in plan], trial.policy
        )
        for note in widening_notes(info.meta, trial.problem.tolerance, info.rules):
            progress(Note(note, trial.problem.name, trial.shape.name))
        release_cache(trial.reference, trial.timeouts[1])
    if trial.admit is not None:
        parallel = trial.admit(info)
    gated: set[str] = set()
    for name in (n for n in contenders if n in holds.alone):
        try:
            if ask(contenders[name], Gate(), trial.timeouts[1], "call").hooks:
                gated.add(name)
        except WorkerFailure as exc:
            checks[name], stats[name] = [failure_check(exc)], TrialStats()
    beside = [name for name in contenders if (name not in holds.alone or name in gated) and name not in checks]
    progress(TrialsStarted(trial.problem.name, trial.shape.name, len(plan), len(beside), len(gated)))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {
            name: pool.submit(
                trials_of,
                contenders[name],
                (lambda: GpuHandover(holds.shared, holds.exclusive)) if name in gated else holds.shared,
            )
            for name in beside
        }
        for name, future in futures.items():
            checks[name], stats[name] = future.result()
    tuning = [name for name in contenders if name not in checks]
    if tuning:
        progress(
            Note(
                f"{len(tuning)} contender(s) that tune by timing: their trials one at a time, the GPU to each alone",
                trial.problem.name,
                trial.shape.name,
            )
        )
    for name in tuning:
        with holds.exclusive():
            checks[name], stats[name] = trials_of(contenders[name], contextlib.nullcontext)
    return info, {name: checks[name] for name in contenders}, {name: stats[name] for name in contenders}


def release_cache(worker: WorkerClient, timeout_s: float) -> None:
    """On a GPU, a worker's cached memory goes back as soon as its part of the work is done
    (its trials, or its timing of a shape), not when the last contender's is: the caches of
    idle contenders waiting for the others can run a large shape out of memory beside another
    problem."""
    if worker.device != Device.CUDA:
        return
    with contextlib.suppress(WorkerFailure):  # a dead worker has nothing cached; its failure is reported
        ask(worker, Release(), timeout_s, "call")
