"""Progress output: live bars per problem and phase on a terminal, plain lines elsewhere, none with -q.
The bars move by the engine's typed events (bot.core.progress), never by reading their lines."""

from __future__ import annotations

import io
import re
from pathlib import Path

from click.testing import CliRunner
from conftest import CANDIDATES, PROBLEMS
from rich.console import Console

from bot.cli.main import main
from bot.cli.progress_view import BAR_MOVES, LiveBars, progress_view, results_table
from bot.core.progress import (
    EvaluationStarted,
    MoreWorkersStarting,
    Note,
    ProblemDone,
    ProblemFailed,
    ProblemStarted,
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
)

# What one problem's evaluation reports, in order (bot.engine: lanes, optimize, evaluate, trials,
# shape_run, timing), and the lines a log shows for it.
RUN = [
    ProblemStarted("rotary_embedding", 1, 2),
    RoundStarted("rotary_embedding", "search", 0, 3, 24),
    EvaluationStarted("rotary_embedding", 4, 1),
    WorkersStarted("rotary_embedding", 4, 9.1, 0.1, 0.2, 8.0),
    ReferenceTrial("rotary_embedding", "small", 1, 4, "standard"),
    TrialsStarted("rotary_embedding", "small", 4, 3),
    ShapeVerified("rotary_embedding", "small", 3, 3),
    TimingRound("rotary_embedding", "small", 5, 2, 0.019),
]
LINES = [
    "[1/2] rotary_embedding",
    "rotary_embedding: search round, 3 candidate(s), 24 skipped",
    "rotary_embedding: starting 4 worker(s)",
    "rotary_embedding: 4 worker(s) started in 9.1 s (each: process 0.1 s, hello 0.2 s, import 8.0 s; medians)",
    "rotary_embedding [small] reference 1/4 (standard)",
    "rotary_embedding [small] 4 trials on 3 contender(s)",
    "rotary_embedding [small] verified: 3 of 3 contender(s) pass",
    "rotary_embedding [small] timing round 5: 2 contender(s), worst relative error 1.9%",
]
PLANS = ["rotary_embedding", "rmsnorm"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _screen(text: str) -> str:
    return ANSI.sub("", text)


def test_each_event_says_its_step_as_the_log_has_always_read():
    assert [event.line() for event in RUN] == LINES


def test_terminal_shows_a_bar_per_problem_with_phase_counts_and_times():
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=True, width=160) as progress:
        for event in RUN:
            progress(event)
        bars = progress.view.tasks
        rotary = next(t for t in bars if t.description == "rotary_embedding")
        rmsnorm = next(t for t in bars if t.description == "rmsnorm")
        assert (rotary.completed, rotary.total) == (2, 3)  # workers started, small verified; timing left
        assert rotary.fields["phase"] == "time small: timing round 5"
        assert (rmsnorm.total, rmsnorm.fields["phase"]) == (None, "waiting")  # no evaluation yet: no total
        progress(ProblemFailed("rmsnorm", "problems/rmsnorm.py: get_inputs() returned int"))
        assert rmsnorm.fields["phase"] == "failed"
        progress(ShapeTimed("rotary_embedding", "small", 28))
        progress(ProblemDone("rotary_embedding", "improved"))
        assert (rotary.completed, rotary.finished) == (3, True)
        overall = next(t for t in bars if t.description == "all problems")
        assert (overall.completed, overall.total) == (2, 2)  # a failed problem is through as well
    screen = _screen(stream.getvalue())
    assert "rotary_embedding" in screen and "3/3" in screen and "done, improved" in screen
    assert "2/2" in screen and re.search(r"\d:\d\d:\d\d", screen)  # elapsed and remaining
    assert "━" in screen  # drawn bars
    # A line that is no phase step (a failure) is printed above the bars as it was said.
    assert "rmsnorm: failed: problems/rmsnorm.py: get_inputs() returned int" in screen
    assert "timing round 5: 2 contender(s)" not in screen  # phase steps move bars, not the log
    assert "... [" not in screen


def test_a_second_round_extends_the_bar_instead_of_overflowing_it():
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=True, width=160) as progress:
        for event in RUN + [
            RoundStarted("rotary_embedding", "split", 0, 2),
            EvaluationStarted("rotary_embedding", 3, 1),
        ]:
            progress(event)
        rotary = next(t for t in progress.view.tasks if t.description == "rotary_embedding")
        assert (rotary.completed, rotary.total) == (3, 6)  # the first evaluation's steps all counted
        assert rotary.fields["phase"] == "construct: starting workers"


def test_ci_logs_keep_the_plain_lines():
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=False) as progress:
        for event in RUN:
            progress(event)
    lines = stream.getvalue().splitlines()
    assert len(lines) == len(RUN) and "\x1b" not in stream.getvalue()
    assert all(re.fullmatch(r"\.\.\. \[ *\d+\.\ds\] " + re.escape(said), line) for line, said in zip(lines, LINES))


def test_quiet_prints_nothing_in_either_mode():
    for terminal in (True, False):
        stream = io.StringIO()
        with progress_view(PLANS, quiet=True, stream=stream, terminal=terminal) as progress:
            for event in RUN:
                progress(event)
        assert stream.getvalue() == ""


