"""Mean cross-entropy loss over a Llama-3 vocabulary.

logits (bf16, [T, V]) and labels (int64, [T]) -> scalar mean loss (float32;
float64 for the float64 reference). The loss is computed in float32, as
training and evaluation code does (`F.cross_entropy(logits.float(), labels)`).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
VOCAB = 128256

SHAPES = {
    "prefill": {"TOKENS": 4096, "VOCAB": 128256},
    "decode": {"TOKENS": 64, "VOCAB": 128256},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "VOCAB": 1000}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        acc = torch.promote_types(logits.dtype, torch.float32)
        return F.cross_entropy(logits.to(acc), labels)


def get_inputs():
    logits = torch.randn(TOKENS, VOCAB, dtype=torch.bfloat16)
    labels = torch.randint(0, VOCAB, (TOKENS,), dtype=torch.int64)
    return [logits, labels]


def get_init_inputs():
    return []


def roofline_flops(logits, labels) -> int:
    # max, subtract, exp, sum per logit; log and gather per row.
    return 4 * logits.numel() + 4 * logits.shape[0]
