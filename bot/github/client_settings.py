"""How hard `GitHubClient` presses the API: its retries and its pacing, each default stated once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class GitHubRetry:
    """Retries of whole idempotent steps on 5xx and secondary rate limits."""

    max_attempts: int = 5  # attempts, the first included
    base_delay_s: float = 2.0  # doubled per attempt; a longer Retry-After wins
    # The wait between attempts: tests pass a recorder so no run sleeps for real.
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class GitHubPacing:
    """Page size and the pauses PyGithub keeps between requests. The pauses between writes are
    GitHub's advice against secondary rate limits; None turns a pause off (the API double)."""

    per_page: int = 100
    seconds_between_requests: float | None = 0.25
    seconds_between_writes: float | None = 1.0
