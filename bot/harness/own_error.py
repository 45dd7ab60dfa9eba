"""How far the problem's own output is from its oracle, measured in the reference worker.

The reference worker runs the problem's `Model` as written (its dtype, this device: TF32
convolutions under cuDNN's defaults, long float32 reductions) beside the upcast oracle, and
reports this error in the two measures the parent's tolerance has (bot.engine.verification.compare), so the
bound can account for it (bot.core.tolerance). Only figures travel: the native outputs stay here.
"""

from __future__ import annotations

import math

import torch

from bot.protocol.measures import error_floor, row_width

CHUNK_ELEMENTS = 1 << 24  # float64 work buffers of 128 MiB at most, whatever the output's size


def own_error(native: torch.Tensor, exact: torch.Tensor) -> list[float]:
    """[normwise ||native - exact|| / ||exact||, largest |native - exact| over its row's (or the
    output's) max |exact|], over the elements finite in both, errors within the underflow
    residue (bot.protocol.measures.error_floor) counted as none; zeros for outputs that are not
    floating point (compared exactly) or empty."""
    if not native.is_floating_point() or native.numel() == 0:
        return [0.0, 0.0]
    width = row_width(list(native.shape)) or native.numel()
    ours, oracle = native.detach().reshape(-1, width), exact.detach().reshape(-1, width)
    tiny = torch.finfo(native.dtype).tiny
    residue = error_floor(native.dtype)
    rows = max(1, CHUNK_ELEMENTS // width)
    err_sq = ref_sq = worst = 0.0
    for start in range(0, ours.shape[0], rows):
        got = ours[start : start + rows].to(torch.float64)
        ref = oracle[start : start + rows].to(torch.float64)
        both = torch.isfinite(got) & torch.isfinite(ref)
        zero = torch.zeros((), dtype=torch.float64, device=ref.device)
        ref = torch.where(both, ref, zero)
        diff = torch.where(both, got - ref, zero).abs_()
        diff = torch.where(diff > residue, diff, zero)
        err_sq += float(diff.square().sum())
        ref_sq += float(ref.square().sum())
        scale = ref.abs().amax(1).clamp_min_(tiny)
        worst = max(worst, float((diff.amax(1) / scale).max()))
    norm = math.sqrt(err_sq) / max(math.sqrt(ref_sq), tiny * math.sqrt(native.numel()))
    return [norm, worst]
