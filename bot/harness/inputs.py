"""Inside a worker: one trial's inputs in a distribution (bot/core/distributions.py names them).

The reference (float64, in another process) and each contender transform the same
`get_inputs()` draw with the same code, from the same seed, so their inputs are bit-identical
(the parent checks their hashes). Only floating-point tensors change; integer tensors
(indices, positions, labels) stay valid. Scales are powers of two, so a scaled value is exact
wherever it stays within the dtype's normal range, on any device. Only torch and the standard
library are used here.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bot.core.distributions import DISTRIBUTIONS

# "rows": every row (the last dimension) takes one of these scales. 2^-10 and 2^-20 (about
# 1e-3 and 1e-6) are rows where an RMSNorm that drops its eps of 1e-5 is 3.4x and 3300x too
# large. 2^7 overflows exp in float32 and bfloat16 (above 88.7) and x^2 in float16, yet keeps
# a softmax of q.k (attention) within float32's rounding: its scores grow as 2^14.
ROW_SCALES = (0.0, 2.0**-10, 2.0**-20, 1.0, 2.0**7)
# A 1-D tensor is cut into this many blocks of one scale each (its "rows").
BLOCKS_1D = len(ROW_SCALES)
# "limits": 2^min(emax - 4, 40) x N(0, 1). float16 2^11: |x| up to ~1.2e4 (6 sigma), so the
# sum of two inputs stays below 65504 and x^2 overflows float16 but not float32.
# bfloat16 / float32 2^40: x^2 summed over 2^17 elements stays below 3.4e38 in float32, and so
# does x^3 (GELU's tanh form) below 6.3 sigma, while exp(x) overflows even float64.
LIMIT_EXPONENT_CAP = 40
LIMIT_EXPONENT_MARGIN = 4
# "offset": every row (block) is N(0, 1) plus +-2^k, k from the seed in [7, 13] (mean 128 to
# 8192 times the spread), where a one-pass variance E[x^2] - E[x]^2 in float32 loses about
# 2^(2k-24) of a unit variance: 40x the float32 bound at 2^7, all of it at 2^13. k stays below
# the dtype's digits, so some spread survives rounding: bfloat16 2^7, float16 up to 2^10.
OFFSET_EXPONENTS = (7, 13)
# "mixed": within every row, columns of each scale: 2^-20 and 2^-10 (near zero, 1e-6 and 1e-3)
# beside 1 and 2^6 (exp(64) and 64^2 stay finite in float32 and bfloat16).
MIXED_SCALES = (2.0**-20, 2.0**-10, 1.0, 2.0**6)
_SALT = 0x5EED_0F_5CA1E  # the row pattern's generator: distinct from get_inputs()'s stream


def limit_scale(dtype: torch.dtype) -> float:
    """The "limits" scale of a floating dtype: 2^min(emax - 4, 40)."""
    emax = math.floor(math.log2(torch.finfo(dtype).max))
    return 2.0 ** min(emax - LIMIT_EXPONENT_MARGIN, LIMIT_EXPONENT_CAP)


def transform(inputs: list[Any], distribution: str, seed: int) -> list[Any]:
    """The inputs of one call: `inputs` (one `get_inputs()` draw) in `distribution`."""
    if distribution == "standard":  # nothing to add to the harness's work
        return list(inputs)
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r}")
    patterns: dict[int, torch.Tensor] = {}  # row count -> row scales, shared by same-sized inputs
    gen = torch.Generator(device="cpu")
    gen.manual_seed((seed ^ _SALT) & (2**63 - 1))
    return [_one(x, distribution, gen, patterns) if _floating(x) else x for x in inputs]


def _floating(x: Any) -> bool:
    return torch.is_tensor(x) and x.is_floating_point()


def _one(x: torch.Tensor, distribution: str, gen: torch.Generator, patterns: dict[int, torch.Tensor]) -> torch.Tensor:
    if distribution == "shifted":  # in place: no third copy of a multi-GiB input
        return (x * 2.5).add_(1.5)
    if distribution == "large":
        return x * 100.0
    if distribution == "zeros":
        return torch.zeros_like(x)
    if distribution == "limits":
        return _scaled(x, torch.tensor(limit_scale(x.dtype), dtype=_work(x.dtype), device=x.device))
    if x.numel() == 0:
        return x
    if distribution == "offset":
        return _offset(x, gen)
    if distribution == "mixed":
        return _mixed(x, gen)
    rows, width = _rows(x)
    pattern = patterns.get(rows)
    if pattern is None:
        # Every scale on about a fifth of the rows, which ones drawn from the seed; inputs with
        # as many rows share the pattern, so x and its residual are zero in the same rows.
        order = torch.randperm(rows, generator=gen)
        pattern = torch.tensor(ROW_SCALES, dtype=torch.float64)[order % len(ROW_SCALES)]
        patterns[rows] = pattern
    scales = pattern.to(device=x.device, dtype=_work(x.dtype))
    if x.dim() >= 2:  # broadcast over each row: no per-element scale tensor
        return _scaled(x.reshape(rows, width), scales[:, None]).reshape(x.shape)
    flat = x.reshape(-1).to(scales.dtype, copy=True)
    for i in range(rows):  # at most BLOCKS_1D blocks
        flat[i * width : (i + 1) * width] *= scales[i]
    return flat.to(x.dtype).reshape(x.shape)


def offset_exponents(dtype: torch.dtype) -> tuple[int, int]:
    """The range of k in "offset" rows of `dtype`: OFFSET_EXPONENTS, capped one below its digits."""
    digits = 1 - math.log2(torch.finfo(dtype).eps)
    high = min(OFFSET_EXPONENTS[1], int(digits) - 1)
    return min(OFFSET_EXPONENTS[0], high), high


def _offset(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    rows, width = _rows(x)
    low, high = offset_exponents(x.dtype)
    exponents = torch.randint(low, high + 1, (rows,), generator=gen).to(torch.float64)
    signs = torch.randint(0, 2, (rows,), generator=gen).to(torch.float64) * 2 - 1
    shifts = (signs * torch.pow(2.0, exponents)).to(device=x.device, dtype=_work(x.dtype))
    return _plus_per_row(x, shifts, width)


def _mixed(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    _, width = _rows(x)
    order = torch.randperm(width, generator=gen)
    pattern = torch.tensor(MIXED_SCALES, dtype=torch.float64)[order % len(MIXED_SCALES)]
    scales = pattern.to(device=x.device, dtype=_work(x.dtype))
    flat = x.reshape(-1).to(scales.dtype)
    if flat.numel() % width == 0:  # broadcast, not a per-element copy of the scales
        return (flat.reshape(-1, width) * scales).to(x.dtype).reshape(x.shape)
    repeats = math.ceil(flat.numel() / width)
    return (flat * scales.repeat(repeats)[: flat.numel()]).to(x.dtype).reshape(x.shape)


def _plus_per_row(x: torch.Tensor, values: torch.Tensor, width: int) -> torch.Tensor:
    """Every row (block) of x plus its value, added in values' dtype and rounded once to x's."""
    flat = x.reshape(-1).to(values.dtype)
    if flat.numel() == len(values) * width:  # broadcast, not a per-element copy of the values
        return (flat.reshape(-1, width) + values[:, None]).to(x.dtype).reshape(x.shape)
    per_element = values.repeat_interleave(width)[: flat.numel()]
    return (flat + per_element).to(x.dtype).reshape(x.shape)


def _rows(x: torch.Tensor) -> tuple[int, int]:
    """(rows, width): the last dimension is a row; a 1-D tensor is cut into BLOCKS_1D blocks."""
    n = x.numel()
    if x.dim() >= 2:
        return n // x.shape[-1], x.shape[-1]
    width = max(1, math.ceil(n / BLOCKS_1D))
    return max(1, math.ceil(n / width)), width


def _work(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _scaled(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x * scale, multiplied in float32 (float64 for float64) and rounded once to x's dtype:
    exact for powers of two, and defined for float8 inputs, which have no multiplication."""
    return (x.to(scale.dtype) * scale).to(x.dtype)
