"""Verify and measure contenders of one problem: the reference, the baseline and candidates
each in its own sandboxed worker, the verdicts judged here in the parent."""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
import random
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from bot import bench, verify
from bot.domain import (CandidateSource, source_hash, CheckResult, Environment, Measurement, Problem, Shape,
                        Speedup, Verdict)
from bot.errors import BotError, GpuOutOfMemory, HarnessError, ProblemError
from bot.gpulock import device_key, gpu_exclusive, gpu_shared
from bot.roofline import floor_us, peaks_for
from bot.sandbox import Limits, make_sandbox
from bot.timing import TimingOptions, TimingRecord, time_interleaved
from bot.trials import ReferenceInfo, TrialStats, failure_check, release_cache, run_trials, tunes_on_first_call
from bot.workers import WorkerClient, WorkerFailure

Progress = Callable[[str], None]


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
    # problem is raised as GpuOutOfMemory, for bot.lanes to run it again after the others.
    beside_others: bool = False
    cache_root: Path = Path.home() / ".cache" / "kernel-bot"
    use_cache: bool = False  # reuse verdicts and timings of candidates judged before (bot.cache)


@dataclass(frozen=True)
class ShapeOutcome:
    shape: str
    inputs: str  # e.g. "bfloat16[8192, 4096], bfloat16[4096]"
    output_dtype: str | None
    measurement: Measurement | None
    speedup: Speedup | None
    floor_us: float | None
    max_abs_err: float | None
    norm_rel_err: float | None

    @property
    def pct_of_floor(self) -> float | None:
        if self.floor_us is None or self.measurement is None:
            return None
        return 100.0 * self.floor_us / self.measurement.median_us

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape, "inputs": self.inputs, "output_dtype": self.output_dtype,
                "measurement": self.measurement.to_json() if self.measurement else None,
                **(self.speedup.to_json() if self.speedup else {"speedup": None, "speedup_ci": None}),
                "floor_us": self.floor_us, "pct_of_floor": self.pct_of_floor,
                "max_abs_err": self.max_abs_err, "norm_rel_err": self.norm_rel_err}


@dataclass(frozen=True)
class ContenderOutcome:
    candidate: CandidateSource
    role: str  # "baseline" | "candidate"
    verdict: Verdict
    shapes: tuple[ShapeOutcome, ...]

    @property
    def speedup(self) -> float | None:
        ratios = [s.speedup.ratio for s in self.shapes if s.speedup]
        return bench.geomean(ratios) if ratios and len(ratios) == len(self.shapes) else None

    @property
    def speedup_ci(self) -> tuple[float, float] | None:
        """Geometric mean of the per-shape bounds (each shape counts equally)."""
        if self.speedup is None:
            return None
        return (bench.geomean([s.speedup.ci_low for s in self.shapes]),
                bench.geomean([s.speedup.ci_high for s in self.shapes]))

    @property
    def median_us(self) -> float | None:
        return self.shapes[0].measurement.median_us if self.shapes and self.shapes[0].measurement else None

    def slower_shapes(self) -> list[str]:
        """Shapes on which this contender is significantly slower than the baseline: the same
        rule as a slowdown claim (the interval under 1/min_speedup), so a loss must be as
        clear as a gain. With "under 1" the H200 sweep refused cross_entropy's 4.7x-on-prefill
        split for 0.93x [0.92, 0.96] on decode: the wrapper's few microseconds of Python."""
        return [s.shape for s in self.shapes if s.speedup is not None and s.speedup.significance == "slower"]

    def significant(self, min_speedup: float) -> bool:
        """Its interval (over shapes) clears `min_speedup`, and no shape got slower: a gain on
        decode does not pay for a loss on prefill (one path per size is a split candidate)."""
        ci = self.speedup_ci
        return (self.verdict.accepted and ci is not None and ci[0] >= min_speedup
                and not self.slower_shapes())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.candidate.name,
                "path": str(self.candidate.path) if self.candidate.path else None,
                "source_hash": self.candidate.source_hash, "role": self.role,
                "origin": self.candidate.origin.to_json(), **self.verdict.to_json(),
                "speedup": self.speedup, "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None,
                "median_us": self.median_us, "slower_shapes": self.slower_shapes(),
                "shapes": [s.to_json() for s in self.shapes]}


