"""RMSNorm as a Triton kernel: the current implementation of problems/rmsnorm.py.

One program per row; the row is walked in BLOCK_SIZE chunks twice (sum of
squares in float32, then normalise * weight and store), so any hidden size
works with any power-of-two BLOCK_SIZE. BLOCK_SIZE and NUM_WARPS are the
tuning knobs; they are read at call time, so a search may rewrite them.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024
NUM_WARPS = 4


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    stride_x_row,
    stride_y_row,
    n_cols,
    eps,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    y_row = y_ptr + row * stride_y_row

    sq = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        sq += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=0) / n_cols + eps)

    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = x * rstd * w
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    block = BLOCK_SIZE
    if block <= 0 or block & (block - 1):
        raise ValueError(f"BLOCK_SIZE must be a positive power of two, got {block}")
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    w = weight if weight.is_contiguous() else weight.contiguous()
    y = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if x2.shape[0] > 0:
        _rmsnorm_kernel[(x2.shape[0],)](
            x2,
            w,
            y,
            x2.stride(0),
            y.stride(0),
            n_cols,
            eps,
            BLOCK_SIZE=block,
            num_warps=NUM_WARPS,
        )
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)
