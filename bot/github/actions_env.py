"""The variables GitHub Actions sets for a job step, and the event payload they point at.

Both stages read them: `bot run` (stage 1) for the event, the repository and its workspace,
`bot publish` (stage 2) for the repository, the token and the run. Nothing here runs at import
time and nothing imports more than the standard library and bot.core.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.core.errors import BotError

# What `bot run` cannot work without; the rest only adds outputs or links.
RUN_REQUIRED = ("GITHUB_EVENT_PATH", "GITHUB_EVENT_NAME", "GITHUB_REPOSITORY", "GITHUB_WORKSPACE")


@dataclass(frozen=True)
class GitHubEnv:
    """The variables GitHub Actions sets for a job step (None = not set)."""

    event_path: Path | None
    event_name: str | None
    repository: str | None  # "owner/name"
    workspace: Path | None
    api_url: str
    step_summary: Path | None
    output: Path | None
    sha: str | None
    run_id: str | None
    token: str | None = field(default=None, repr=False)  # never printed, never logged


def github_env(environ: Mapping[str, str] | None = None, required: Sequence[str] = RUN_REQUIRED) -> GitHubEnv:
    """Read the Actions variables; a missing `required` one is a BotError naming it."""
    environ = os.environ if environ is None else environ
    get: Callable[[str], str | None] = lambda var: environ.get(var, "").strip() or None
    path: Callable[[str], Path | None] = lambda var: Path(get(var)) if get(var) else None
    missing = [var for var in required if get(var) is None]
    if missing:
        raise BotError(
            f"{', '.join(missing)} not set: `bot run` runs inside GitHub Actions (use `bot dry-run` locally)"
        )
    repository = get("GITHUB_REPOSITORY")
    if repository is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise BotError(f"GITHUB_REPOSITORY={repository!r}: expected 'owner/name'")
    event_path = path("GITHUB_EVENT_PATH")
    if event_path is not None and "GITHUB_EVENT_PATH" in required and not event_path.is_file():
        raise BotError(f"GITHUB_EVENT_PATH={event_path}: no such file")
    return GitHubEnv(
        event_path=event_path,
        event_name=get("GITHUB_EVENT_NAME"),
        repository=repository,
        workspace=path("GITHUB_WORKSPACE"),
        api_url=(get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
        step_summary=path("GITHUB_STEP_SUMMARY"),
        output=path("GITHUB_OUTPUT"),
        sha=get("GITHUB_SHA"),
        run_id=get("GITHUB_RUN_ID"),
        token=get("GITHUB_TOKEN"),
    )


def read_event(env: GitHubEnv) -> dict[str, Any]:
    """The event payload at GITHUB_EVENT_PATH ({} when unset); BotError when unreadable."""
    try:
        return json.loads(env.event_path.read_text()) if env.event_path else {}
    except (OSError, ValueError) as exc:
        raise BotError(f"GITHUB_EVENT_PATH={env.event_path}: unreadable event ({exc})") from None
