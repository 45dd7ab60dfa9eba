"""The worker processes of one evaluation: each contender's module written out and started
in the sandbox, built for each shape, replicated for timing, and given their GPU memory back;
all of them killed when the evaluation ends."""

from __future__ import annotations

import contextlib
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from bot.core.domain import CandidateSource, CheckResult, Problem
from bot.core.errors import BotError
from bot.core.memory import (
    gib,
    host_footprint_bytes,
    host_limit_bytes,
    margin_bytes,
    problem_footprints,
    replicas_that_fit,
    timing_bytes,
    together_bytes,
)
from bot.core.progress import MoreWorkersStarting, Progress, WorkersStarted
from bot.core.settings import Device
from bot.core.time_split import Waited
from bot.engine.evaluation.options import EvalOptions
from bot.engine.verification import verify
from bot.engine.verification.trials import ReferenceInfo, failure_check, release_cache
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.engine.workers.gpu_memory import gpu_process_memory
from bot.engine.workers.gpulock import gpu_shared
from bot.engine.workers.phase_clock import current
from bot.engine.workspace.memory_budget import MemoryBudget, Reservation
from bot.protocol.channel import machine_memory_bytes, outputs_bound
from bot.protocol.measures import output_nbytes
from bot.protocol.messages import Construct, Load
from bot.sandbox import WorkerLaunch
from bot.sandbox.backends import make_sandbox

_log = logging.getLogger(__name__)


def materialise(candidate: CandidateSource, folder: Path) -> Path:
    """The file a worker imports: the candidate's own path, or its source written out."""
    if candidate.path is not None:
        return candidate.path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{candidate.name}-{candidate.source_hash}.py"
    path.write_text(candidate.source)
    return path


class TooLargeTogether(BotError):
    """A GPU shape whose contenders cannot all be held at once: `fits` of them can (at least 1)."""

    def __init__(self, message: str, fits: int):
        super().__init__(message)
        self.fits = fits


@dataclass(frozen=True)
class Split:
    """An evaluation whose candidates may be evaluated a few at a time instead (two or more of
    them): how many contenders its timing keeps after screening, and each one's workers."""

    finalists: int
    replicas: int

    def timed_workers(self, contenders: int) -> int:
        """The most workers `contenders` keep in the timing: each one while they are screened,
        the baseline's and the finalists' replicas after (bot.engine.timing.interleaved)."""
        return max(contenders, min(contenders, self.finalists + 1) * self.replicas)


