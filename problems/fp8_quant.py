"""Per-token dynamic FP8 (e4m3fn) quantisation.

x (bf16, [T, H]) -> (q float8_e4m3fn [T, H], scales float32 [T, 1]) with
scale = max(amax(|x|, row) / 448, 1e-12) and q = clamp(x / scale, -448, 448).
The scale is computed in float32 (float64 for the float64 reference).
"""

import torch
import torch.nn as nn

TOKENS = 8192
HIDDEN = 4096
FP8_MAX = 448.0

SHAPES = {
    "prefill": {"TOKENS": 8192, "HIDDEN": 4096},
    "decode": {"TOKENS": 32, "HIDDEN": 4096},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "HIDDEN": 256}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        amax = xf.abs().amax(dim=-1, keepdim=True)
        scales = (amax / FP8_MAX).clamp(min=1e-12)
        q = (xf / scales).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q, scales


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


def roofline_flops(x) -> int:
    # abs+max for the amax, divide and clamp for the quantisation.
    return 4 * x.numel()
