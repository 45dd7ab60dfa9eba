"""Output blocks: memory the trusted reference lends a contender for one trial call's outputs,
so that outputs of several GiB are compared where they lie, by the reference's process, and
never cross the channel or the bot's memory (docs/verifier.md, "Comparing large outputs").

A block is shared memory passed as a file descriptor: on a GPU an allocation of CUDA's virtual
memory management (bot.harness.vmm), on a CPU a sealed memfd. The reference makes a new block
for every call and fills it with 0xFF (NaN in every float format) first, so a contender that
writes nothing, or writes late, is compared against poison, never against another call's
answer; a contender keeps no way into a block lent to another (each call's are its own) and
cannot shrink a CPU block under the reference (the memfd is sealed).
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bot.core.settings import Device
from bot.harness import vmm

POISON = 0xFF  # every byte: NaN in every float format


@dataclass
class Block:
    """One block mapped in this process: its bytes as a uint8 tensor (the block's memory, not a
    copy) until `close`."""

    nbytes: int
    data: torch.Tensor | None
    _release: Callable[[], None]

    def view(self, dtype: torch.dtype, shape: list[int]) -> torch.Tensor:
        """The block's first bytes as a tensor of `dtype` and `shape` (which must fit)."""
        assert self.data is not None, "block closed"
        nbytes = math.prod(int(s) for s in shape) * torch.empty((), dtype=dtype).element_size()
        if nbytes > self.nbytes:
            raise ValueError(f"{dtype}{list(shape)} takes {nbytes} bytes, the block {self.nbytes}")
        return self.data[:nbytes].view(dtype).view(shape)

    def close(self) -> None:
        if self.data is not None:
            self.data = None  # the views go before the memory does
            self._release()


def lend(nbytes: int, device: str) -> tuple[Block, int]:
    """A new block of `nbytes`, poisoned, and the descriptor another process maps it by (the
    caller owns it and closes it once sent)."""
    if device == Device.CUDA:
        try:
            mapping, fd = vmm.create(nbytes)
        except vmm.VmmOutOfMemory:
            # The caching allocator keeps what this process's tensors freed out of the driver's
            # reach (the reference's float64 temporaries: gigabytes on KernelBench's 19_ReLU,
            # whose lend found no room beside one contender): given back, the block may fit.
            torch.cuda.empty_cache()
            mapping, fd = vmm.create(nbytes)
        data = vmm.as_tensor(mapping, nbytes)
        data.fill_(POISON)
        torch.cuda.synchronize()
        return Block(nbytes, data, lambda: vmm.close(mapping)), fd
    fd = os.memfd_create("kernel-bot-block", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, max(nbytes, 1))
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        block = _mapped(fd, nbytes)
    except OSError:
        os.close(fd)
        raise
    assert block.data is not None
    block.data.fill_(POISON)
    return block, fd


def borrow(fd: int, nbytes: int, device: str) -> Block:
    """Map a block lent by the reference (the caller still closes the descriptor: the mapping
    does not need it)."""
    if device == Device.CUDA:
        mapping = vmm.open_fd(fd, nbytes)
        return Block(nbytes, vmm.as_tensor(mapping, nbytes), lambda: vmm.close(mapping))
    if os.fstat(fd).st_size < nbytes:
        raise ValueError(f"a block of {os.fstat(fd).st_size} bytes lent for {nbytes}")
    return _mapped(fd, nbytes)


def _mapped(fd: int, nbytes: int) -> Block:
    memory = mmap.mmap(fd, max(nbytes, 1))
    data = torch.frombuffer(memory, dtype=torch.uint8, count=nbytes) if nbytes else torch.empty(0, dtype=torch.uint8)
    # The mapping goes when the last view of it does (mmap refuses to close under a view).
    return Block(nbytes, data, lambda: None)
