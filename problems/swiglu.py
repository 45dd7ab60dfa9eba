"""SwiGLU activation (vLLM's SiluAndMul): x = [gate | up] of shape [T, 2*I] -> silu(gate) * up.

bf16 in/out.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
INTERMEDIATE = 14336

SHAPES = {
    "prefill": {"TOKENS": 8192, "INTERMEDIATE": 14336},
    "decode": {"TOKENS": 32, "INTERMEDIATE": 14336},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "INTERMEDIATE": 256}}
TARGET = "kernels/swiglu_torch.py"
WATCH = ["kernels/swiglu*"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(TOKENS, 2 * INTERMEDIATE, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def roofline_flops(x) -> int:
    # silu(g) = g / (1 + exp(-g)), then * up: ~5 per output element.
    return 5 * (x.numel() // 2)
