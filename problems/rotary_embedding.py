"""Rotary position embedding (Llama-3 / NeoX "rotate half" style) applied to q [T, H, D].

Inputs: q (bf16, [T, H, D]) and per-token positions (int64, [T]); cos/sin are
computed inside forward in float32 (float64 for the float64 reference).
Output: bf16 [T, H, D].
"""

import torch
import torch.nn as nn

TOKENS = 8192
HEADS = 32
HEAD_DIM = 128
MAX_POSITION = 32768
ROPE_THETA = 500000.0

SHAPES = {
    "prefill": {"TOKENS": 8192, "HEADS": 32, "HEAD_DIM": 128},
    "decode": {"TOKENS": 64, "HEADS": 32, "HEAD_DIM": 128},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "HEADS": 4, "HEAD_DIM": 64}}
TARGET = "kernels/rotary_torch.py"
WATCH = ["kernels/rotary*"]


class Model(nn.Module):
    def __init__(self, head_dim: int, theta: float = 500000.0):
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta

    def forward(self, q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(q.dtype, torch.float32)
        half = self.head_dim // 2
        exponents = torch.arange(0, half, device=q.device, dtype=acc) * (2.0 / self.head_dim)
        inv_freq = 1.0 / (self.theta**exponents)
        angles = positions.to(acc)[:, None] * inv_freq[None, :]  # [T, D/2]
        cos = torch.cos(angles)[:, None, :]  # [T, 1, D/2]
        sin = torch.sin(angles)[:, None, :]
        qf = q.to(acc)
        q1, q2 = qf[..., :half], qf[..., half:]
        out = torch.cat((q1 * cos - q2 * sin, q2 * cos + q1 * sin), dim=-1)
        return out.to(q.dtype)


def get_inputs():
    q = torch.randn(TOKENS, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    positions = torch.randint(0, MAX_POSITION, (TOKENS,), dtype=torch.int64)
    return [q, positions]


def get_init_inputs():
    return [HEAD_DIM, ROPE_THETA]


def roofline_flops(q, positions) -> int:
    # two multiplies and one add per output element; cos/sin per (token, frequency).
    t, h, d = q.shape
    return 3 * q.numel() + 2 * t * (d // 2)
