"""Correctness trials: fresh secret-seeded inputs, full outputs compared in the parent."""

from __future__ import annotations

import contextlib
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bot.core.distributions import seed_for, timed_mix
from bot.core.domain import CheckResult, Problem, Shape
from bot.core.progress import Note, Progress, ReferenceTrial, TrialDone, TrialsStarted
from bot.core.settings import DEFAULTS, Device, TolerancePolicy
from bot.core.tolerance import Rule, distribution_rules, noise_notes, timed_rules, widening_notes
from bot.engine.verification import verify
from bot.engine.verification.budget_cut import FirstCallBudget
from bot.engine.verification.expected import ExpectedOutputs, Hold
from bot.engine.verification.tuning_note import alone_note
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.engine.workers.failures import says_out_of_memory
from bot.engine.workers.gpulock import GpuHandover
from bot.engine.workers.phase_clock import current
from bot.protocol.channel import close_fds
from bot.protocol.measures import output_nbytes
from bot.protocol.messages import Gate, ReferenceRun, Release, Run
from bot.protocol.values import compare_values


@dataclass
class ReferenceInfo:
    """What the reference worker told us about one shape (for roofline and reports)."""

    meta: list[dict[str, Any]] = field(default_factory=list)
    nbytes: int = 0
    flops: int | None = None
    inputs: list[str] = field(default_factory=list)  # e.g. "bfloat16[8192, 4096]"
    # The rule each output is held to on this shape's timed calls (bot.core.tolerance),
    # and per input distribution, in its trials (as tight as the reference's own error there).
    rules: tuple[Rule | None, ...] = ()
    trial_rules: dict[str, tuple[Rule | None, ...]] = field(default_factory=dict)
    # The footprint (bot.core.memory) on a GPU: the reference's peak device memory in its eager
    # model, and in all (the float64 copies too).
    native_peak_bytes: int | None = None
    peak_bytes: int | None = None
    # Where outputs are compared in the reference (ExpectedOutputs.lent): the blocks one
    # contender's call borrows from it, the outputs' bytes in their own dtypes.
    lent_bytes: int = 0


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


# One trial's reference outputs over this (as sent: 12 GiB of float64 for KernelBench's 19_ReLU)
# stay in the reference and are compared there (bot.harness.judge): through the channel and the
# bot's process they took tens of seconds a call.
LEND_OVER_BYTES = 1 << 30
# On a GPU the reference compares them in device memory, so from far less: the float64 of a
# 64 MiB float32 output, the size above which timed calls are compared where they lie too
# (bot.engine.timing.harness_cost). On the H100 KernelBench's 47_Conv3d_Mish_Tanh (945 MB of
# float64 a trial, eight contenders) spent 16 to 35 s on each of its later trials, none of
# whose calls took 2 s, its outputs crossing the channel to be compared on the bot's CPU.
LEND_OVER_BYTES_CUDA = 128 << 20


