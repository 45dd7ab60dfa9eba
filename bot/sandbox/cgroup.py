"""Cgroup v2 units for workers: one leaf per worker under a subtree of this bot process.

The kernel accounts for everything a worker starts (double forks and `setsid` included) in
its leaf, so the parent can count its processes and threads, read its CPU time, freeze it and
kill all of it, from outside and without trusting anything that runs there.
Layout: <cgroup2 mount>/kernel-bot/<bot pid>-<random>/w<N>.

Each worker also has a limit on its processes and threads (`pids.max`), in its own leaf where
the v2 hierarchy has the pids controller, else in a folder of the same name under the v1 pids
hierarchy (hybrid hosts: the pids controller is bound to v1 there). The kernel refuses a fork
past it and counts each refusal (`pids.events`), which the parent reads from outside.
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bot.sandbox.base import alive

log = logging.getLogger(__name__)

TOP = "kernel-bot"
FREEZE_WAIT_S = 5.0  # a frozen state is reached in well under a millisecond on an idle tree
KILL_WAIT_S = 10.0


def _mount_table(mounts: str | None) -> list[list[str]]:
    """/proc/self/mounts (or `mounts`), a list of fields per line: device, where, type, options."""
    try:
        text = Path("/proc/self/mounts").read_text() if mounts is None else mounts
    except OSError:
        return []
    return [parts for parts in (line.split() for line in text.splitlines()) if len(parts) >= 4]


def cgroup2_mount(mounts: str | None = None) -> Path | None:
    """Where the unified (v2) hierarchy is mounted, from /proc/self/mounts."""
    return next((Path(p[1]) for p in _mount_table(mounts) if p[2] == "cgroup2"), None)


def pids_v1_mount(mounts: str | None = None) -> Path | None:
    """Where a v1 hierarchy with the pids controller is mounted, if any."""
    return next((Path(p[1]) for p in _mount_table(mounts) if p[2] == "cgroup" and "pids" in p[3].split(",")), None)


def _read(path: Path) -> str:
    return path.read_text()


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@dataclass(frozen=True)
class Leaf:
    """One worker's cgroup."""

    path: Path

    def pids(self) -> list[int]:
        """Processes in it, as the kernel lists them (empty once it is gone)."""
        try:
            return [int(p) for p in _read(self.path / "cgroup.procs").split()]
        except (OSError, ValueError):
            return []

    def thread_count(self) -> int | None:
        try:
            return len(_read(self.path / "cgroup.threads").split())
        except OSError:
            return None

    def cpu_seconds(self) -> float | None:
        """CPU time of everything that ran in it, exited children included."""
        try:
            for line in _read(self.path / "cpu.stat").splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def frozen(self) -> bool:
        try:
            return "frozen 1" in _read(self.path / "cgroup.events")
        except OSError:
            return False

    def set_frozen(self, frozen: bool) -> None:
        """Freeze or thaw the whole tree, and wait until the kernel says it is so."""
        try:
            _write(self.path / "cgroup.freeze", "1" if frozen else "0")
        except OSError:
            return  # gone: nothing of it runs
        deadline = time.monotonic() + FREEZE_WAIT_S
        while self.frozen() != frozen and time.monotonic() < deadline and self.pids():
            time.sleep(0.0002)

    def kill(self) -> None:
        """SIGKILL every process in it, then remove it (idempotent)."""
        kill_tree(self.path)


@dataclass(frozen=True)
class PidsCap:
    """The kernel's limit on one worker's processes and threads, and its count of the forks
    it refused for it."""

    path: Path  # the cgroup folder holding pids.max and pids.events
    limit: int

    def refused(self) -> int:
        """Forks (and threads) refused at the limit so far ("max N" in pids.events)."""
        try:
            for line in _read(self.path / "pids.events").splitlines():
                if line.startswith("max "):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return 0
        return 0

    def remove(self) -> None:
        """Kill what is left in it and remove it (a v1 folder; a v2 leaf goes with its Leaf)."""
        kill_tree(self.path)


