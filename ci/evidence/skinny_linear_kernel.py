# A split-K Triton GEMM for nn.Linear layers with few rows: ci/evidence/probe_skinny_linear.py times it.
# The idea it tests: with few rows (decode batches) a linear layer's time is its weight's read,
# and cuBLAS reached only 2.8 TB/s of the H200's 4.8 on matmul_bias_gelu's decode layer, so
# swapping the operands (the weight's rows fill the tensor cores' wide side, the few input rows
# the narrow one) and splitting K over SPLIT_K programs per output tile might keep more weight
# streams in flight; a second small kernel sums the float32 partials and adds the bias. It did
# not pay (fourteenth session, docs/results-h200.md): the best of 108 settings, with no split,
# was 1.035x over eager on that layer, and it lost to cuBLAS on the other Llama-like layers. So
# it is a probe, not a catalogue entry. Rows above SKINNY_MAX_ROWS, other dtypes and CPU tensors
# (outside Triton's interpreter) keep F.linear.
import os as _kernel_bot_os

import torch
import triton
import triton.language as tl

SPLIT_K = 4
BLOCK_N = 64
BLOCK_K = 128
NUM_WARPS = 4
NUM_STAGES = 4
SKINNY_MAX_ROWS = 64
_KERNEL_BOT_REDUCE_BLOCK = 1024


@triton.jit
def _kernel_bot_skinny_partial(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                               sxm, sxk, swn, swk, sym, syn, sys,
                               HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    iters = tl.cdiv(K, SPLIT_K * BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # the output's transpose: swapped operands
    for i in range(iters):
        offs_k = (pid_k * iters + i) * BLOCK_K + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + offs_n[:, None] * swn + offs_k[None, :] * swk,
                    mask=(offs_n[:, None] < N) & (offs_k[None, :] < K), other=0.0)
        xt = tl.load(x_ptr + offs_m[None, :] * sxm + offs_k[:, None] * sxk,
                     mask=(offs_m[None, :] < M) & (offs_k[:, None] < K), other=0.0)
        acc = tl.dot(w, xt, acc)
    mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[:, None]
        tl.store(y_ptr + offs_m[None, :] * sym + offs_n[:, None] * syn,
                 acc.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(y_ptr + pid_k * sys + offs_m[None, :] * sym + offs_n[:, None] * syn, acc, mask=mask)


@triton.jit
def _kernel_bot_skinny_reduce(p_ptr, b_ptr, y_ptr, total, N, sys,
                              HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(p_ptr + s * sys + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def _kernel_bot_skinny_applies(x, weight) -> bool:
    rows = x.numel() // max(x.shape[-1], 1) if x.dim() else 0
    on_device = x.is_cuda or _kernel_bot_os.environ.get("TRITON_INTERPRET") == "1"
    return (on_device and 0 < rows <= SKINNY_MAX_ROWS and x.dtype == weight.dtype
            and x.dtype in (torch.bfloat16, torch.float16) and weight.dim() == 2
            and x.shape[-1] == weight.shape[1] and x.device == weight.device)


def _kernel_bot_skinny_linear(x, weight, bias=None):
    """F.linear(x, weight, bias), computed by the split-K kernel where it applies."""
    if not _kernel_bot_skinny_applies(x, weight):
        return torch.nn.functional.linear(x, weight, bias)
    x2 = x.reshape(-1, x.shape[-1])
    m, k = x2.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    block_m = max(16, triton.next_power_of_2(m))
    split = max(1, SPLIT_K)
    has_bias = bias is not None
    b = bias if has_bias else weight  # any pointer; never read without HAS_BIAS
    grid = (triton.cdiv(n, BLOCK_N), split, triton.cdiv(m, block_m))
    if split == 1:
        _kernel_bot_skinny_partial[grid](
            x2, weight, b, y, m, n, k, x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1),
            y.stride(0), y.stride(1), 0, HAS_BIAS=has_bias, BLOCK_M=block_m, BLOCK_N=BLOCK_N,
            BLOCK_K=BLOCK_K, SPLIT_K=1, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    else:
        partial = torch.empty((split, m, n), dtype=torch.float32, device=x.device)
        _kernel_bot_skinny_partial[grid](
            x2, weight, b, partial, m, n, k, x2.stride(0), x2.stride(1), weight.stride(0),
            weight.stride(1), partial.stride(1), partial.stride(2), partial.stride(0),
            HAS_BIAS=False, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SPLIT_K=split,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        _kernel_bot_skinny_reduce[(triton.cdiv(m * n, _KERNEL_BOT_REDUCE_BLOCK),)](
            partial, b, y, m * n, n, partial.stride(0), HAS_BIAS=has_bias, SPLIT_K=split,
            BLOCK=_KERNEL_BOT_REDUCE_BLOCK, num_warps=4)
    return y.reshape(*x.shape[:-1], n)

