"""Domain errors. The CLI maps every `BotError` to one clear line and exit code 2."""

from __future__ import annotations

from bot.core.time_split import TimeSplit


class BotError(Exception):
    """Unusable input or environment: a bad problem file, a missing token, bad config."""

    # Where a problem's time went before it failed (set where it is known: bot.engine.loop.optimize),
    # so that a failed problem still reports it.
    time_split: TimeSplit | None = None


class ProblemError(BotError):
    """A problem file that cannot be used (import error, missing function, wrong return type)."""


class HarnessError(BotError):
    """The harness itself failed (not the candidate): e.g. the reference worker died."""


class GpuOutOfMemory(HarnessError):
    """The reference worker ran out of GPU memory: the machine was full (other problems'
    workers), not the problem's fault; a sweep runs that problem again, alone."""
