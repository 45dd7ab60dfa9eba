"""How progress reaches the person watching: live bars on a terminal, plain lines in CI logs,
nothing with -q.

The engine reports typed events (bot.core.progress). On a terminal they drive one rich bar per
problem through its phases (construct: starting workers; verify: reference and trials per shape;
time: interleaved rounds per shape), with counts and elapsed and remaining time, by each event's
type and fields; events that are not steps (failures, notes) print their line above the bars.
Elsewhere (CI logs, pipes, the commands without bars) each event's line is printed with the
seconds since the start.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from bot.core.progress import (
    EvaluationStarted,
    MoreWorkersStarting,
    Note,
    ProblemDone,
    ProblemFailed,
    ProblemStarted,
    Progress,
    ProgressEvent,
    ReferenceTrial,
    RoundStarted,
    Screened,
    ShapeTimed,
    ShapeVerified,
    TimingRound,
    TrialDone,
    TrialsStarted,
    WorkersStarted,
    silent,
)
from bot.core.results import ProblemResult, Results


class PlainLines:
    """The Progress for logs: each event's line with the seconds since `started`."""

    def __init__(self, stream: IO[str] | None = None, started: float | None = None):
        self.stream = stream
        self.started = time.monotonic() if started is None else started
        self.lock = threading.Lock()  # problems run on threads: one line at a time

    def __call__(self, event: ProgressEvent) -> None:
        # Without a stream of its own, stderr as it is at each line: click's test runner swaps it.
        stream = self.stream if self.stream is not None else sys.stderr
        # Seconds since the command started: where a long run spends its time, at a glance.
        with self.lock:
            print(f"... [{time.monotonic() - self.started:6.1f}s] {event.line()}", file=stream, flush=True)


class LiveBars:
    """A Progress that moves rich bars: one per problem, and one over all problems."""

    def __init__(self, problems: Sequence[str], console: Any):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.view = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<22}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[phase]:<34}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=console,
            refresh_per_second=4,
        )
        self.lock = threading.Lock()
        self.overall = self.view.add_task("all problems", total=len(problems), phase="")
        # A bar's total is unknown until its first evaluation says how many steps it takes.
        self.tasks = {name: self.view.add_task(name, total=None, phase="waiting", start=False) for name in problems}
        self.units: dict[str, int] = {name: 0 for name in problems}  # steps of the evaluations so far
        self.finished: set[str] = set()

    def __enter__(self) -> LiveBars:
        self.view.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.view.stop()

    def __call__(self, event: ProgressEvent) -> None:
        with self.lock:
            move = BAR_MOVES.get(type(event))
            if move is None or not move(self, event):
                self.view.console.print(event.line(), markup=False, highlight=False)

    def phase(self, problem: str, phase: str, advance: int = 0) -> bool:
        """Say a problem's phase on its bar, `advance` steps on; False where it has no bar."""
        task = self.tasks.get(problem)
        if task is None:
            return False
        self.view.update(task, advance=advance, phase=phase)
        return True

    def started(self, event: ProblemStarted) -> bool:
        task = self.tasks.get(event.problem)
        if task is not None:
            self.view.start_task(task)
        return self.phase(event.problem, "started" + (f" on GPU {event.gpu}" if event.gpu is not None else ""))

    def evaluation(self, event: EvaluationStarted) -> bool:
        """A further evaluation (a round, a re-run) extends the bar: it never overflows."""
        task = self.tasks.get(event.problem)
        if task is None:
            return False
        done = self.units[event.problem]
        self.units[event.problem] = done + event.units
        self.view.start_task(task)
        self.view.update(task, total=done + event.units, completed=done, phase="construct: starting workers")
        return True

    def done(self, event: ProblemDone) -> bool:
        task = self.tasks.get(event.problem)
        if task is None:
            return False
        total = self.view.tasks[task].total or 1
        self.view.update(task, total=total, completed=total, phase=f"done, {event.outcome}")
        self._finished(event.problem)
        return True

    def failed(self, event: ProblemFailed) -> bool:
        """Its bar stops where the failure came (unless it runs again); the line is printed too."""
        task = self.tasks.get(event.problem)
        if task is not None and event.again:
            self.view.update(task, phase="out of GPU memory: again alone")
        elif task is not None:
            self.view.update(task, phase="failed")
            self.view.stop_task(task)
            self._finished(event.problem)
        return False

    def _finished(self, problem: str) -> None:
        if problem not in self.finished:
            self.finished.add(problem)
            self.view.advance(self.overall)


