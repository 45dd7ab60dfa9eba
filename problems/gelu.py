"""GELU with the tanh approximation (GPT-2 / Gemma style), bf16 in/out."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
FEATURES = 14336

SHAPES = {
    "prefill": {"TOKENS": 8192, "FEATURES": 14336},
    "decode": {"TOKENS": 32, "FEATURES": 14336},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "FEATURES": 512}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(TOKENS, FEATURES, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def roofline_flops(x) -> int:
    # 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))): ~8 arithmetic ops + tanh.
    return 8 * x.numel()