class Session:
    """Workers of one evaluation; all of them are killed when it closes."""

    def __init__(self, problem: Problem, options: EvalOptions, root: Path, workers: int, split: Split | None = None):
        self.problem, self.options, self.root = problem, options, root
        self.split = split
        self.sandbox = make_sandbox(options.sandbox, workers, options.allow_uncontained)
        self.workers: list[WorkerClient] = []
        # Set once the reference's first trial has sized the shape (`admit`): the longest
        # message a worker may send, a contender's resident-memory limit, the GPU reservation.
        self.message_bound: int | None = None
        self.memory_limit: int | None = None
        self.reservation: Reservation | None = None
        self.clock = current()  # workers start on other threads: the problem's clock, taken here
        if (budget := options.memory) is not None:
            self.reservation = budget.start(problem.name, workers, self._waits("its workers' start", budget))

    @property
    def worker_threads(self) -> int | None:
        if self.options.threads is not None:
            return self.options.threads
        return 1 if self.options.device == Device.CPU else None

    def start(self, label: str, module: Path | None, class_name: str, precision: str, source_hash: str) -> WorkerClient:
        with self.clock.phase("start"):
            return self._start(label, module, class_name, precision, source_hash)

    def _start(
        self, label: str, module: Path | None, class_name: str, precision: str, source_hash: str
    ) -> WorkerClient:
        readable = (self.problem.path, self.problem.root) + ((module,) if module else ())
        limits = self.options.limits
        if label == "reference":
            # The problem's own code, sized by nothing yet: what the machine has, less its margin.
            machine = machine_memory_bytes()
            limits = replace(limits, memory_mb=max(limits.memory_mb, (machine - margin_bytes(machine)) >> 20))
        launch = WorkerLaunch(
            workdir=self.root / f"w-{label}"[:80],
            cache_dir=self.options.cache_root / "compile" / source_hash,
            readable=readable,
            device=self.options.device,
            limits=limits,
            gpu_index=self.options.gpu_index,
        )
        # Named for people where GPU memory is accounted for: the problem, and the candidate's file.
        serves = module.stem.removesuffix(f"-{source_hash}") if module else ""
        worker = WorkerClient(
            self.sandbox,
            label,
            launch,
            self.worker_threads,
            describe=label == "reference",
            owner=f"{self.problem.name} {serves}".strip(),
        )
        self.workers.append(worker)
        self._bound(worker)
        began = time.monotonic()
        ask(
            worker,
            Load(
                problem=str(self.problem.path),
                module=str(module) if module else None,
                class_name=class_name,
                precision=precision,
            ),
            self.options.limits.import_timeout_s,
            "import",
        )
        worker.start_seconds["import"] = time.monotonic() - began
        return worker

    def _bound(self, worker: WorkerClient) -> None:
        """A contender's bounds; the reference runs the problem's own code, and its next shape
        may be larger than this one: the machine's memory bounds it."""
        if worker.label == "reference":
            return
        if self.message_bound is not None:
            worker.bound_messages(self.message_bound)
        if self.memory_limit is not None:
            worker.limit_memory(self.memory_limit)

    def admit(self, info: ReferenceInfo) -> int:
        """What the reference's trial measured, applied before any contender's trial: messages
        bounded by the shape's outputs (as many sets as a batch reveals), contenders' memory
        limits scaled to its footprint (bot.core.memory.host_limit_bytes), and the problem
        admitted to the device's memory; returns how many contenders run at once."""
        options = self.options
        copies = max(1, options.timing.checks_per_batch)
        bound = outputs_bound(info.meta, copies)
        self.message_bound = max(self.message_bound or 0, bound)
        floor = options.limits.memory_mb << 20
        limit = host_limit_bytes(host_footprint_bytes(info.nbytes), machine_memory_bytes(), floor)
        self.memory_limit = max(self.memory_limit or 0, limit)
        for worker in self.workers:
            self._bound(worker)
        if self.reservation is None or options.memory is None:
            return options.parallel
        # On the host: the reference's peak resident memory, as the kernel counts it.
        host_peak = next((w.running.peak_memory_bytes() for w in self.workers if w.label == "reference"), None)
        reference, each = problem_footprints(
            options.device, info.nbytes, info.native_peak_bytes, info.peak_bytes, host_peak
        )
        contenders = max(1, self.contenders())  # no more at once than there are
        self._unless_too_large_together(reference, info.nbytes, contenders)
        # Where outputs are compared in the reference, each contender's call borrows a block
        # of them from it (bot.engine.verification.expected.ExpectedOutputs).
        each += info.lent_bytes
        budget, at_once = options.memory, min(options.parallel, contenders)
        return budget.grow(self.reservation, reference, each, at_once, self._waits("its trials", budget))

    def _waits(self, what: str, budget: MemoryBudget) -> Waited:
        """A wait of this problem's `what` for room in `budget`'s memory, told to its clock."""
        return self.clock.waits(f"{self.problem.name}: {what}", f"room in {budget.where}'s memory")

    def contenders(self) -> int:
        """The contenders with workers here, each once, however many replicas it has (a
        replica's label is its contender's and "-r<k>": Replicas.ready). A problem's second shape
        is admitted after its first shape's replicas started."""
        return len({w.label.rsplit("-r", 1)[0] for w in self.workers if w.label != "reference"})

    def _unless_too_large_together(self, reference_peak: int, nbytes: int, contenders: int) -> None:
        """Raises TooLargeTogether where this evaluation's contenders, all in it together, would
        hold more than the device has (bot.core.memory.together_bytes) and can be split."""
        split, budget = self.split, self.options.memory
        if split is None or budget is None:
            return

        def need(at_once: int) -> int:
            timed = split.timed_workers(at_once)
            return together_bytes(reference_peak, nbytes, at_once, timed, budget.context_bytes)

        if need(contenders) > budget.usable:
            fits = max((m for m in range(1, contenders) if need(m) <= budget.usable), default=1)
            raise TooLargeTogether(
                f"its {contenders} contenders together would hold up to {gib(need(contenders))} of "
                f"{budget.where}'s {gib(budget.usable)} (calls of {gib(nbytes)} each, the reference's "
                f"trial {gib(reference_peak)}); {fits} would fit",
                fits,
            )

    def timing_replicas(
        self, info: ReferenceInfo, reference: WorkerClient, passed: Mapping[str, WorkerClient], wanted: int
    ) -> tuple[int, str | None]:
        """How many workers each contender is timed in on this shape: `wanted`, or fewer where
        the timing would not fit the GPU by what its workers hold after the trials, as the
        driver counts them (bot.core.memory.timing_bytes); with the note that says why."""
        budget = self.options.memory
        if self.options.device != Device.CUDA or budget is None or wanted < 2 or len(passed) < 2:
            return wanted, None
        used = gpu_process_memory(self.options.gpu_index)
        if used is None:
            return wanted, None

        def holds(worker: WorkerClient) -> int:
            return sum(used.get(pid, 0) for pid in worker.holder().pids)

        most = max(holds(reference), (info.peak_bytes or 0) + budget.context_bytes)
        each = [holds(w) for w in passed.values()]
        # Workers that stay alive untimed: rejected contenders', an earlier shape's replicas.
        timed = {id(w) for w in passed.values()} | {id(reference)}
        idle = sum(holds(w) for w in self.workers if id(w) not in timed)
        call_out = sum(output_nbytes(m) for m in info.meta)
        room = budget.usable - budget.held_bytes(but=self.reservation)
        finalists = self.options.timing.finalists

        def need(replicas: int) -> int:
            return idle + timing_bytes(most, each, replicas, finalists, max(0, info.nbytes - call_out), call_out)

        count = replicas_that_fit(lambda r: need(r) <= room, wanted)
        # Held from here, so that no other problem grows into what the timing holds (beside
        # it, three problems' references ran out of memory in KernelBench's shards); where not
        # even one worker each fits, it waits for room (bot.engine.workspace.memory_budget).
        if self.reservation is not None:
            budget.widen(self.reservation, need(count), self._waits("its timing", budget))
        figures = (
            f"the timing would hold up to {gib(need(wanted))} of {budget.where}'s {gib(room)} (the "
            f"reference {gib(most)}, the contenders {gib(sum(each))} after their trials, other workers "
            f"{gib(idle)}, calls of {gib(call_out)} out)"
        )
        # Where it fits too: what the estimate was, beside whatever runs out of memory later.
        _log.debug("%d worker(s) per contender: %s", count, figures)
        if count == wanted:
            return wanted, None
        return count, (
            f"timed in {count} worker(s) per contender, not {wanted}: {figures}; the intervals "
            "then do not carry how far processes of one code differ"
        )

    def sizing(self) -> contextlib.AbstractContextManager[None]:
        """Held while the reference's trials measure a shape on a GPU: one problem's at a time
        (bot.engine.workspace.memory_budget.MemoryBudget.sizing). On the host each worker's own
        memory limit bounds it."""
        if self.reservation is None or self.options.memory is None or self.options.device != Device.CUDA:
            return contextlib.nullcontext()
        budget = self.options.memory
        return budget.sizing(self.reservation, self._waits("its reference's turn to measure a shape", budget))

    def started(self, wall_s: float) -> WorkersStarted:
        """Where the workers' start-up went (medians over the workers)."""
        # Only workers whose import finished (the reference's always has, or the run stops).
        timed = [w.start_seconds for w in self.workers if "import" in w.start_seconds]
        process, hello, imported = (
            statistics.median(t[step] for t in timed) for step in ("process", "hello", "import")
        )
        return WorkersStarted(self.problem.name, len(timed), wall_s, process, hello, imported)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        if self.reservation is not None and self.options.memory is not None:
            self.options.memory.release(self.reservation)


