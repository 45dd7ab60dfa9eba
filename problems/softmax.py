"""Softmax over the last dimension (bf16 in/out).

"prefill" is attention-score-like (many rows of 4096 keys); "decode" is
sampling-like (a few rows over a 128256-entry vocabulary).
"""

import torch
import torch.nn as nn

ROWS = 32768
COLS = 4096

SHAPES = {
    "prefill": {"ROWS": 32768, "COLS": 4096},
    "decode": {"ROWS": 64, "COLS": 128256},
}
CPU_SHAPES = {"small": {"ROWS": 64, "COLS": 1000}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def roofline_flops(x) -> int:
    # max, subtract, exp, sum, divide: ~5 per element.
    return 5 * x.numel()