def test_final_table_is_a_table_on_a_terminal_only():
    from bot.core.results import ProblemResult
    from bot.core.results_contenders import BestResult

    best = BestResult("compile-default-reference", "source", "0" * 64, 6.37, (6.25, 6.48), ())
    problems = [
        ProblemResult("rotary_embedding", "improved", min_speedup=1.05, best=best),
        ProblemResult("rmsnorm", "not timed", not_timed="runs in Triton's interpreter on this CPU"),
    ]
    stream = io.StringIO()
    assert results_table(problems, stream, terminal=True, width=160)
    screen = _screen(stream.getvalue())
    assert "┃ operator" in screen and "6.37x [6.25, 6.48]" in screen and "correct; not timed" in screen
    assert not results_table(problems, io.StringIO(), terminal=False)


def test_cli_quiet_flag_silences_progress_and_plain_lines_otherwise():
    args = ["verify", str(PROBLEMS / "scale_add.py"), str(CANDIDATES / "honest.py"), "--device", "cpu"]
    loud = CliRunner().invoke(main, args, catch_exceptions=False)
    assert loud.exit_code == 0 and re.search(r"^\.\.\. \[ *\d+\.\ds\] scale_add", loud.stderr, re.M)
    quiet = CliRunner().invoke(main, ["-q", *args], catch_exceptions=False)
    assert quiet.exit_code == 0 and quiet.stderr == "" and "ACCEPTED" in quiet.stdout


def test_a_terminal_without_rich_gets_the_plain_lines(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "rich", None)  # as on a GPU image without it
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=True) as progress:
        progress(RUN[1])
    assert stream.getvalue().startswith("... [") and LINES[1] in stream.getvalue()
    assert not results_table([], io.StringIO(), terminal=True)


# One of each event the engine reports: a type added without one fails the test below.
SAMPLES: dict[type[ProgressEvent], ProgressEvent] = {
    ProblemStarted: ProblemStarted("rmsnorm", 2, 2, gpu=1),
    ProblemFailed: ProblemFailed("rmsnorm", "rmsnorm: out of memory", 2, 2, again=True),
    ProblemDone: ProblemDone("rmsnorm", "no faster candidate"),
    RoundStarted: RoundStarted("rmsnorm", "llm", 2),
    EvaluationStarted: EvaluationStarted("rmsnorm", 3, 2),
    WorkersStarted: WorkersStarted("rmsnorm", 3, 4.0, 0.1, 0.2, 3.5),
    MoreWorkersStarting: MoreWorkersStarting("rmsnorm", 1, 2),
    ReferenceTrial: ReferenceTrial("rmsnorm", "large", 2, 8, "shifted"),
    TrialsStarted: TrialsStarted("rmsnorm", "large", 8, 2, gated=1),
    TrialDone: TrialDone("rmsnorm", "large", 1, 8, 2, 1, "compile-max-autotune", 84.2),
    ShapeVerified: ShapeVerified("rmsnorm", "large", 1, 2),
    Screened: Screened("rmsnorm", "large", 3),
    TimingRound: TimingRound("rmsnorm", "large", 10, 2, 0.004),
    ShapeTimed: ShapeTimed("rmsnorm", "large", 40, stopped_early=1, futile_below=1.02),
    Note: Note("1 candidate(s) from the cache", "rmsnorm"),
}


def _event_types(kind: type = ProgressEvent) -> set[type]:
    found = set()
    for sub in kind.__subclasses__():
        found |= {sub} | _event_types(sub)
    return found


def _bar(bars: LiveBars) -> tuple:
    task = bars.view.tasks[bars.tasks["rmsnorm"]]
    return task.completed, task.total, task.started, dict(task.fields)


def test_every_event_type_has_a_line_and_moves_the_bars_or_is_printed_above_them():
    assert set(SAMPLES) == _event_types() == set(BAR_MOVES)
    for kind, event in SAMPLES.items():
        assert type(event) is kind and event.line().strip() and "\n" not in event.line(), kind
        stream = io.StringIO()
        bars = LiveBars(["rmsnorm"], Console(file=stream, force_terminal=True, width=200))
        before = _bar(bars)
        bars(event)
        moved, printed = _bar(bars) != before, event.line() in _screen(stream.getvalue())
        assert moved or printed, kind


def test_the_engine_reports_every_event_type():
    engine = " ".join(p.read_text() for p in (Path(__file__).resolve().parents[1] / "bot" / "engine").rglob("*.py"))
    assert all(f"{kind.__name__}(" in engine for kind in _event_types()), "an event no one reports"


def test_each_line_carries_its_numbers():
    lines = {kind: event.line() for kind, event in SAMPLES.items()}
    assert lines[ProblemStarted] == "[2/2] rmsnorm on GPU 1"
    assert lines[ProblemFailed] == "[2/2] failed: rmsnorm: out of memory (it runs again alone after the others)"
    assert ProblemFailed("rmsnorm", "get_inputs() returned int").line() == "rmsnorm: failed: get_inputs() returned int"
    assert lines[RoundStarted] == "rmsnorm: LLM round 2"
    assert lines[TrialsStarted].endswith(", 1 of them timing their kernel variants with the GPU to themselves")
    assert lines[ShapeTimed] == (
        "rmsnorm [large] timed: 40 batches; 1 candidate(s) stopped early: their 99% intervals were under 1.02x"
    )
    assert lines[Note] == "rmsnorm: 1 candidate(s) from the cache"
    assert Note("skipped", "rmsnorm", "large").line() == "rmsnorm [large]: skipped" and Note("x").line() == "x"
