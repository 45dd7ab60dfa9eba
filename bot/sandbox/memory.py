"""Reading and writing a worker's memory from outside it (Linux process_vm_readv and
process_vm_writev).

The parent reads the inputs the trusted reference worker drew and writes them into a
contender's staged input buffers while the contender is frozen (bot.engine.timing.staging): the
contender never holds a timed call's inputs before the parent's window opens, so no answer can
be computed ahead of it. After the batch it reads the contender's outputs and inputs back
(bot.engine.timing.outside_checks). The calls need the parent's right to trace the process
(root, or a descendant under Yama's default).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Sequence


class MemoryCopyError(Exception):
    """A region could not be read or written (a bad address: the worker named memory it
    does not have, or that is not writable)."""


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc: ctypes.CDLL | None = None


def _calls() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        for name in ("process_vm_readv", "process_vm_writev"):
            fn = getattr(libc, name)
            fn.argtypes = [
                ctypes.c_int,
                ctypes.POINTER(_IoVec),
                ctypes.c_ulong,
                ctypes.POINTER(_IoVec),
                ctypes.c_ulong,
                ctypes.c_ulong,
            ]
            fn.restype = ctypes.c_ssize_t
        _libc = libc
    return _libc


def supported() -> bool:
    """Whether this system has the calls at all (Linux with glibc)."""
    try:
        _calls()
    except (OSError, AttributeError):
        return False
    return True


def _transfer(write: bool, pid: int, local: int, remote: int, nbytes: int) -> None:
    libc = _calls()
    fn = libc.process_vm_writev if write else libc.process_vm_readv
    done = 0
    while done < nbytes:
        liov = _IoVec(local + done, nbytes - done)
        riov = _IoVec(remote + done, nbytes - done)
        n = fn(pid, ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
        if n < 0:
            err = ctypes.get_errno()
            if err in (errno.EPERM, errno.ESRCH):
                raise PermissionError(err, f"{'write to' if write else 'read from'} process {pid}: {os.strerror(err)}")
            raise MemoryCopyError(
                f"{'write to' if write else 'read from'} process {pid} at "
                f"{remote + done:#x} ({nbytes - done} bytes): {os.strerror(err)}"
            )
        if n == 0:
            raise MemoryCopyError(f"process {pid} at {remote + done:#x}: nothing transferred")
        done += n


def read(pid: int, regions: Sequence[tuple[int, int]]) -> list[bytearray]:
    """The bytes of each (address, bytes) of process `pid`, read from outside it: how the parent
    checks a worker's timed outputs and inputs (bot.engine.timing.outside_checks). Up to IOV_MAX
    regions a call: one call per region cost the parent 0.1 ms each on a loaded 2-vCPU host."""
    out = []
    for address, nbytes in regions:
        if nbytes < 0 or (nbytes and address <= 0):
            raise MemoryCopyError(f"a region of {nbytes} bytes at {address:#x} is not one to read")
        out.append(bytearray(nbytes))
    todo = [(a, n, data) for (a, n), data in zip(regions, out) if n]
    for start in range(0, len(todo), IOV_MAX):
        _vector(False, pid, todo[start : start + IOV_MAX])
    return out


IOV_MAX = 1024  # iovecs per process_vm_readv call (Linux's UIO_MAXIOV)


def _address(data: bytearray) -> int:
    """Where a (non-empty) buffer's bytes start: its first byte's address, without making a
    ctypes array type of its size (about 1 us a region, for every region of every batch read)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(data))


def write(pid: int, regions: Sequence[tuple[int, bytearray]]) -> int:
    """Write each (address, bytes) into process `pid` from outside it; the bytes written. Up to
    IOV_MAX regions a call, as `read`."""
    todo = []
    for address, data in regions:
        if data and address <= 0:
            raise MemoryCopyError(f"a region of {len(data)} bytes at {address:#x} is not one to write")
        if data:
            todo.append((address, len(data), data))
    for start in range(0, len(todo), IOV_MAX):
        _vector(True, pid, todo[start : start + IOV_MAX])
    return sum(n for _, n, _ in todo)


def _vector(write: bool, pid: int, regions: Sequence[tuple[int, int, bytearray]]) -> None:
    local = (_IoVec * len(regions))()
    remote = (_IoVec * len(regions))()
    for k, (address, nbytes, data) in enumerate(regions):
        local[k] = _IoVec(_address(data), nbytes)
        remote[k] = _IoVec(address, nbytes)
    fn = _calls().process_vm_writev if write else _calls().process_vm_readv
    n = fn(pid, local, len(regions), remote, len(regions), 0)
    if n == sum(nbytes for _, nbytes, _ in regions):
        return
    for address, nbytes, data in regions:  # a short or failed call: region by region, to name the bad one
        _transfer(write, pid, _address(data), address, nbytes)
