"""What the commands show while and after they work: progress on stderr, tables on stdout."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import click

from bot.core.results import ProblemResult

_STARTED = time.monotonic()
_quiet = False  # -q: no progress at all


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def progress(message: str) -> None:
    # Seconds since the command started: where a long run spends its time, at a glance.
    if not _quiet:
        click.echo(f"... [{time.monotonic() - _STARTED:6.1f}s] {message}", err=True)


def progress_view(problems: Sequence[Any], device: str) -> Any:
    """Live bars per problem on a terminal, the plain lines elsewhere, nothing with -q."""
    from bot.progress_view import ProblemPlan
    from bot.progress_view import progress_view as view

    plans = [ProblemPlan(p.name, len(p.shapes_for(device))) for p in problems]
    return view(plans, quiet=_quiet, started=_STARTED)


def table(problems: Sequence[ProblemResult]) -> bool:
    """The outcome table, rendered as a table on a terminal (stdout); False where not shown."""
    from bot.progress_view import results_table

    return results_table(problems, sys.stdout)
