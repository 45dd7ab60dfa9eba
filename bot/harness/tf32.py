"""The problem's own error as cuDNN may make it: float32 convolutions computed as TF32 does.

Under cuDNN's defaults (`torch.backends.cudnn.allow_tf32`) a float32 convolution on a GPU may
run on TF32 tensor cores (operands rounded to 10 mantissa bits, products summed in float32) or
in full float32: which algorithm cuDNN takes moves with the workspace memory it finds free. On
KernelBench's Conv2d_Tanh_Scaling_BiasAdd_Max on an H100 the reference's own normwise error
was 1.8e-6 in one trial (float32) and 3.3e-4 in another (TF32) of the same run, and the
baseline, the same code in another process, failed a timed call's check held to the first.
So the reference worker measures its error both ways (bot.harness.checked): as the call ran,
and with every float32 convolution's operands rounded to TF32 and cuDNN's TF32 off, the
arithmetic of the TF32 algorithms; the larger bounds the rule (bot.core.tolerance).

Nothing here runs candidate code; it runs in the trusted reference worker only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

TF32_DROPPED_BITS = 13  # float32 keeps 23 mantissa bits, TF32 10
_HALF = (1 << (TF32_DROPPED_BITS - 1)) - 1  # rounding to nearest: half the dropped part, less one
_KEEP = -(1 << TF32_DROPPED_BITS)  # the mask of the kept bits, as a signed int32
CHUNK_ELEMENTS = 1 << 24  # work buffers of 64 MiB at most, whatever the operand's size


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """A copy of float32 `x` with every finite value rounded to TF32's precision, to nearest,
    ties to even; infinities and NaNs as they were."""
    out = x.contiguous().clone()
    flat = out.view(-1).view(torch.int32)
    for start in range(0, flat.numel(), CHUNK_ELEMENTS):
        bits = flat[start : start + CHUNK_ELEMENTS]
        finite = torch.isfinite(bits.view(torch.float32))
        step = (bits >> TF32_DROPPED_BITS) & 1  # ties go to the even neighbour
        step += _HALF
        step.masked_fill_(~finite, 0)
        bits += step
        bits.copy_(torch.where(finite, bits & _KEEP, bits))
    return out


def _is_float32_on(x: Any, device_type: str) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.device.type == device_type


@contextlib.contextmanager
def _cudnn_tf32(allowed: bool) -> Iterator[None]:
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


class Tf32Convolutions(TorchDispatchMode):
    """Inside it, every float32 convolution on `device_type` is computed as a TF32 algorithm
    computes it; `convolutions` counts them (none: the problem has nothing TF32 could change)."""

    def __init__(self, device_type: str = "cuda") -> None:
        super().__init__()
        self.device_type = device_type
        self.convolutions = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten.convolution.default and all(_is_float32_on(a, self.device_type) for a in args[:2]):
            self.convolutions += 1
            rounded = (round_to_tf32(args[0]), round_to_tf32(args[1]), *args[2:])
            with _cudnn_tf32(False):
                return func(*rounded, **kwargs)
        return func(*args, **kwargs)
