"""How progress reaches the person watching: live bars on a terminal, plain lines in CI logs.

The pipeline reports progress as lines (bot.core.domain.Progress). On a terminal those lines drive one
rich bar per problem, through its phases (construct: starting workers; verify: reference and
trials per shape; time: interleaved rounds per shape), with counts and elapsed and remaining
time; lines that are not phase steps (failures, notes) print above the bars. Elsewhere (CI logs,
pipes) each line is printed as it always was, with the seconds since the start.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from bot.core.domain import Progress
from bot.core.results import ProblemResult, Results

# "rmsnorm [small] verified: 3 of 3 contender(s) pass", "rmsnorm: search round, ..."
_LINE = re.compile(r"^(?P<name>[\w.-]+)(?: \[(?P<shape>[^\]]+)\])?:? (?P<rest>.*)$")
_ROUND = re.compile(r"^(search round|tuning step|LLM round|autotuning|\d+ candidate\(s\) splitting)")
_QUIET_STEPS = re.compile(
    r"^(reference \d+/\d+|\d+ trials on|timing round \d+|screened:|starting \d+ "
    r"(more )?worker|\d+ worker\(s\) started)"
)


@dataclass(frozen=True)
class ProblemPlan:
    """What the view knows before a problem starts: its name and how many shapes it has."""

    name: str
    shapes: int


def _plain(stream: IO[str], started: float) -> Progress:
    lock = threading.Lock()

    def line(message: str) -> None:
        # Seconds since the command started: where a long run spends its time, at a glance.
        with lock:
            print(f"... [{time.monotonic() - started:6.1f}s] {message}", file=stream, flush=True)

    return line


class LiveBars:
    """A Progress that moves rich bars: one per problem, and one over all problems."""

    def __init__(self, plans: Sequence[ProblemPlan], console: Any):
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
        self.shapes = {p.name: max(p.shapes, 1) for p in plans}
        self.overall = self.view.add_task("all problems", total=len(plans), phase="")
        # Steps per evaluation round: workers started (construct), then verified and timed per shape.
        self.tasks = {
            p.name: self.view.add_task(p.name, total=1 + 2 * self.shapes[p.name], phase="waiting", start=False)
            for p in plans
        }
        self.round_end: dict[str, int] = {p.name: 0 for p in plans}
        self.finished: set[str] = set()

    def __enter__(self) -> LiveBars:
        self.view.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.view.stop()

    def _new_round(self, name: str, task: int) -> None:
        steps = 1 + 2 * self.shapes[name]
        done = self.round_end[name]
        self.round_end[name] = done + steps
        total = self.round_end[name] if done else steps
        self.view.start_task(task)
        self.view.update(task, total=total, completed=done, phase="construct: starting workers")

    def __call__(self, message: str) -> None:
        with self.lock:
            if not self._step(message):
                self.view.console.print(message, markup=False, highlight=False)

    def _step(self, message: str) -> bool:
        """Move the bars for a phase step; False for a line the person should read as it is."""
        match = _LINE.match(message)
        if match is None or match["name"] not in self.tasks:
            return bool(re.match(r"^\[\d+/\d+\] [\w.-]+$", message))  # the lanes' "[3/13] gelu"
        name, shape, rest = match["name"], match["shape"], match["rest"]
        task = self.tasks[name]
        if rest.startswith("done"):
            self.view.update(task, completed=self.view.tasks[task].total, phase=rest)
            if name not in self.finished:
                self.finished.add(name)
                self.view.advance(self.overall)
            return True
        if _ROUND.match(rest):
            self._new_round(name, task)
            return True
        if shape and rest.startswith("verified:"):
            self.view.advance(task)
            self.view.update(task, phase=f"time {shape}")
            return True
        if shape and rest.startswith("timed:"):
            self.view.advance(task)
            self.view.update(task, phase=f"{shape} timed")
            return True
        if not _QUIET_STEPS.match(rest):
            return False
        if "worker(s) started" in rest:
            self.view.advance(task)
            self.view.update(task, phase="verify")
        elif shape and rest.startswith("reference"):
            self.view.update(task, phase=f"verify {shape}: {rest.split(' (')[0]}")
        elif shape and "trials on" in rest:
            self.view.update(task, phase=f"verify {shape}: {rest.split(' (')[0]}")
        elif shape and rest.startswith(("timing round", "screened")):
            self.view.update(task, phase=f"time {shape}: {rest.split(':')[0]}")
        else:
            self.view.update(task, phase=f"construct: {rest}")
        return True


def _have_rich() -> bool:
    """rich is a dependency of the bot, but a GPU image may carry only torch, triton, numpy and click."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def progress_view(
    plans: Sequence[ProblemPlan],
    quiet: bool = False,
    stream: IO[str] | None = None,
    terminal: bool | None = None,
    started: float | None = None,
    width: int | None = None,
) -> Iterator[Progress]:
    """The Progress for a run: silent with `quiet`, live bars on a terminal, else plain lines."""
    stream = stream if stream is not None else sys.stderr
    if quiet:
        yield lambda _message: None
        return
    live = (stream.isatty() if terminal is None else terminal) and _have_rich()
    if not live:
        yield _plain(stream, time.monotonic() if started is None else started)
        return
    from rich.console import Console

    with LiveBars(plans, Console(file=stream, force_terminal=True, width=width)) as bars:
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
