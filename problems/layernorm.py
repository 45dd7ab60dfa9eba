"""LayerNorm over the last dimension with weight and bias (bf16 in/out)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

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
        self.hidden = hidden
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16))
        self.bias = nn.Parameter(torch.randn(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN, EPS]


def roofline_flops(x) -> int:
    # mean, variance, normalise, scale, shift: ~7 per element.
    return 7 * x.numel()
