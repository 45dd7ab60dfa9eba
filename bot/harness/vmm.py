"""Device memory that another process can map: CUDA's virtual memory management, exported as a
POSIX file descriptor (the driver API through ctypes: torch exposes none of it).

Legacy CUDA IPC handles (`cudaIpcGetMemHandle`, torch.multiprocessing's) do not open in a
process of another PID namespace ("invalid device context"), and every worker has its own; a
descriptor passed over a unix socket (SCM_RIGHTS) does, so the trusted reference can lend a
contender device memory to write its outputs into and compare them where they lie
(bot.harness.blocks).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_ON_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_MINIMUM = 0


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class VmmError(RuntimeError):
    """A driver call refused (its name and CUDA's error string)."""


class VmmOutOfMemory(VmmError):
    """A driver call refused for want of device memory."""


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


# CUDA_ERROR_OUT_OF_MEMORY: said as torch says it, so that the bot reads it as the GPU being
# full beside other work (bot.engine.workers.failures), not as the problem's fault.
_OUT_OF_MEMORY = 2


def _check(result: int, call: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _driver().cuGetErrorString(result, ctypes.byref(text))
        said = "CUDA out of memory" if result == _OUT_OF_MEMORY else (text.value or b"?").decode()
        raise (VmmOutOfMemory if result == _OUT_OF_MEMORY else VmmError)(f"{call}: CUDA error {result} ({said})")


def _here() -> _Location:
    torch.zeros(1, device="cuda")  # the primary context current on this thread, as torch's
    return _Location(_ON_DEVICE, torch.cuda.current_device())


def _prop() -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.requestedHandleTypes, prop.location = _PINNED, _POSIX_FD, _here()
    return prop


def granularity() -> int:
    size = ctypes.c_size_t()
    _check(
        _driver().cuMemGetAllocationGranularity(ctypes.byref(size), ctypes.byref(_prop()), _GRANULARITY_MINIMUM),
        "granularity",
    )
    return size.value


@dataclass(frozen=True)
class Mapping:
    """One allocation mapped into this process: its address, size and the driver's handle."""

    address: int
    size: int
    handle: int


# Every integer goes to the driver as its C type: ctypes would pass a bare int as a C int.
_NONE, _NO_FLAGS = ctypes.c_size_t(0), ctypes.c_ulonglong(0)


def _map(handle: ctypes.c_uint64, size: int) -> Mapping:
    driver, address, length = _driver(), ctypes.c_uint64(), ctypes.c_size_t(size)
    _check(driver.cuMemAddressReserve(ctypes.byref(address), length, _NONE, ctypes.c_uint64(0), _NO_FLAGS), "reserve")
    try:
        _check(driver.cuMemMap(address, length, _NONE, handle, _NO_FLAGS), "map")
        access = _AccessDesc(_here(), _READ_WRITE)
        _check(driver.cuMemSetAccess(address, length, ctypes.byref(access), ctypes.c_size_t(1)), "set access")
    except VmmError:
        driver.cuMemUnmap(address, length)
        driver.cuMemAddressFree(address, length)
        raise
    return Mapping(address.value, size, handle.value)


def _allocation_size(nbytes: int) -> int:
    """`nbytes` rounded up to the allocation granularity, one granule at least: the size the
    lender allocates and the borrower maps alike."""
    step = granularity()
    return max(step, -(-nbytes // step) * step)


def create(nbytes: int) -> tuple[Mapping, int]:
    """A new allocation of at least `nbytes`, mapped here, and a descriptor another process can
    map it by (the caller owns the descriptor)."""
    size = _allocation_size(nbytes)
    handle = ctypes.c_uint64()
    _check(
        _driver().cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(_prop()), _NO_FLAGS), "create"
    )
    try:
        mapping = _map(handle, size)
        fd = ctypes.c_int(-1)
        _check(_driver().cuMemExportToShareableHandle(ctypes.byref(fd), handle, _POSIX_FD, _NO_FLAGS), "export")
    except VmmError:
        _driver().cuMemRelease(handle)
        raise
    return mapping, fd.value


def open_fd(fd: int, nbytes: int) -> Mapping:
    """Map another process's allocation by its descriptor (at least `nbytes` long)."""
    handle = ctypes.c_uint64()
    _check(_driver().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD), "import")
    try:
        return _map(handle, _allocation_size(nbytes))
    except VmmError:
        _driver().cuMemRelease(handle)
        raise


def close(mapping: Mapping) -> None:
    """Unmap and drop this process's hold on the allocation (the memory goes when no process
    maps it)."""
    torch.cuda.synchronize()
    driver, address, size = _driver(), ctypes.c_uint64(mapping.address), ctypes.c_size_t(mapping.size)
    driver.cuMemUnmap(address, size)
    driver.cuMemAddressFree(address, size)
    driver.cuMemRelease(ctypes.c_uint64(mapping.handle))


def as_tensor(mapping: Mapping, nbytes: int) -> torch.Tensor:
    """The first `nbytes` of a mapping as a uint8 CUDA tensor (it does not own the memory)."""

    class _View:
        __cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (mapping.address, False),
            "version": 3,
            "strides": None,
        }

    return torch.as_tensor(_View(), device="cuda")
