"""What a worker container sees of the host: the local image and the read-only mounts.

`kernel-bot-worker:local` is `docker import` of a tarball holding only /etc/passwd and
/etc/group (so uid 65534 has a name for `getpass` and friends). Everything the worker runs
is bind-mounted read-only from the host at the SAME paths: the Python installation
(`sys.base_prefix`), the virtual environment (`sys.prefix`), the folders of torch, numpy
and triton, and the system libraries. Same paths mean no rewriting of shebangs, venv
config or rpaths. Only named folders are mounted, never `/`, a home folder or the Docker
socket: a worker that could reach the socket could start a privileged container.
Full images (ci/Dockerfile) bring their own Python; they get only the problem files.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import sys
import tarfile
from pathlib import Path

from bot.core.errors import BotError

log = logging.getLogger(__name__)

LOCAL_IMAGE = "kernel-bot-worker:local"
IMAGE_VERSION = "1"  # bump when the tarball changes, so old images are rebuilt
# Images carrying this label get the host's interpreter mounted; others bring their own.
HOST_MOUNTS_LABEL = "kernel-bot.host-mounts"
PYTHON_LABEL = "kernel-bot.python"

# System folders the interpreter, torch's shared libraries and compilers (torch.compile on
# CPU) need. /usr/include is read-only headers; nothing here holds credentials.
SYSTEM_PATHS = (
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/usr/bin",
    "/bin",
    "/usr/include",
    "/usr/libexec",
    "/etc/ld.so.cache",
    "/etc/alternatives",
)

_PASSWD = (
    b"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
_GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def _tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo("etc")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(folder)
        for name, data in (("etc/passwd", _PASSWD), ("etc/group", _GROUP)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def ensure_local_image(client) -> str:
    """Build `kernel-bot-worker:local` unless an up-to-date one exists; returns its name."""
    import docker.errors

    try:
        image = client.images.get(LOCAL_IMAGE)
        if (image.labels or {}).get("kernel-bot.image-version") == IMAGE_VERSION:
            return LOCAL_IMAGE
    except docker.errors.ImageNotFound:
        pass
    log.info("building %s with docker import", LOCAL_IMAGE)
    repository, tag = LOCAL_IMAGE.split(":")
    try:
        client.api.import_image_from_data(
            _tarball(),
            repository=repository,
            tag=tag,
            changes=[
                f"LABEL {HOST_MOUNTS_LABEL}=1",
                "LABEL kernel-bot.image=1",
                f"LABEL kernel-bot.image-version={IMAGE_VERSION}",
            ],
        )
    except docker.errors.APIError as exc:
        raise BotError(f"could not build {LOCAL_IMAGE} with docker import: {exc}") from None
    return LOCAL_IMAGE


def forbidden_mount(path: Path) -> str | None:
    """Why `path` must never be mounted into a worker, or None when it may be."""
    path = Path(os.path.realpath(path))
    home = Path(os.path.realpath(Path.home()))
    if path in (Path("/"), Path("/root"), Path("/home"), home):
        return "it is the root or a home folder"
    for sock in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"):
        real = Path(os.path.realpath(sock))
        if path == real or path in real.parents or path == Path(sock) or path in Path(sock).parents:
            return f"it holds the container engine's socket {sock}"
    return None


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def host_mounts(python: str) -> list[str]:
    """Host folders that `python -I` and torch need (deduplicated by `same_path_mounts`)."""
    wanted = [Path(sys.base_prefix), Path(sys.prefix), Path(python).parent.parent]
    wanted += [p for p in map(_package_dir, ("torch", "numpy", "triton")) if p is not None]
    return [str(p) for p in wanted + [Path(p) for p in SYSTEM_PATHS] if os.path.lexists(p)]


def world_readable(paths: list[str]) -> bool:
    """True when others may read and enter all of `paths`: then the worker runs as nobody."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
        need = 0o005 if os.path.isdir(path) else 0o004
        if mode & need != need:
            return False
    return True


def is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def same_path_mounts(python: str, readable: tuple[Path, ...], host_interpreter: bool) -> list[str]:
    """Host paths mounted read-only at the same path: the readable files (the parent names
    them by their host paths) and, for the local image, the interpreter and libraries."""
    wanted = host_mounts(python) if host_interpreter else []
    for path in readable:
        if path.exists():
            wanted.append(str(path.resolve()))
        else:
            log.warning("readable %s does not exist; not mounted", path)
    chosen: list[str] = []
    for path in wanted:
        if any(is_under(path, c) for c in chosen):
            continue  # inside a folder already mounted
        why = forbidden_mount(Path(path))
        if why:
            raise BotError(f"refusing to mount {path} into a worker: {why}")
        chosen = [c for c in chosen if not is_under(c, path)] + [path]
    return chosen


def give_to(folder: Path, uid: int, gid: int) -> None:
    """chown a writable mount (the compile cache) to the worker's uid. fwalk with dir fds and
    no symlink following: a symlink left there by an earlier worker cannot make this (root)
    process chown the link's target."""
    os.chown(folder, uid, gid, follow_symlinks=False)
    for _, dirs, files, fd in os.fwalk(folder, follow_symlinks=False):
        for name in dirs + files:
            try:
                os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
            except OSError:
                pass
