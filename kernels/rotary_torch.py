"""Rotary embedding in plain PyTorch: the current implementation of problems/rotary_embedding.py.

Written the way a first port from a per-head reference often is: one head at a time, the
cos/sin tables rebuilt for every head, and the rotated halves written into a preallocated
output. Each head costs about fifteen small operator launches, so a [T, H, D] call pays
for H of them where one vectorised pass over all heads would do.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, head_dim: int, theta: float = 500000.0):
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta

    def forward(self, q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(q.dtype, torch.float32)
        half = self.head_dim // 2
        out = torch.empty_like(q)
        for h in range(q.shape[1]):
            exponents = torch.arange(0, half, device=q.device, dtype=acc) * (2.0 / self.head_dim)
            inv_freq = 1.0 / (self.theta**exponents)
            angles = positions.to(acc)[:, None] * inv_freq[None, :]  # [T, D/2]
            cos, sin = torch.cos(angles), torch.sin(angles)
            qh = q[:, h, :].to(acc)
            q1, q2 = qh[:, :half], qh[:, half:]
            out[:, h, :half] = (q1 * cos - q2 * sin).to(q.dtype)
            out[:, h, half:] = (q2 * cos + q1 * sin).to(q.dtype)
        return out