@contextlib.contextmanager
def open_session(problem: Problem, options: EvalOptions, workers: int, split: Split | None = None) -> Iterator[Session]:
    with tempfile.TemporaryDirectory(prefix="kernel-bot-") as tmp:
        session = Session(problem, options, Path(tmp), workers, split)
        try:
            yield session
        finally:
            session.close()


def release_caches(workers: Sequence[WorkerClient], lock_key: str, timeout_s: float, parallel: int) -> None:
    """Workers done with a shape's timing (and the reference, done checking its calls) give
    their GPU memory back (captured graphs, the allocator's cache) before the next shape's
    trials: on the H200, swiglu's finished prefill timing, held by 15 workers, ran its decode
    trials out of memory beside another problem."""
    with gpu_shared(lock_key, current().waited), ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        list(pool.map(lambda w: release_cache(w, timeout_s), workers))


def construct_all(
    workers: dict[str, WorkerClient],
    construct: Construct,
    checks: dict[str, list[CheckResult]],
    timeout_s: float,
    parallel: int,
) -> dict[str, WorkerClient]:
    """Every contender still in the running built for a shape, `parallel` at a time (each in
    its own process); those built without new threads, in their order. One after another,
    32 contenders' builds (torch.compile's import among them) took 28 s of a 60 s search of
    rmsnorm's decode shape on the H200, longer than their verification and timing."""
    todo = [(n, w) for n, w in workers.items() if all(c.passed for c in checks[n])]
    clock = current()

    def build(item: tuple[str, WorkerClient]) -> CheckResult:
        name, worker = item
        try:
            with clock.phase("compile"):
                reply = ask(worker, construct, timeout_s, "construct")
        except WorkerFailure as exc:
            return failure_check(exc)
        return verify.check_threads(reply.new_threads, "import and construction")

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        built = list(pool.map(build, todo))
    for (name, _), check in zip(todo, built):
        checks[name].append(check)
    return {name: worker for (name, worker), check in zip(todo, built) if check.passed}