@dataclass(frozen=True)
class Evaluation:
    problem: Problem
    environment: Environment
    baseline: ContenderOutcome | None
    candidates: tuple[ContenderOutcome, ...]


def _environment(env: dict[str, Any]) -> Environment:
    return Environment(device=env["device"], device_name=env.get("device_name", "?"),
                       torch=env["torch"], triton=env.get("triton"), cuda=env.get("cuda"),
                       driver=env.get("driver"), python=env["python"],
                       clocks=env.get("clocks", {}), host=env.get("host", ""))


def materialise(candidate: CandidateSource, folder: Path) -> Path:
    """The file a worker imports: the candidate's own path, or its source written out."""
    if candidate.path is not None:
        return candidate.path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{candidate.name}-{candidate.source_hash}.py"
    path.write_text(candidate.source)
    return path


class _Session:
    """Workers of one evaluation; all of them are killed when it closes."""

    def __init__(self, problem: Problem, options: EvalOptions, root: Path, workers: int):
        self.problem, self.options, self.root = problem, options, root
        self.sandbox = make_sandbox(options.sandbox, workers)
        self.workers: list[WorkerClient] = []

    @property
    def worker_threads(self) -> int | None:
        if self.options.threads is not None:
            return self.options.threads
        return 1 if self.options.device == "cpu" else None

    def start(self, label: str, module: Path | None, class_name: str, precision: str,
              source_hash: str) -> WorkerClient:
        readable = (self.problem.path, self.problem.root) + ((module,) if module else ())
        worker = WorkerClient(self.sandbox, label, self.options.device,
                              self.root / f"w-{label}"[:80],
                              self.options.cache_root / "compile" / source_hash, readable,
                              self.options.limits, self.options.gpu_index, self.worker_threads,
                              describe=label == "reference")
        self.workers.append(worker)
        began = time.monotonic()
        worker.request({"op": "load", "problem": str(self.problem.path),
                        "module": str(module) if module else None, "class_name": class_name,
                        "precision": precision}, self.options.limits.import_timeout_s, "import")
        worker.start_seconds["import"] = time.monotonic() - began
        return worker

    def start_summary(self, wall_s: float) -> str:
        """One line on where the workers' start-up went (medians over the workers)."""
        # Only workers whose import finished (the reference's always has, or the run stops).
        timed = [w.start_seconds for w in self.workers if "import" in w.start_seconds]
        parts = ", ".join(f"{step} {statistics.median(t[step] for t in timed):.1f} s"
                          for step in ("process", "hello", "import"))
        return f"{len(timed)} worker(s) started in {wall_s:.1f} s (each: {parts}; medians)"

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


@contextlib.contextmanager
def _session(problem: Problem, options: EvalOptions, workers: int) -> Iterator[_Session]:
    with tempfile.TemporaryDirectory(prefix="kernel-bot-") as tmp:
        session = _Session(problem, options, Path(tmp), workers)
        try:
            yield session
        finally:
            session.close()


OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def _says_out_of_memory(text: str) -> bool:
    return any(marker in text for marker in OUT_OF_MEMORY)


def _problem_failure(problem: Problem, exc: WorkerFailure) -> BotError:
    if _says_out_of_memory(exc.reason):
        # Before the phase: on the H200 a reference ran out of memory while building its
        # inputs beside 56 other workers, and was reported as a broken problem file.
        return GpuOutOfMemory(f"{problem.path}: reference worker ran out of GPU memory: {exc.reason}")
    if exc.phase in ("problem", "import", "construct"):
        return ProblemError(f"{problem.path}: {exc.reason}")
    return HarnessError(f"{problem.path}: reference worker failed: {exc.reason}")


