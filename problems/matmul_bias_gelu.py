"""MLP up-projection with bias and exact (erf) GELU: gelu(x @ W^T + b), bf16.

Llama-3-8B-like sizes: hidden 4096 -> intermediate 14336.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 14336

SHAPES = {
    "prefill": {"TOKENS": 8192, "IN_FEATURES": 4096, "OUT_FEATURES": 14336},
    "decode": {"TOKENS": 16, "IN_FEATURES": 4096, "OUT_FEATURES": 14336},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "IN_FEATURES": 256, "OUT_FEATURES": 512}}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(TOKENS, IN_FEATURES, dtype=torch.bfloat16)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def roofline_flops(x) -> int:
    tokens, in_features = x.shape
    # OUT_FEATURES is not visible from the inputs alone; read the global at call time.
    out_features = OUT_FEATURES
    return 2 * tokens * in_features * out_features + 10 * tokens * out_features
