"""Candidates from files, and the baseline a problem is measured against."""

from __future__ import annotations

from pathlib import Path

from bot.core.domain import CandidateSource, Origin, Problem
from bot.core.errors import BotError


def load_candidate(path: str | Path) -> CandidateSource:
    """A candidate file as given by the user (its code is never imported here)."""
    file = Path(path).resolve()
    try:
        source = file.read_text()
    except OSError as exc:
        raise BotError(f"{path}: cannot read candidate ({exc.strerror})") from None
    return CandidateSource(name=file.stem, source=source, origin=Origin("file", str(path)), path=file)


def default_baseline(problem: Problem) -> CandidateSource:
    """The TARGET implementation if the problem declares one, else the reference itself."""
    if problem.target is not None:
        base = load_candidate(problem.target)
        return CandidateSource(
            name=f"target:{problem.target_relpath}",
            source=base.source,
            origin=Origin("target", problem.target_relpath or ""),
            path=base.path,
        )
    return CandidateSource(
        name="reference", source=problem.source, origin=Origin("reference"), path=problem.path, class_name="Model"
    )
