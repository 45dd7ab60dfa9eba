"""SwiGLU in plain PyTorch: the current implementation of problems/swiglu.py.

x = [gate | up] of shape [T, 2*I] -> silu(gate) * up (three kernels:
silu, multiply, and the strided reads of the two halves).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
