"""Backends that run untrusted workers: `process` (default) and `docker`."""

from bot.sandbox.base import Limits, RunningWorker, Sandbox, WorkerLaunch, make_sandbox

__all__ = ["Limits", "RunningWorker", "Sandbox", "WorkerLaunch", "make_sandbox"]
