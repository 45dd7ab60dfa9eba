"""The process backend's containment of one worker, prepared by the parent.

What is possible here is decided once per bot process and said loudly: `containment()` gives
e.g. "cgroup+pidns+netns+uid" where the bot is root with cgroup v2 and namespaces, or
"none: not root" where nothing of it is available (a warning is logged either way it falls
short). `prepare` makes a worker's cgroup leaf, picks its uid (one per worker) and gid (one
per candidate source, so replicas share its compile cache), and gives it its folders.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import secrets
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from bot.core.errors import BotError
from bot.sandbox import guardian
from bot.sandbox.base import BOT_ROOT, WorkerLaunch
from bot.sandbox.cgroup import Leaf, PidsCap, cgroup2_mount, run_tree
from bot.sandbox.isolate import GID_BASE, UID_BASE, Containment, probe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mode:
    cgroups: bool
    pids: bool  # a limit on each worker's processes and threads (bot.sandbox.cgroup.PidsCap)
    namespaces: bool
    uid: bool
    description: str  # what the environment description and reports show

    @property
    def complete(self) -> bool:
        """Everything the process sandbox promises (docs/sandbox.md): a cgroup with a process
        limit, PID, network and mount namespaces with private /tmp, /dev/shm and /run, a uid."""
        return self.cgroups and self.pids and self.namespaces and self.uid


class Uncontained(BotError):
    """The process sandbox cannot contain candidates here, and the user did not allow it."""


def refuse_uncontained(mode: Mode, allowed: bool) -> None:
    """Raise Uncontained where `mode` falls short of containment and the user did not opt in."""
    if mode.complete:
        return
    if allowed:
        log.warning("running candidates UNCONTAINED (--allow-uncontained): %s", mode.description)
        return
    raise Uncontained(
        f"the process sandbox cannot contain candidates on this host (containment: {mode.description}): "
        "their code could reach this host's files, unix sockets and processes and start processes "
        "without limit. Run the bot as root on Linux (cgroup v2 mounted, namespaces allowed), or use "
        "--sandbox docker, or pass --allow-uncontained to run them anyway."
    )


@functools.cache
def containment() -> Mode:
    """What this bot process can do for its workers (logged once when it falls short)."""
    tree, why_not_tree = run_tree()
    why_not_ns = probe()
    why_not_pids = "" if tree is None or tree.limits_processes else "no pids controller (v2 or v1)"
    parts = []
    if tree is not None:
        parts.append("cgroup")
    if not why_not_pids and tree is not None:
        parts.append("pids")
    if not why_not_ns:
        parts += ["pidns", "netns", "mntns", "uid"]
    missing = "; ".join(w for w in (why_not_tree, why_not_pids, why_not_ns) if w)
    description = "+".join(parts) if parts else f"none: {missing}"
    if parts and missing:
        description += f" (partial: {missing})"
    if missing:
        log.warning("worker containment is %s", description)
    if guardian.ensure_started() and tree is not None:
        guardian.tell(f"cgroup {tree.path}")
        if tree.pids_path is not None:
            guardian.tell(f"cgroup {tree.pids_path}")
    return Mode(tree is not None, tree is not None and not why_not_pids, not why_not_ns, not why_not_ns, description)


# Worker uids and source gids are handed out once each per bot process, from a random place in
# the range. A gid made from a hash of the cache folder's name (as it was) can be ground: a
# candidate varies its source until its gid is the baseline's, then writes the baseline's
# group-writable compile cache. Two bot processes at once rarely hand out the same ids.
_START = secrets.randbelow(1 << 16)
_numbers = itertools.count(1)
_numbers_lock = threading.Lock()
_gids: dict[str, int] = {}


def _next_id() -> int:
    """1 .. 65535, once each (the caller holds _numbers_lock)."""
    return (_START + next(_numbers)) % ((1 << 16) - 1) + 1


_groups_done: set[str] = set()


@dataclass(frozen=True)
class Prepared:
    """What `prepare` made for one worker: the plan its child follows, and the cgroup units
    the parent reads and kills it through."""

    plan: Containment
    leaf: Leaf | None
    pids: PidsCap | None


def prepare(launch: WorkerLaunch, log_path: Path) -> Prepared:
    """The plan for one worker, its leaf made, its process limit set and its folders given to it."""
    mode = containment()
    tree, _ = run_tree()
    leaf = tree.leaf() if mode.cgroups and tree is not None else None
    pids = tree.pids_cap(leaf, launch.limits.pids) if leaf is not None and tree is not None else None
    join = (str(pids.path),) if pids is not None and leaf is not None and pids.path != leaf.path else ()
    if not mode.uid:
        plan = Containment(
            leaf=str(leaf.path) if leaf else None,
            join=join,
            namespaces=mode.namespaces,
            hide=_cgroup_mounts() if mode.namespaces else (),
        )
        return Prepared(plan, leaf, pids)
    with _numbers_lock:
        uid = UID_BASE + _next_id()
        gid = _gids.setdefault(str(launch.cache_dir), GID_BASE + _next_id())
    os.chown(launch.workdir, uid, gid)
    os.chmod(launch.workdir, 0o700)
    if log_path.exists():
        os.chown(log_path, uid, gid)
    _share_with_group(launch.cache_dir, gid)
    python = os.path.realpath(launch.python)
    expose = tuple(
        dict.fromkeys(
            [python, sys.base_prefix, sys.prefix, str(BOT_ROOT), str(launch.workdir), str(launch.cache_dir)]
            + [str(p) for p in launch.readable]
        )
    )
    plan = Containment(
        leaf=str(leaf.path) if leaf else None,
        join=join,
        namespaces=True,
        uid=uid,
        gid=gid,
        expose=expose,
        writable=(str(launch.workdir), str(launch.cache_dir)),
        hide=_cgroup_mounts(),
    )
    return Prepared(plan, leaf, pids)


def _cgroup_mounts() -> tuple[str, ...]:
    """Folders that hold the cgroup hierarchies (covered in the worker's mount namespace)."""
    root = cgroup2_mount()
    if root is None:
        return ()
    top = root.parent if root.parent.name == "cgroup" else root
    return (str(top),)


def _share_with_group(cache: Path, gid: int) -> None:
    """The compile cache: the source's group owns it and may write it (setgid folders), once
    per folder and process (a warm Triton cache holds thousands of files)."""
    key = f"{cache}:{gid}"
    if key in _groups_done:
        return
    os.chown(cache, -1, gid, follow_symlinks=False)
    os.chmod(cache, 0o2770)
    for _, dirs, files, fd in os.fwalk(cache, follow_symlinks=False):
        for name in dirs + files:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    continue
                os.chown(name, -1, gid, dir_fd=fd, follow_symlinks=False)
                extra = 0o2070 if stat.S_ISDIR(info.st_mode) else 0o060
                os.chmod(name, info.st_mode | extra, dir_fd=fd)
            except OSError:
                pass
    _groups_done.add(key)