def kill_tree(path: Path) -> None:
    """cgroup.kill (Linux 5.14+) or, before it, freeze and SIGKILL each process; then rmdir
    the leaves and the folder itself."""
    if not path.is_dir():
        return
    for child in [p for p in path.iterdir() if p.is_dir()]:
        kill_tree(child)
    try:
        _write(path / "cgroup.kill", "1")
    except OSError:
        try:
            _write(path / "cgroup.freeze", "1")
        except OSError:
            pass
        for pid in Leaf(path).pids():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy until the last process of it has exited
            time.sleep(0.005)
    log.warning("cgroup %s still busy after %.0f s", path, KILL_WAIT_S)


def sweep_dead_runs(top: Path) -> list[Path]:
    """Kill and remove the subtrees of bot processes that no longer exist; those removed."""
    removed = []
    try:
        runs = [p for p in top.iterdir() if p.is_dir()]
    except OSError:
        return removed
    for run in runs:
        pid = run.name.split("-")[0]
        if pid.isdigit() and not alive(int(pid)):
            kill_tree(run)
            removed.append(run)
    return removed


class RunTree:
    """This bot process's subtree; leaves are handed out one per worker."""

    def __init__(self, root: Path, pids_v1: Path | None = None):
        self.path = root / TOP / f"{os.getpid()}-{secrets.token_hex(4)}"
        self.path.mkdir(parents=True)
        self._numbers = itertools.count()
        self.pids_path: Path | None = None  # this run's folder in the v1 pids hierarchy, if used
        self.pids_in_leaf = _enable_pids(root, self.path)
        if not self.pids_in_leaf and pids_v1 is not None:
            try:
                folder = pids_v1 / TOP / self.path.name
                folder.mkdir(parents=True)
                self.pids_path = folder
            except OSError as exc:
                log.warning("no pids cgroup under %s: %s", pids_v1, exc)

    def leaf(self) -> Leaf:
        path = self.path / f"w{next(self._numbers)}"
        path.mkdir()
        return Leaf(path)

    def pids_cap(self, leaf: Leaf, limit: int) -> PidsCap | None:
        """`leaf`'s limit of `limit` processes and threads set; None where no pids controller
        can be had here."""
        if self.pids_in_leaf:
            folder = leaf.path
        elif self.pids_path is not None:
            folder = self.pids_path / leaf.path.name
            folder.mkdir(exist_ok=True)
        else:
            return None
        _write(folder / "pids.max", str(limit))
        return PidsCap(folder, limit)

    @property
    def limits_processes(self) -> bool:
        return self.pids_in_leaf or self.pids_path is not None

    def close(self) -> None:
        kill_tree(self.path)
        if self.pids_path is not None:
            kill_tree(self.pids_path)


def _enable_pids(root: Path, run: Path) -> bool:
    """Turn the v2 pids controller on from `root` down to `run`'s children; whether it is."""
    try:
        if "pids" not in _read(root / "cgroup.controllers").split():
            return False
        for folder in (root, root / TOP, run):
            if "pids" not in _read(folder / "cgroup.subtree_control").split():
                _write(folder / "cgroup.subtree_control", "+pids")
        return True
    except OSError as exc:
        log.warning("the v2 pids controller could not be enabled under %s: %s", root, exc)
        return False


_tree: RunTree | None = None
_tree_reason = ""
_tree_lock = threading.Lock()


def run_tree() -> tuple[RunTree | None, str]:
    """The process's subtree (made on first use), or None and why there is none."""
    global _tree, _tree_reason
    with _tree_lock:
        if _tree is not None and _tree.path.is_dir() and _tree.path.name.startswith(f"{os.getpid()}-"):
            return _tree, ""
        root = cgroup2_mount()
        if root is None:
            _tree, _tree_reason = None, "no cgroup2 hierarchy mounted"
        elif os.geteuid() != 0 and not os.access(root, os.W_OK):
            _tree, _tree_reason = None, f"{root} is not writable (not root)"
        else:
            try:
                _tree, _tree_reason = RunTree(root, pids_v1_mount()), ""
            except OSError as exc:
                _tree, _tree_reason = None, f"cannot create a cgroup under {root}: {exc}"
        if _tree is None:
            log.warning(
                "workers run WITHOUT cgroup containment: %s; their child processes are "
                "neither counted nor reliably killed",
                _tree_reason,
            )
        return _tree, _tree_reason
