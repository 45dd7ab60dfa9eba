"""RMSNorm (Llama-style): y = x / sqrt(mean(x^2, -1) + eps) * weight.

bf16 in, bf16 out; the statistics are accumulated in float32 (float64 when the
harness runs the float64 reference, so nothing here downcasts a wider input).
"""

import torch
import torch.nn as nn

TOKENS = 8192
HIDDEN = 4096
EPS = 1e-5

SHAPES = {
    "prefill": {"TOKENS": 8192, "HIDDEN": 4096},
    "decode": {"TOKENS": 32, "HIDDEN": 4096},
    "prefill_70b": {"TOKENS": 8192, "HIDDEN": 8192},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "HIDDEN": 256}}
TARGET = "kernels/rmsnorm_triton.py"
WATCH = ["kernels/rmsnorm*"]


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * rstd * self.weight.to(acc)).to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN, EPS]


def roofline_flops(x) -> int:
    # square+add for the sum, then scale and weight multiply: ~4 per element.
    return 4 * x.numel()
