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
    # The publish job's timeout is 20 minutes (kernel-bot-publish.yml): a Retry-After above
    # 60 s fails the step at once (waiting less would only be refused again), and all waits of
    # one client together stop at 5 minutes, so a throttled publish ends with a clear error
    # well inside the job instead of being killed by it.
    max_wait_s: float = 60.0
    max_total_wait_s: float = 300.0
    # The wait between attempts: tests pass a recorder so no run sleeps for real.
    sleep: Callable[[float], None] = time.sleep

    def too_long(self, delay: float, waited_s: float) -> str | None:
        """Why waiting `delay` more seconds, after `waited_s`, would not end in time; None when it would."""
        if delay > self.max_wait_s:
            return (
                f"GitHub asked to wait {delay:.0f} s (Retry-After), over the {self.max_wait_s:.0f} s kernel-bot "
                "waits at once; nothing more is sent, run the publish job again later"
            )
        if waited_s + delay > self.max_total_wait_s:
            return (
                f"{waited_s + delay:.0f} s of waits in all would pass the {self.max_total_wait_s:.0f} s "
                "kernel-bot allows one publish; nothing more is sent, run the publish job again later"
            )
        return None


@dataclass(frozen=True)
class GitHubPacing:
    """Page size and the pauses PyGithub keeps between requests. The pauses between writes are
    GitHub's advice against secondary rate limits; None turns a pause off (the API double)."""

    per_page: int = 100
    seconds_between_requests: float | None = 0.25
    seconds_between_writes: float | None = 1.0
