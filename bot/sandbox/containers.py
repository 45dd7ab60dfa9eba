"""The labels on a worker container and the removal of a run's leftovers. The docker backend
labels and removes its containers; the guardian removes them once the bot is gone, so both
read the labels here."""

from __future__ import annotations

import logging
import os
import secrets
import socket

from docker.errors import APIError, NotFound

log = logging.getLogger(__name__)

WORKER_LABEL = "kernel-bot.worker"
RUN_LABEL = "kernel-bot.run"
PID_LABEL = "kernel-bot.parent-pid"
RUN_ID = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def remove_leftover_workers(client, run_id: str = RUN_ID) -> None:
    """Remove every container labelled with `run_id`, running or not."""
    for container in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except APIError as exc:
            log.warning("could not remove worker container %s: %s", container.short_id, exc)
