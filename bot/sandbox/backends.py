"""The backend a run names: the one place that knows every backend."""

from __future__ import annotations

from bot.sandbox.base import Sandbox

# From this many workers in one evaluation, the process backend starts its fork server.
FORK_SERVER_MIN_WORKERS = 4


def make_sandbox(name: str, workers: int | None = None, allow_uncontained: bool = False) -> Sandbox:
    """The backend `name`, for an evaluation that will start about `workers` workers; the
    process backend refuses where it cannot contain them, unless `allow_uncontained`."""
    # Each backend is imported when it is picked: the docker SDK loads only for a docker run.
    if name == "process":
        from bot.sandbox.process import ProcessSandbox

        return ProcessSandbox(
            start_fork_server=workers is None or workers >= FORK_SERVER_MIN_WORKERS,
            allow_uncontained=allow_uncontained,
        )
    if name == "docker":
        from bot.sandbox.docker import DockerSandbox

        return DockerSandbox()
    raise ValueError(f"unknown sandbox {name!r} (expected 'process' or 'docker')")
