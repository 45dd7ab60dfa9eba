"""What the engine tells the person watching while it works, as typed events.

The views (bot.cli.progress_view) move bars by an event's type and fields, and print an event's
own line where they print at all, so rewording a line cannot stop a bar. Each event says one
step of one problem (or a note); its numbers are fields, its `line()` the sentence for a log.
Only the standard library is imported here: the engine imports it on the GPU-side path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


class ProgressEvent(ABC):
    """One step the engine reports; `line()` is how a plain log says it."""

    @abstractmethod
    def line(self) -> str: ...


Progress = Callable[[ProgressEvent], None]  # takes each event for the person watching


def silent(_event: ProgressEvent) -> None:
    """The Progress that shows nothing (-q, and callers that do not watch)."""


def _at(problem: str, shape: str) -> str:
    return f"{problem} [{shape}]"


@dataclass(frozen=True)
class ProblemStarted(ProgressEvent):
    """A lane took up a problem: the `number`-th of `of`, on GPU `gpu` where there are GPUs."""

    problem: str
    number: int
    of: int
    gpu: int | None = None

    def line(self) -> str:
        return f"[{self.number}/{self.of}] {self.problem}" + (f" on GPU {self.gpu}" if self.gpu is not None else "")


@dataclass(frozen=True)
class ProblemFailed(ProgressEvent):
    """A problem failed with `error`: said by its lane the moment it happens (with its number,
    and `again` where it runs again alone after the others), and by the pipeline at the end."""

    problem: str
    error: str
    number: int | None = None
    of: int | None = None
    again: bool = False

    def line(self) -> str:
        if self.number is None:
            return f"{self.problem}: failed: {self.error}"
        said = self.error if self.error.startswith(self.problem) else f"{self.problem}: {self.error}"
        return f"[{self.number}/{self.of}] failed: {said}" + (
            " (it runs again alone after the others)" if self.again else ""
        )


@dataclass(frozen=True)
class ProblemDone(ProgressEvent):
    """A problem finished with `outcome` (improved, no faster candidate, ...)."""

    problem: str
    outcome: str

    def line(self) -> str:
        return f"{self.problem}: done, {self.outcome}"


RoundKind = Literal["search", "tuning", "split", "llm", "autotune"]
_ROUNDS: dict[RoundKind, str] = {
    "search": "search round, {candidates} candidate(s), {skipped} skipped",
    "tuning": "tuning step, {candidates} variant(s) around the fastest tuned one",
    "split": "{candidates} candidate(s) splitting shapes by input size",
    "llm": "LLM round {number}",
    "autotune": "autotuning the best LLM kernel ({candidates} variants)",
}


@dataclass(frozen=True)
class RoundStarted(ProgressEvent):
    """A round of the optimiser's loop: which kind, its number, and the candidates it brings
    (None where they are not known before it runs: an LLM round proposes its own)."""

    problem: str
    kind: RoundKind
    number: int = 0
    candidates: int | None = None
    skipped: int = 0

    @property
    def step(self) -> str:
        return _ROUNDS[self.kind].format(number=self.number, candidates=self.candidates, skipped=self.skipped)

    def line(self) -> str:
        return f"{self.problem}: {self.step}"


@dataclass(frozen=True)
class EvaluationStarted(ProgressEvent):
    """One evaluation begins: `workers` processes (the reference's among them) for `shapes` shapes."""

    problem: str
    workers: int
    shapes: int

    @property
    def units(self) -> int:
        """Its steps for a bar: the workers started, then each shape verified and each timed."""
        return 1 + 2 * self.shapes

    def line(self) -> str:
        return f"{self.problem}: starting {self.workers} worker(s)"


@dataclass(frozen=True)
class WorkersStarted(ProgressEvent):
    """The evaluation's workers are up: how long it took, and the medians of where each one's
    start-up went (its process, its first reply, its imports)."""

    problem: str
    workers: int
    wall_s: float
    process_s: float
    hello_s: float
    import_s: float

    def line(self) -> str:
        return (
            f"{self.problem}: {self.workers} worker(s) started in {self.wall_s:.1f} s (each: process "
            f"{self.process_s:.1f} s, hello {self.hello_s:.1f} s, import {self.import_s:.1f} s; medians)"
        )


@dataclass(frozen=True)
class MoreWorkersStarting(ProgressEvent):
    """Replicas for timing: `more` workers for each of `contenders` that passed."""

    problem: str
    more: int
    contenders: int

    def line(self) -> str:
        return f"{self.problem}: starting {self.more} more worker(s) for each of {self.contenders} contender(s)"


@dataclass(frozen=True)
class ReferenceTrial(ProgressEvent):
    """The reference computes the `number`-th of `of` trials' outputs, inputs from `distribution`."""

    problem: str
    shape: str
    number: int
    of: int
    distribution: str

    def line(self) -> str:
        return f"{_at(self.problem, self.shape)} reference {self.number}/{self.of} ({self.distribution})"


@dataclass(frozen=True)
class TrialsStarted(ProgressEvent):
    """`trials` correctness trials on `contenders` at once; `gated` of them time their own
    kernel variants with the GPU to themselves."""

    problem: str
    shape: str
    trials: int
    contenders: int
    gated: int = 0

    def line(self) -> str:
        return f"{_at(self.problem, self.shape)} {self.trials} trials on {self.contenders} contender(s)" + (
            f", {self.gated} of them timing their kernel variants with the GPU to themselves" if self.gated else ""
        )


@dataclass(frozen=True)
class TrialDone(ProgressEvent):
    """Trial `number` of `of` answered by the `contenders` that took it, `passing` of them
    still passing; its slowest call was `slowest`'s, `seconds` long (the first trial's calls
    build what each contender compiles: where a shape's verification time goes)."""

    problem: str
    shape: str
    number: int
    of: int
    contenders: int
    passing: int
    slowest: str
    seconds: float

    def line(self) -> str:
        return (
            f"{_at(self.problem, self.shape)} trial {self.number}/{self.of}: {self.passing} of "
            f"{self.contenders} contender(s) pass; slowest call {self.slowest}, {self.seconds:.1f} s"
        )


@dataclass(frozen=True)
class ShapeVerified(ProgressEvent):
    """The trials of a shape are judged: `passed` of `contenders` pass."""

    problem: str
    shape: str
    passed: int
    contenders: int

    def line(self) -> str:
        return f"{_at(self.problem, self.shape)} verified: {self.passed} of {self.contenders} contender(s) pass"


@dataclass(frozen=True)
class Screened(ProgressEvent):
    """The first timed rounds left `remaining` contenders to time further."""

    problem: str
    shape: str
    remaining: int

    def line(self) -> str:
        return f"{_at(self.problem, self.shape)} screened: {self.remaining} contender(s) go on"


@dataclass(frozen=True)
class TimingRound(ProgressEvent):
    """Interleaved timing reached round `round`; the largest relative standard error among the
    `contenders` still timed is how far they are from stopping."""

    problem: str
    shape: str
    round: int
    contenders: int
    worst_rel_err: float

    def line(self) -> str:
        return (
            f"{_at(self.problem, self.shape)} timing round {self.round}: "
            f"{self.contenders} contender(s), worst relative error {self.worst_rel_err:.1%}"
        )


@dataclass(frozen=True)
class ShapeTimed(ProgressEvent):
    """A shape's timing is done after `batches` batches; `stopped_early` candidates were let go
    once their 99% intervals lay under `futile_below` (x the baseline)."""

    problem: str
    shape: str
    batches: int
    stopped_early: int = 0
    futile_below: float | None = None

    def line(self) -> str:
        line = f"{_at(self.problem, self.shape)} timed: {self.batches} batches"
        if self.stopped_early and self.futile_below is not None:
            line += f"; {self.stopped_early} candidate(s) stopped early: their 99% intervals were under "
            line += f"{self.futile_below:.3g}x"
        return line


@dataclass(frozen=True)
class Note(ProgressEvent):
    """Something to read, not a step: a cache hit, a re-run, a widened tolerance. `problem` and
    `shape` say where, when it is about one."""

    text: str
    problem: str | None = None
    shape: str | None = None

    def line(self) -> str:
        if self.problem is None:
            return self.text
        where = self.problem if self.shape is None else _at(self.problem, self.shape)
        return f"{where}: {self.text}"