def lend_over(device: str) -> int:
    """Above how many bytes of a trial's reference outputs they are judged where they lie."""
    return min(LEND_OVER_BYTES, LEND_OVER_BYTES_CUDA) if device == Device.CUDA else LEND_OVER_BYTES


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
    # A trial's reference outputs (as sent: float64 for float32) over this many bytes are kept
    # in the reference and compared there, in blocks it lends each contender's call (ExpectedOutputs).
    lend_over: int | None = None  # None: outputs always travel to the bot
    budget: FirstCallBudget = FirstCallBudget()  # the problem's budget at each first call


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

    References are computed first (one process); then the contenders take the trials in turn,
    each trial's calls in parallel, each in its own worker, so compilation (torch.compile,
    Triton, nvcc) at the first call of many candidates overlaps; each call holds the device
    `shared`, and on a GPU each worker gives its cached memory back after each call, so that
    between calls no contender holds what another's call needs. Trial by trial, the bot's
    process holds one trial's reference outputs at a time where all would not fit
    (ExpectedOutputs). Those named
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
    checks: dict[str, list[CheckResult]] = {}
    stats: dict[str, TrialStats] = {}
    call_s: dict[str, float] = {}  # each contender's latest trial call, the parent's wall time

    def called(name: str) -> str:
        """A contender as people know it: the candidate its worker serves, else its label."""
        owner = str(getattr(contenders[name], "owner", ""))
        return owner.removeprefix(trial.problem.name).strip() or name

    def call(name: str, n: int, expected: list[Any] | None, hold: Hold) -> list[CheckResult]:
        """Contender `name`'s trial n, checked; on a GPU its cache given back after it. Where
        `expected` is None its outputs go into blocks the reference lends and are judged there."""
        worker, (dist, seed) = contenders[name], plan[n]
        label = f"shape {trial.shape.name}, {dist} inputs"
        held = hold()
        gate = held if isinstance(held, GpuHandover) else None
        try:
            lent = outputs.lend() if expected is None else None  # the reference's failure is the problem's
        except WorkerFailure as exc:
            if not says_out_of_memory(exc.reason):
                raise
            # The GPU full beside the other contenders' calls: this one runs again alone
            # (bot.engine.evaluation.evaluate), as one whose own call ran out of memory does.
            return [failure_check(WorkerFailure("call", f"no room for its outputs: {exc.reason}"))]
        limit = timeout = trial.timeouts[0] if n == 0 else trial.timeouts[1]
        try:
            # The first call builds what the contender compiles (torch.compile, Triton JIT).
            with held, clock.phase("compile" if n == 0 else "verify"), _timed(call_s, name):
                timeout = trial.budget.timeout(name, limit, time.monotonic()) if n == 0 else limit
                got = ask(
                    worker,
                    Run(seed=seed, gate=gate is not None, into=lent.sizes if lent else None),
                    timeout,
                    "call",
                    gate=gate,
                    fds=lent.fds if lent else (),
                )
        except WorkerFailure as exc:
            if lent is not None:
                outputs.judge(lent, None)
            if (cut := trial.budget.cut(exc, timeout, limit)) is not None:
                progress(Note(f"{called(name)}: {cut.evidence}", trial.problem.name, trial.shape.name))
            return [cut or failure_check(exc)]
        finally:
            close_fds(lent.fds if lent else [])
            release_cache(worker, trial.timeouts[1])
        alone = alone_note(called(name), gate.alone_s, call_s[name], got.tuning) if gate is not None else None
        if alone is not None:
            progress(Note(alone, trial.problem.name, trial.shape.name))
        results = [
            verify.check_output_meta(info.meta, got.meta),
            verify.check_inputs_unchanged(inputs_before[n], got.inputs_before, got.inputs_after, label),
            verify.check_threads(got.new_threads, "a call"),
        ]
        passed = all(r.passed for r in results)
        labels = [label if len(dtypes) == 1 else f"{label}, output {i}" for i in range(len(dtypes))]
        if lent is not None:
            with clock.phase("verify"):
                judged = outputs.judge(lent, list(zip(info.trial_rules[dist], labels)) if passed else None)
            for result in judged:
                stats[name].add(result.details, dist == "standard")
            results.extend(judged)
        elif passed:
            for i, (want, actual) in enumerate(zip(expected or [], got.outputs)):
                with clock.phase("verify"):
                    result = compare_values(want, actual, dtypes[i], info.trial_rules[dist][i], labels[i])
                stats[name].add(result.details, dist == "standard")
                results.append(result)
        return results

    def in_turn(names: list[str], hold_of: Callable[[str], Hold], at_once: int) -> None:
        """The trials of `names`, one trial after another, `at_once` contenders' calls at a time."""
        alive = list(names)
        for name in names:
            checks[name], stats[name] = [], TrialStats()
        with ThreadPoolExecutor(max_workers=max(1, at_once)) as pool:
            for n in range(len(plan)):
                if not alive:
                    break
                expected = outputs.of(n)
                found = list(pool.map(call, alive, [n] * len(alive), [expected] * len(alive), map(hold_of, alive)))
                expected = []  # where asked again, this trial's outputs go before the next's come
                for name, results in zip(alive, found):
                    checks[name].extend(results)
                took = alive
                alive = [name for name, results in zip(alive, found) if all(r.passed for r in results)]
                slowest = max(took, key=lambda name: call_s.get(name, 0.0))
                progress(
                    TrialDone(
                        trial.problem.name,
                        trial.shape.name,
                        n + 1,
                        len(plan),
                        len(took),
                        len(alive),
                        called(slowest),
                        call_s.get(slowest, 0.0),
                    )
                )

    def reference_trial(n: int) -> Any:
        dist, seed = plan[n - 1]
        progress(ReferenceTrial(trial.problem.name, trial.shape.name, n, len(plan), dist))
        # The first trial of a shape asks for a second answer: a nondeterministic problem fails
        # there, saying so, not later as its own baseline's mismatch. float64 runs are slower.
        request = ReferenceRun(seed=seed, repeat=n == 1, send_up_to=trial.lend_over)
        return ask(trial.reference, request, trial.timeouts[1] * 20, "problem")

    # The first trial measures the shape (its footprint, with the repeat's answers, the
    # largest): only it holds the memory no other problem may grow into, and the problem is
    # admitted on its figures. Holding that for every trial kept other problems waiting for
    # minutes behind a slow reference (KernelBench's 19_ReLU: 42 s a trial, eight trials).
    with trial.sizing(), holds.shared():
        refs = [reference_trial(1)]
    info.meta, info.nbytes, info.flops = refs[0].meta, refs[0].bytes, refs[0].flops
    info.inputs = refs[0].input_meta
    info.native_peak_bytes, info.peak_bytes = refs[0].native_peak_bytes, refs[0].peak_bytes
    if refs[0].kept:
        info.lent_bytes = sum(output_nbytes(m) for m in info.meta)
    if trial.admit is not None:
        parallel = trial.admit(info)
    with holds.shared():
        refs.extend(reference_trial(n) for n in range(2, len(plan) + 1))
        dtypes = [m["dtype"] for m in info.meta]
        own_errors, dists = [r.own_error for r in refs], [dist for dist, _ in plan]
        info.rules = timed_rules(info.meta, trial.problem.tolerance, own_errors, dists, trial.policy)
        info.trial_rules = distribution_rules(info.meta, trial.problem.tolerance, own_errors, dists, trial.policy)
        notes = widening_notes(info.meta, trial.problem.tolerance, info.rules) + noise_notes(
            info.meta, own_errors, dists
        )
        for note in notes:
            progress(Note(note, trial.problem.name, trial.shape.name))
        release_cache(trial.reference, trial.timeouts[1])
    inputs_before = [r.inputs_before for r in refs]
    outputs = ExpectedOutputs(
        trial.reference,
        trial.timeouts[1] * 20,  # float64 runs are slower
        plan,
        refs,
        holds.shared,
        lambda text: progress(Note(text, trial.problem.name, trial.shape.name)),
    )
    del refs  # where they do not fit, their outputs go now
    gated: set[str] = set()
    for name in (n for n in contenders if n in holds.alone):
        try:
            if ask(contenders[name], Gate(), trial.timeouts[1], "call").hooks:
                gated.add(name)
        except WorkerFailure as exc:
            checks[name], stats[name] = [failure_check(exc)], TrialStats()
    beside = [name for name in contenders if (name not in holds.alone or name in gated) and name not in checks]
    progress(TrialsStarted(trial.problem.name, trial.shape.name, len(plan), len(beside), len(gated)))
    in_turn(
        beside,
        lambda name: (lambda: GpuHandover(holds.shared, holds.exclusive)) if name in gated else holds.shared,
        parallel,
    )
    tuning = [name for name in contenders if name not in checks]
    if tuning:
        progress(
            Note(
                f"{len(tuning)} contender(s) that tune by timing: their trials one at a time, the GPU to each alone",
                trial.problem.name,
                trial.shape.name,
            )
        )
    # Under the exclusive hold the reference is asked with no hold of its own: a shared one
    # would wait on the exclusive hold this thread holds, forever.
    outputs.hold = contextlib.nullcontext
    for name in tuning:
        with holds.exclusive():
            in_turn([name], lambda _: contextlib.nullcontext, 1)
    return info, {name: checks[name] for name in contenders}, {name: stats[name] for name in contenders}


@contextlib.contextmanager
def _timed(seconds: dict[str, float], name: str) -> Iterator[None]:
    """`seconds[name]`: how long the block took, failed or not."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = time.perf_counter() - started


def release_cache(worker: WorkerClient, timeout_s: float) -> None:
    """On a GPU, a worker's cached memory goes back as soon as its part of the work is done
    (its trials, or its timing of a shape), not when the last contender's is: the caches of
    idle contenders waiting for the others can run a large shape out of memory beside another
    problem."""
    if worker.device != Device.CUDA:
        return
    with contextlib.suppress(WorkerFailure):  # a dead worker has nothing cached; its failure is reported
        ask(worker, Release(), timeout_s, "call")