def evaluate(problem: Problem, candidates: list[CandidateSource], baseline: CandidateSource | None,
             options: EvalOptions, progress: Progress = lambda _: None) -> Evaluation:
    """Verify every candidate (and the baseline) on every shape; time the accepted ones.

    With `options.use_cache`, candidates already judged against the same problem, baseline and
    machine stack are taken from the cache (bot.cache) instead of being run again."""
    if not options.use_cache:
        return _evaluate_fresh(problem, candidates, baseline, options, progress)
    from bot.cache import ResultCache, environment_key

    # The timing mode is part of what a cached time means (bot.timing.TimingOptions.mode).
    cache = ResultCache(options.cache_root, environment_key(options.device, options.gpu_index)
                        + f"|timing={options.timing.mode}|replicas={options.timing.replicas}",
                        options.min_speedup)
    cached = [cache.get(problem, baseline, c) for c in candidates]
    fresh = [c for c, hit in zip(candidates, cached) if hit is None]
    if len(fresh) < len(candidates):
        progress(f"{problem.name}: {len(candidates) - len(fresh)} candidate(s) from the cache")
    evaluation = _evaluate_fresh(problem, fresh, baseline, options, progress)
    by_candidate = {id(o.candidate): o for o in evaluation.candidates}
    for outcome in evaluation.candidates:
        cache.put(problem, baseline, outcome)
    merged = tuple(hit if hit is not None else by_candidate[id(c)] for c, hit in zip(candidates, cached))
    return Evaluation(problem, evaluation.environment, evaluation.baseline, merged)


def ran_out_of_gpu_memory(outcome: ContenderOutcome) -> bool:
    return not outcome.verdict.accepted and any(
        _says_out_of_memory(c.evidence) for c in outcome.verdict.checks if not c.passed)


def _short_of_memory(evaluation: Evaluation) -> list[ContenderOutcome]:
    """The contenders, baseline first where it is one, that ran out of GPU memory."""
    outcomes = ([evaluation.baseline] if evaluation.baseline else []) + list(evaluation.candidates)
    return [o for o in outcomes if ran_out_of_gpu_memory(o)]


def _evaluate_fresh(problem: Problem, candidates: list[CandidateSource], baseline: CandidateSource | None,
                    options: EvalOptions, progress: Progress) -> Evaluation:
    """One evaluation; on a GPU, contenders that ran out of memory beside the others are
    evaluated again, one worker at a time, before that counts against them (a candidate
    that needs more than the GPU has fails again alone)."""
    first = _evaluate_once(problem, candidates, baseline, options, progress)
    if options.device != "cuda" or len(candidates) + (baseline is not None) < 2:
        return first
    short = _short_of_memory(first)
    if not short:
        return first
    progress(f"{problem.name}: {len(short)} contender(s) ran out of GPU memory beside "
             "others; evaluating them again, one at a time")
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
    of memory while other problems shared the GPU: on the H200, swiglu's contenders did so
    beside three other problems, and would have been rejected for the others' memory."""
    still = [o.candidate.name for o in _short_of_memory(evaluation)]
    if still and options.beside_others:
        raise GpuOutOfMemory(f"{evaluation.problem.path}: {len(still)} contender(s) ran out of GPU "
                             f"memory even one at a time, beside other problems ({', '.join(still)})")
    return evaluation


def _evaluate_once(problem: Problem, candidates: list[CandidateSource], baseline: CandidateSource | None,
                   options: EvalOptions, progress: Progress) -> Evaluation:
    rng = random.Random(secrets.randbits(64))  # the secret seed: from the OS, never fixed
    contenders = ([baseline] if baseline else []) + list(candidates)
    names = [f"c{i}" for i in range(len(contenders))]
    checks: dict[str, list[CheckResult]] = {n: [] for n in names}
    per_shape: dict[str, list[ShapeOutcome]] = {n: [] for n in names}
    # Speedups compare timings from different processes: each contender gets replicas.
    replica_count = options.timing.replicas if baseline is not None else 1
    with _session(problem, options, 1 + len(contenders) * replica_count) as session:
        ref_hash = source_hash(problem.source)
        workers: dict[str, WorkerClient] = {}
        replicas = _Replicas(session, replica_count, options.parallel)
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
            ref_future = pool.submit(session.start, "reference", None, "Model",
                                     problem.reference_precision, ref_hash)
            list(pool.map(start, names, contenders))
            try:
                reference = ref_future.result()
            except WorkerFailure as exc:
                raise _problem_failure(problem, exc) from None
        progress(f"{problem.name}: {session.start_summary(time.monotonic() - began)}")
        environment = _environment(reference.env)
        workers = {n: workers[n] for n in names if n in workers}
        # On a GPU, code that picks its kernels by timing them does so with the GPU to itself.
        self_tuning = frozenset(n for n, c in zip(names, contenders)
                                if options.device == "cuda" and tunes_on_first_call(c.source))
        for shape in problem.shapes_for(options.device):
            _evaluate_shape(problem, shape, reference, workers, replicas, checks, per_shape, rng,
                            options, environment, baseline is not None, names, progress, self_tuning)
    outcomes = [ContenderOutcome(c, "baseline" if baseline is not None and i == 0 else "candidate",
                                 verify.judge(checks[n]), tuple(per_shape[n]))
                for i, (n, c) in enumerate(zip(names, contenders))]
    base = outcomes[0] if baseline is not None else None
    return Evaluation(problem, environment, base, tuple(outcomes[1:] if base else outcomes))


