"""Residual add + RMSNorm (vLLM's fused_add_rms_norm), bf16.

(x, residual) -> (normed, new_residual) with new_residual = x + residual
(rounded to bf16, as it is stored) and normed = rmsnorm(new_residual) * weight,
statistics accumulated in float32 (float64 for the float64 reference). The
inputs are not modified: the new residual is a fresh tensor.
"""

import torch
import torch.nn as nn

TOKENS = 8192
HIDDEN = 8192
EPS = 1e-5

SHAPES = {
    "prefill": {"TOKENS": 8192, "HIDDEN": 8192},
    "decode": {"TOKENS": 32, "HIDDEN": 8192},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "HIDDEN": 256}}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        new_residual = x + residual
        acc = torch.promote_types(x.dtype, torch.float32)
        hf = new_residual.to(acc)
        rstd = torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        normed = (hf * rstd * self.weight.to(acc)).to(x.dtype)
        return normed, new_residual


def get_inputs():
    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    residual = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    return [x, residual]


def get_init_inputs():
    return [HIDDEN, EPS]


def roofline_flops(x, residual) -> int:
    # add, square+accumulate, scale, weight multiply: ~5 per element.
    return 5 * x.numel()
