"""Backends that run untrusted workers: `process` (default) and `docker`; bot.sandbox.backends
picks one by name."""

from bot.sandbox.base import Limits, RunningWorker, Sandbox, WorkerLaunch

__all__ = ["Limits", "RunningWorker", "Sandbox", "WorkerLaunch"]