def _evaluate_shape(problem: Problem, shape: Shape, reference: WorkerClient,
                    workers: dict[str, WorkerClient], replicas: "_Replicas",
                    checks: dict[str, list[CheckResult]],
                    per_shape: dict[str, list[ShapeOutcome]], rng: random.Random,
                    options: EvalOptions, environment: Environment, has_baseline: bool,
                    names: list[str], progress: Progress, self_tuning: frozenset[str]) -> None:
    limits = options.limits
    seed = rng.getrandbits(62)
    construct = {"op": "construct", "overrides": dict(shape.overrides), "seed": seed}
    try:
        reference.request(construct, limits.construct_timeout_s * 4, "problem")
    except WorkerFailure as exc:
        raise _problem_failure(problem, exc) from None
    alive = _construct_all(workers, construct, checks, limits.construct_timeout_s, options.parallel)
    lock_key = device_key(options.device, options.gpu_index)
    try:
        info, trial_checks, stats = run_trials(
            problem, shape, reference, alive, rng, options.trials_per_distribution,
            (limits.first_call_timeout_s, limits.call_timeout_s), options.parallel, progress,
            alone=self_tuning, shared=lambda: gpu_shared(lock_key), exclusive=lambda: gpu_exclusive(lock_key))
    except WorkerFailure as exc:
        raise _problem_failure(problem, exc) from None
    for name, found in trial_checks.items():
        checks[name].extend(found)
    passed = {n: w for n, w in alive.items() if all(c.passed for c in checks[n])}
    progress(f"{problem.name} [{shape.name}] verified: {len(passed)} of {len(workers)} contender(s) pass")
    records: dict[str, TimingRecord] = {}
    if passed:
        try:
            records = time_interleaved(
                problem, shape, reference, passed, [m["dtype"] for m in info.meta], rng, options.timing,
                limits.call_timeout_s, progress, keep=frozenset(names[:1]) if has_baseline else frozenset(),
                replicate=lambda chosen: replicas.ready(chosen, construct, checks, limits.construct_timeout_s,
                                                        progress),
                exclusive=lambda: gpu_exclusive(lock_key),  # one measurement at a time per device
                retire=lambda done: _release_caches(done, lock_key, limits.call_timeout_s, options.parallel))
        except WorkerFailure as exc:
            raise _problem_failure(problem, exc) from None
        progress(f"{problem.name} [{shape.name}] timed: "
                 f"{sum(len(r.batch_sizes) for r in records.values())} batches")
        # The reference's float64 outputs for the timed calls' checks are held until the next
        # shape's references otherwise, through other problems' trials.
        _release_caches([reference], lock_key, limits.call_timeout_s, 1)
    floor = floor_us(info.nbytes, info.flops, peaks_for(environment.device_name)
                     if environment.device == "cuda" else None)
    for name, rec in records.items():
        checks[name].extend(rec.checks)
        m = rec.measurement()
        if m is not None and not rec.failed:
            if rec.event_us:
                checks[name].append(verify.check_stream_timing(rec.host_us, rec.event_us,
                                                               workers[name].overhead_us))
            checks[name].append(verify.check_roofline(m.median_us, floor))
    base_rec = records.get(names[0]) if has_baseline else None
    base_m = base_rec.measurement() if base_rec and all(c.passed for c in checks[names[0]]) else None
    # How far processes of one code disagree: from the accepted contenders' workers (a
    # rejected one's times may be of wrong work), never under the baseline's own.
    spread = bench.worker_spread((m for n, r in records.items()
                                  if all(c.passed for c in checks[n]) and (m := r.measurement()) is not None),
                                 trusted=base_m)
    for name in names:
        rec = records.get(name)
        m = rec.measurement() if rec and all(c.passed for c in checks[name]) else None
        sp = None
        if base_m is not None and m is not None and name != names[0]:
            sp = bench.speedup(base_m, m, options.min_speedup, seed=rng.getrandbits(32), spread=spread)
        st = stats.get(name, TrialStats())
        per_shape[name].append(ShapeOutcome(
            shape.name, _describe(info), info.meta[0]["dtype"] if info.meta else None, m, sp, floor,
            st.max_abs_err if name in stats else None, st.norm_rel_err if name in stats else None))


