"""Layout change [B, S, H, D] -> [B, H, S, D], materialised contiguously (bf16).

A pure memory-bound copy: no arithmetic.
"""

import torch
import torch.nn as nn

BATCH = 1
SEQ = 8192
HEADS = 32
HEAD_DIM = 128

SHAPES = {
    "prefill": {"BATCH": 1, "SEQ": 8192, "HEADS": 32, "HEAD_DIM": 128},
    "decode": {"BATCH": 4, "SEQ": 16, "HEADS": 32, "HEAD_DIM": 128},
}
CPU_SHAPES = {"small": {"BATCH": 2, "SEQ": 64, "HEADS": 4, "HEAD_DIM": 32}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


def get_inputs():
    return [torch.randn(BATCH, SEQ, HEADS, HEAD_DIM, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def roofline_flops(x) -> int:
    return 0
