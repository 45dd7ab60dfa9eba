"""What the commands show while and after they work: progress on stderr, tables on stdout."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from bot.cli.progress_view import PlainLines, results_table
from bot.cli.progress_view import progress_view as view
from bot.core.progress import ProgressEvent
from bot.core.results import ProblemResult

_STARTED = time.monotonic()
_quiet = False  # -q: no progress at all
_lines = PlainLines(started=_STARTED)  # stderr as it is at each line


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def progress(event: ProgressEvent) -> None:
    """Plain lines on stderr, for the commands without bars (one problem, or stage 1 in CI)."""
    if not _quiet:
        _lines(event)


def progress_view(problems: Sequence[Any]) -> Any:
    """Live bars per problem on a terminal, the plain lines elsewhere, nothing with -q."""
    return view([p.name for p in problems], quiet=_quiet, started=_STARTED)


def table(problems: Sequence[ProblemResult]) -> bool:
    """The outcome table, rendered as a table on a terminal (stdout); False where not shown."""
    return results_table(problems, sys.stdout)
