"""Progress output: live bars per problem and phase on a terminal, plain lines elsewhere, none with -q."""

from __future__ import annotations

import io
import re

from click.testing import CliRunner
from conftest import CANDIDATES, PROBLEMS

from bot.cli import main
from bot.progress_view import ProblemPlan, progress_view, results_table

# What one problem's evaluation reports, in order (bot.engine: evaluate, trials, timing, pipeline).
RUN = [
    "[1/2] rotary_embedding",
    "rotary_embedding: search round, 3 candidate(s), 24 skipped",
    "rotary_embedding: starting 4 worker(s)",
    "rotary_embedding: 4 worker(s) started in 9.1 s (each: process 0.1 s, hello 0.2 s, import 8.0 s; medians)",
    "rotary_embedding [small] reference 1/4 (standard)",
    "rotary_embedding [small] 4 trials on 3 contender(s)",
    "rotary_embedding [small] verified: 3 of 3 contender(s) pass",
    "rotary_embedding [small] timing round 5: 2 contender(s), worst relative error 1.9%",
]
PLANS = [ProblemPlan("rotary_embedding", 1), ProblemPlan("rmsnorm", 1)]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _screen(text: str) -> str:
    return ANSI.sub("", text)


def test_terminal_shows_a_bar_per_problem_with_phase_counts_and_times():
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=True, width=160) as progress:
        for line in RUN:
            progress(line)
        bars = progress.view.tasks
        rotary = next(t for t in bars if t.description == "rotary_embedding")
        assert (rotary.completed, rotary.total) == (2, 3)  # workers started, small verified; timing left
        assert rotary.fields["phase"] == "time small: timing round 5"
        progress("rmsnorm: failed: problems/rmsnorm.py: get_inputs() returned int")
        progress("rotary_embedding [small] timed: 28 batches")
        progress("rotary_embedding: done, improved")
        assert (rotary.completed, rotary.finished) == (3, True)
        overall = next(t for t in bars if t.description == "all problems")
        assert (overall.completed, overall.total) == (1, 2)
    screen = _screen(stream.getvalue())
    assert "rotary_embedding" in screen and "3/3" in screen and "done, improved" in screen
    assert "1/2" in screen and re.search(r"\d:\d\d:\d\d", screen)  # elapsed and remaining
    assert "━" in screen  # drawn bars
    # A line that is no phase step (a failure) is printed above the bars as it was said.
    assert "rmsnorm: failed: problems/rmsnorm.py: get_inputs() returned int" in screen
    assert "timing round 5: 2 contender(s)" not in screen  # phase steps move bars, not the log
    assert "... [" not in screen


def test_a_second_round_extends_the_bar_instead_of_overflowing_it():
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=True, width=160) as progress:
        for line in RUN + ["rotary_embedding: 2 candidate(s) splitting shapes by input size"]:
            progress(line)
        rotary = next(t for t in progress.view.tasks if t.description == "rotary_embedding")
        assert (rotary.completed, rotary.total) == (3, 6)


def test_ci_logs_keep_the_plain_lines():
    stream = io.StringIO()
    with progress_view(PLANS, stream=stream, terminal=False) as progress:
        for line in RUN:
            progress(line)
    lines = stream.getvalue().splitlines()
    assert len(lines) == len(RUN) and "\x1b" not in stream.getvalue()
    assert all(re.fullmatch(r"\.\.\. \[ *\d+\.\ds\] " + re.escape(said), line) for line, said in zip(lines, RUN))


def test_quiet_prints_nothing_in_either_mode():
    for terminal in (True, False):
        stream = io.StringIO()
        with progress_view(PLANS, quiet=True, stream=stream, terminal=terminal) as progress:
            for line in RUN:
                progress(line)
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
    assert stream.getvalue().startswith("... [") and RUN[1] in stream.getvalue()
    assert not results_table([], io.StringIO(), terminal=True)
