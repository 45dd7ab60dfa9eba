"""The guardian: a small trusted process that outlives the bot just long enough to kill its workers.

It holds the read end of a pipe whose only write end is the bot's (non-inheritable, so neither
the fork server nor any worker has it). When the bot ends in any way, SIGKILL included, the
read sees EOF; the guardian then kills every worker cgroup of that bot process (the whole
tree: `setsid` daemons and double forks included), removes them, removes the bot's worker
containers it was told of, and exits. On start it also removes the subtrees of bot processes
that died before a guardian could (e.g. their guardian was killed too).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from bot.sandbox.cgroup import kill_tree, sweep_dead_runs

log = logging.getLogger(__name__)

BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from bot.sandbox.guardian import watch; watch(int(sys.argv[2]))"

_lock = threading.Lock()
_writer: tuple[int, int] | None = None  # (bot pid, write end)


def watch(fd: int) -> None:
    """The guardian's life: learn what to watch ('cgroup <folder>', 'docker <run id>' lines),
    wait for EOF, kill and remove."""
    trees: set[Path] = set()
    docker_runs: set[str] = set()
    buffered = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buffered += chunk
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            kind, _, value = line.decode(errors="replace").partition(" ")
            if kind == "docker" and value:
                docker_runs.add(value)
            elif kind == "cgroup" and value:
                trees.add(Path(value))
                sweep_dead_runs(Path(value).parent)
    for tree in trees:
        kill_tree(tree)
    for run_id in docker_runs:
        _remove_containers(run_id)


def _remove_containers(run_id: str) -> None:
    try:
        import docker

        from bot.sandbox.containers import remove_leftover_workers

        remove_leftover_workers(docker.from_env(), run_id)
    except Exception as exc:  # noqa: BLE001  the engine gone too: nothing left to remove
        print(f"guardian: could not remove containers of {run_id}: {exc}", file=sys.stderr)


def ensure_started() -> bool:
    """Start this bot process's guardian once; whether one watches it."""
    global _writer
    with _lock:
        if _writer is not None and _writer[0] == os.getpid():
            return True
        read_end, write_end = os.pipe()  # both non-inheritable: no other child gets them
        try:
            subprocess.Popen(
                [sys.executable, "-I", "-c", BOOT, str(Path(__file__).resolve().parents[2]), str(read_end)],
                pass_fds=(read_end,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        except OSError as exc:
            os.close(write_end)
            log.warning("no guardian process: workers may outlive a killed bot (%s)", exc)
            return False
        finally:
            os.close(read_end)
        _writer = (os.getpid(), write_end)
        return True


def tell(message: str) -> None:
    """A line for the guardian (e.g. 'docker <run id>': containers to remove with the bot)."""
    with _lock:
        if _writer is not None and _writer[0] == os.getpid():
            os.write(_writer[1], (message + "\n").encode())