def _release_caches(workers: Sequence[WorkerClient], lock_key: str, timeout_s: float, parallel: int) -> None:
    """Workers done with a shape's timing (and the reference, done checking its calls) give
    their GPU memory back (captured graphs, the allocator's cache) before the next shape's
    trials: on the H200, swiglu's finished prefill timing, held by 15 workers, ran its decode
    trials out of memory beside another problem."""
    with gpu_shared(lock_key), ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(lambda w: release_cache(w, timeout_s), workers))


def _construct_all(workers: dict[str, WorkerClient], construct: dict[str, Any],
                   checks: dict[str, list[CheckResult]], timeout_s: float, parallel: int
                   ) -> dict[str, WorkerClient]:
    """Every contender still in the running built for a shape, `parallel` at a time (each in
    its own process); those built without new threads, in their order. One after another,
    32 contenders' builds (torch.compile's import among them) took 28 s of a 60 s search of
    rmsnorm's decode shape on the H200, longer than their verification and timing."""
    todo = [(n, w) for n, w in workers.items() if all(c.passed for c in checks[n])]

    def build(item: tuple[str, WorkerClient]) -> CheckResult:
        name, worker = item
        try:
            reply = worker.request(construct, timeout_s, "construct")
        except WorkerFailure as exc:
            return failure_check(exc)
        return verify.check_threads(reply["new_threads"], "import and construction")

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        built = list(pool.map(build, todo))
    for (name, _), check in zip(todo, built):
        checks[name].append(check)
    return {name: worker for (name, worker), check in zip(todo, built) if check.passed}


class _Replicas:
    """More worker processes for contenders that are timed against each other
    (TimingOptions.replicas): started at the first shape that times them, built again for
    each shape, closed with the session."""

    def __init__(self, session: _Session, count: int, parallel: int):
        self.session, self.count, self.parallel = session, max(1, count), parallel
        self.modules: dict[str, tuple[Path, CandidateSource]] = {}
        self.extra: dict[str, list[WorkerClient]] = {}

    def ready(self, passed: dict[str, WorkerClient], construct: dict[str, Any],
              checks: dict[str, list[CheckResult]], timeout_s: float,
              progress: Progress) -> dict[str, tuple[WorkerClient, ...]]:
        """Each passed contender's workers for this shape, its first one first. A replica that
        fails to start or build fails its contender: it is the same code, so the contender
        itself is what does not work reliably."""
        if self.count == 1 or len(passed) < 2:
            return {n: (w,) for n, w in passed.items()}
        progress(f"{self.session.problem.name}: starting {self.count - 1} more worker(s) for each of "
                 f"{len(passed)} contender(s)")

        def build(name: str) -> None:
            module, cand = self.modules[name]
            extra = self.extra.setdefault(name, [])
            try:
                while len(extra) < self.count - 1:
                    extra.append(self.session.start(f"{name}-r{len(extra) + 2}", module,
                                                    cand.class_name, "native", cand.source_hash))
                for worker in extra:
                    reply = worker.request(construct, timeout_s, "construct")
                    checks[name].append(verify.check_threads(reply["new_threads"],
                                                             "import and construction (replica)"))
            except WorkerFailure as exc:
                failed = failure_check(exc)
                checks[name].append(replace(failed, evidence=f"a second worker of the same code: {failed.evidence}"))

        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            list(pool.map(build, passed))
        return {n: (w, *self.extra[n]) for n, w in passed.items() if all(c.passed for c in checks[n])}


def _describe(info: ReferenceInfo) -> str:
    return ", ".join(info.inputs)