class Replicas:
    """More worker processes for contenders that are timed against each other
    (TimingOptions.replicas): started at the first shape that times them, built again for
    each shape, closed with the session."""

    def __init__(self, session: Session, count: int, parallel: int):
        self.session, self.count, self.parallel = session, max(1, count), parallel
        self.wanted = self.count  # the settings'; `count` is the current shape's (Session.timing_replicas)
        self.modules: dict[str, tuple[Path, CandidateSource]] = {}
        self.extra: dict[str, list[WorkerClient]] = {}

    def ready(
        self,
        passed: dict[str, WorkerClient],
        construct: Construct,
        checks: dict[str, list[CheckResult]],
        timeout_s: float,
        progress: Progress,
        warm: Callable[[str, WorkerClient], list[str]] | None = None,
    ) -> dict[str, tuple[WorkerClient, ...]]:
        """Each passed contender's workers for this shape, its first one first. A replica that
        fails to start or build fails its contender: it is the same code, so the contender
        itself is what does not work reliably. `warm(name, worker)`, where given, makes a
        replica's first call here and says the threads it left, beside other work, rather than
        in the timing's warm-up batch, where every other problem waits for it: torch.compile's
        first call (from the compile cache the first worker filled) took 2 to 13 s of those
        batches on 2 vCPUs."""
        if self.count == 1 or len(passed) < 2:
            return {n: (w,) for n, w in passed.items()}
        progress(MoreWorkersStarting(self.session.problem.name, self.count - 1, len(passed)))

        clock = self.session.clock

        def build(name: str) -> None:
            module, cand = self.modules[name]
            extra = self.extra.setdefault(name, [])
            try:
                while len(extra) < self.count - 1:
                    extra.append(
                        self.session.start(
                            f"{name}-r{len(extra) + 2}", module, cand.class_name, "native", cand.source_hash
                        )
                    )
                for worker in extra:
                    with clock.phase("compile"):
                        reply = ask(worker, construct, timeout_s, "construct")
                    checks[name].append(verify.check_threads(reply.new_threads, "import and construction (replica)"))
                    if warm is not None and checks[name][-1].passed:
                        with clock.phase("compile"):
                            left = warm(name, worker)
                        checks[name].append(verify.check_threads(left, "a call (replica)"))
            except WorkerFailure as exc:
                failed = failure_check(exc)
                checks[name].append(replace(failed, evidence=f"a second worker of the same code: {failed.evidence}"))

        with ThreadPoolExecutor(max_workers=max(1, self.parallel)) as pool:
            list(pool.map(build, passed))
        return {n: (w, *self.extra[n]) for n, w in passed.items() if all(c.passed for c in checks[n])}