# How each event moves the bars; False: print the event's line above them.
BAR_MOVES: dict[type[ProgressEvent], Callable[[LiveBars, Any], bool]] = {
    ProblemStarted: LiveBars.started,
    RoundStarted: lambda bars, e: bars.phase(e.problem, e.step),
    EvaluationStarted: LiveBars.evaluation,
    WorkersStarted: lambda bars, e: bars.phase(e.problem, "verify", advance=1),
    ReferenceTrial: lambda bars, e: bars.phase(e.problem, f"verify {e.shape}: reference {e.number}/{e.of}"),
    TrialsStarted: lambda bars, e: bars.phase(
        e.problem, f"verify {e.shape}: {e.trials} trials on {e.contenders} contender(s)"
    ),
    TrialDone: lambda bars, e: bars.phase(e.problem, f"verify {e.shape}: trial {e.number}/{e.of}"),
    ShapeVerified: lambda bars, e: bars.phase(e.problem, f"time {e.shape}", advance=1),
    MoreWorkersStarting: lambda bars, e: bars.phase(e.problem, f"time: {e.more} more worker(s) each"),
    Screened: lambda bars, e: bars.phase(e.problem, f"time {e.shape}: screened"),
    TimingRound: lambda bars, e: bars.phase(e.problem, f"time {e.shape}: timing round {e.round}"),
    ShapeTimed: lambda bars, e: bars.phase(e.problem, f"{e.shape} timed", advance=1),
    ProblemDone: LiveBars.done,
    ProblemFailed: LiveBars.failed,
    Note: lambda _bars, _e: False,
}


def _have_rich() -> bool:
    """rich is a dependency of the bot, but a GPU image may carry only torch, triton, numpy and click."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def progress_view(
    problems: Sequence[str],
    quiet: bool = False,
    stream: IO[str] | None = None,
    terminal: bool | None = None,
    started: float | None = None,
    width: int | None = None,
) -> Iterator[Progress]:
    """The Progress for a run of `problems` (their names): silent with `quiet`, live bars on a
    terminal, else plain lines."""
    stream = stream if stream is not None else sys.stderr
    if quiet:
        yield silent
        return
    live = (stream.isatty() if terminal is None else terminal) and _have_rich()
    if not live:
        yield PlainLines(stream, started)
        return
    from rich.console import Console

    with LiveBars(problems, Console(file=stream, force_terminal=True, width=width)) as bars:
        yield bars


def results_table(
    problems: Sequence[ProblemResult], stream: IO[str], terminal: bool | None = None, width: int | None = None
) -> bool:
    """The run's outcome per operator as a rich table on a terminal; False (nothing printed) elsewhere."""
    if not (stream.isatty() if terminal is None else terminal) or not _have_rich():
        return False
    from rich.console import Console
    from rich.table import Table

    from bot.report import data as rd

    table = Table(title="kernel-bot results", title_justify="left")
    for column, justify in (
        ("operator", "left"),
        ("outcome", "left"),
        ("best candidate", "left"),
        ("speedup [95% CI]", "right"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")
    claimed = {id(p) for p in rd.improved(Results(tuple(problems)))}
    for p in problems:
        chosen = rd.contender(p) if not p.not_timed else None
        value, ci = rd.best_speedup(p) if chosen else (None, None)
        note = (
            p.error
            or (f"correct; not timed: {p.not_timed}" if p.not_timed else "")
            or ("implausible; check the baseline" if p.implausible else "")
        )
        style = "bold green" if id(p) in claimed else "red" if rd.failed_problem(p) else None
        table.add_row(
            p.problem,
            p.outcome or "",
            chosen.name if chosen else "",
            rd.fmt_speedup(value, ci),
            str(note)[:160],
            style=style,
        )
    Console(file=stream, force_terminal=True, width=width).print(table)
    return True
