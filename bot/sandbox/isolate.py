"""In a worker's child, before any candidate code: its cgroup, namespaces, user and resource limits.

`enter` runs in the freshly forked child (Popen's preexec_fn, or the fork server's fork) while
it is still root. It unshares a mount, network and PID namespace and forks once more: the
forked process is PID 1 of a namespace of its own (it sees no other process of the machine,
so it can signal, renice, re-pin or ptrace none of them; when it exits, the kernel kills
everything left in it), joins the worker's cgroup leaf, mounts a /proc of that namespace
(no /proc/<bot pid>/environ to read), hides the cgroup hierarchy, and drops to the worker's
own uid with no supplementary groups and no way to gain privileges. It gets empty /tmp,
/var/tmp, /dev/shm and /run of its own (`privatise`): what it writes there is gone with it and
no unix socket bound to a path there (where host services listen) is in its reach. The process in between
(the "keeper", outside the cgroup) closes everything, waits, and exits as its child did, so
the exit status reads as before.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
import stat
import sys
from dataclasses import asdict, dataclass

from bot.core.settings import Device

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID = 0x00020000, 0x40000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG = 38, 1
# Host folders each worker gets an empty tmpfs of its own over: a file planted there reaches
# neither the host nor a later run (Inductor's fallback cache is /tmp/torchinductor_<user>), and
# the unix sockets of host services (/run/docker.sock, /run/dbus, /tmp/.X11-unix, ...) are not
# there to connect to. /var/run and /var/lock are links into /run on current distributions.
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run", "/var/lock")
# RAM a worker may fill in each (tmpfs pages are no process's resident memory, so the memory
# watchdog does not see them); its real scratch space is its work folder (TMPDIR).
PRIVATE_SIZE = {"/run": "16m"}
PRIVATE_SIZE_DEFAULT = "256m"
UID_BASE = 0x6B620000  # "kb" << 16: far above any uid a distribution hands out
GID_BASE = 0x6B630000
AS_ROOM_MB = 4096  # a CPU worker's address space beyond its memory limit: the interpreter, torch, threads


@dataclass(frozen=True)
class Containment:
    """What `enter` does for one worker (sent to the fork server as a dict)."""

    leaf: str | None = None  # the worker's cgroup folder
    join: tuple[str, ...] = ()  # other cgroup folders it enters (its pids limit in a v1 hierarchy)
    namespaces: bool = False
    uid: int | None = None  # None: stays the bot's user
    gid: int | None = None
    expose: tuple[str, ...] = ()  # paths the worker must reach though an ancestor is closed
    writable: tuple[str, ...] = ()  # all it may write besides its private tmpfs covers
    hide: tuple[str, ...] = ()  # folders covered by an empty read-only tmpfs (cgroup mounts)

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict | None) -> Containment:
        if not data:
            return Containment()
        lists = {name: tuple(data.get(name, ())) for name in ("join", "expose", "writable", "hide")}
        return Containment(**{**data, **lists})


_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_c().unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()
    _check(_c().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(
        _c().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        "prctl",
    )


def enter(plan: Containment) -> None:
    """Apply `plan` to this (child) process; returns in the contained process."""
    if plan.namespaces:
        unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
        _fork_behind_keeper()
    for folder in (plan.leaf, *plan.join) if plan.leaf else plan.join:
        with open(os.path.join(folder, "cgroup.procs"), "w") as f:
            f.write("0")
    if plan.namespaces:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        privatise(PRIVATE, plan.expose)
        os.chdir(os.getcwd())  # onto the work folder's bind mount, off the covered /tmp
        if plan.uid is not None:
            expose(plan.expose, plan.uid)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for folder in plan.hide:
            mount("tmpfs", folder, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
        if plan.uid is not None:
            read_only_rest(plan.writable)
    if plan.uid is not None:
        os.setgroups([])
        os.setresgid(plan.gid, plan.gid, plan.gid)
        os.setresuid(plan.uid, plan.uid, plan.uid)
        os.umask(0o002)  # the replicas of one source share its compile cache through the group
    if plan.namespaces:  # after the uid change, which clears it: the keeper killed, so is this
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def _fork_behind_keeper() -> None:
    """Fork; the parent waits for the child and exits as it did, holding nothing."""
    pid = os.fork()
    if pid == 0:
        return
    os.closerange(0, os.sysconf("SC_OPEN_MAX"))  # incl. Popen's error pipe and the channel
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def privatise(folders: tuple[str, ...], keep: tuple[str, ...]) -> None:
    """Cover each of `folders` with an empty tmpfs in this mount namespace; what of `keep` lies
    under one (the worker's own folder, its compile cache or problem file in /tmp) is
    bind-mounted back at its path, and nothing else of the host's folder is left in sight."""
    done: set[str] = set()
    for folder in folders:
        real = os.path.realpath(folder)
        if real in done or not os.path.isdir(real):
            continue
        done.add(real)
        inside = _outermost([os.path.realpath(p) for p in keep if _under(os.path.realpath(p), real)])
        held = {}
        try:
            for path in inside:
                try:
                    held[path] = os.open(path, os.O_PATH)
                except OSError:
                    continue  # nothing there to keep
            size = PRIVATE_SIZE.get(real, PRIVATE_SIZE_DEFAULT)
            mount("tmpfs", real, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
            for path, fd in held.items():
                _bind_back(real, path, fd)
        finally:
            for fd in held.values():
                os.close(fd)


def _under(path: str, folder: str) -> bool:
    return path != folder and path.startswith(folder.rstrip("/") + "/")


def _outermost(paths: list[str]) -> list[str]:
    """`paths` without those inside another of them (a bind mount brings its insides along)."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(path == k or _under(path, k) for k in kept):
            kept.append(path)
    return kept


def _bind_back(top: str, path: str, fd: int) -> None:
    """Make `path` again in the fresh tmpfs at `top` (its folders root's, 0755: the worker sees
    only the names it needs) and bind-mount what `fd` held there."""
    parts = os.path.relpath(path, top).split("/")
    folder = top
    for name in parts[:-1]:
        folder = os.path.join(folder, name)
        if not os.path.isdir(folder):
            os.mkdir(folder)
            os.chmod(folder, 0o755)
    source = f"/proc/self/fd/{fd}"
    if os.path.isdir(source):
        os.mkdir(path)
    else:
        open(path, "w").close()
    mount(source, path, None, MS_BIND | MS_REC)


# Per-mount flags a read-only remount must give again (a bind remount sets all of them).
_MOUNT_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": 1024, "nodiratime": 2048}
MS_REMOUNT, MS_RELATIME = 32, 1 << 21
_LEFT_WRITABLE = ("/proc", "/sys", "/dev")  # device nodes are written through any mount


def read_only_rest(writable: tuple[str, ...]) -> None:
    """Remount every mount of this namespace read-only but the private tmpfs covers, /proc,
    /sys, /dev and `writable` (the work folder and the source's compile cache, each bound onto
    itself first so that it is a mount of its own): nothing else the worker writes can reach
    the host, whatever the permissions of the host's folders."""
    for path in writable:
        mount(path, path, None, MS_BIND | MS_REC)
    keep = tuple(os.path.realpath(p) for p in PRIVATE) + _LEFT_WRITABLE + tuple(writable)
    for target, options in _mounts():
        if any(target == k or _under(target, k) for k in keep) or "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_RELATIME * ("relatime" in options)
        for name, flag in _MOUNT_FLAGS.items():
            flags |= flag if name in options else 0
        try:
            mount(None, target, None, flags)
        except OSError:
            if target == "/":
                raise
            # a mount under another (already read-only) that the kernel will not remount: its own
            # permissions still apply to the worker's uid


def _mounts() -> list[tuple[str, set[str]]]:
    """(mount point, its per-mount options) of this process's namespace."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found.append((target, set(fields[5].split(","))))
    return found


def closed_ancestors(paths: tuple[str, ...], uid: int) -> dict[str, set[str]]:
    """For each folder on the way to `paths` that others may not enter: the names below it
    that the worker needs."""
    needed: dict[str, set[str]] = {}
    for path in paths:
        parts = os.path.realpath(path).strip("/").split("/")
        for depth in range(len(parts) if parts != [""] else 0):
            folder = "/" + "/".join(parts[:depth])
            try:
                info = os.stat(folder)
            except OSError:
                break
            if not (info.st_mode & stat.S_IXOTH) and info.st_uid != uid:
                needed.setdefault(folder, set()).add(parts[depth])
    return needed


def expose(paths: tuple[str, ...], uid: int) -> None:
    """Cover each closed folder on the way to `paths` with a tmpfs that holds only the names
    the worker needs, bind-mounted from the folder underneath: /root stays closed, its
    .pyenv becomes reachable; a bot's 0700 temp folder shows this worker's folder only."""
    for folder, names in sorted(closed_ancestors(paths, uid).items(), key=lambda kv: kv[0].count("/")):
        under = os.open(folder, os.O_PATH | os.O_DIRECTORY)
        try:
            mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
            for name in sorted(names):
                source, target = f"/proc/self/fd/{under}/{name}", os.path.join(folder, name)
                if os.path.isdir(source):
                    os.mkdir(target)
                else:
                    open(target, "w").close()
                mount(source, target, None, MS_BIND | MS_REC)
        finally:
            os.close(under)


def probe() -> str:
    """'' where a child can take all of `enter`'s steps here, else why not (checked once)."""
    if sys.platform != "linux":
        return "not Linux"
    if os.geteuid() != 0:
        return "not root"
    pid = os.fork()
    if pid == 0:
        try:
            unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return "" if os.waitstatus_to_exitcode(status) == 0 else "unshare(mount, net, pid) refused"


def confine(memory_mb: int, device: str, cores: set[int], plan: Containment | None = None) -> None:
    """In the worker, before it runs anything: its cgroup, namespaces and user
    (bot.sandbox.isolate), resource limits and cores."""
    if plan is not None:
        enter(plan)
    # An address-space cap turns a huge allocation into a MemoryError at once. CUDA
    # reserves terabytes of virtual address space, so on GPUs only the parent's
    # resident-memory watchdog applies.
    if device == Device.CPU:
        cap = (memory_mb + AS_ROOM_MB) << 20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if device == Device.CUDA and cores:
        os.sched_setaffinity(0, cores)  # keep off the reserved timing core
