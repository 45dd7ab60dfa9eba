"""Mixture-of-experts router: softmax over experts, top-k, renormalise.

Input: router logits [T, E] (float32). Output: (weights float32 [T, k],
expert indices int64 [T, k]), sorted by descending weight; the weights of each
row sum to 1.

The top-k is taken on the logits themselves (softmax is monotonic, so this is
the same selection), which makes the integer indices identical between the
native and the float64 reference run: the float64 inputs are exact upcasts.
"""

import torch
import torch.nn as nn

TOKENS = 8192
NUM_EXPERTS = 64
TOP_K = 8

SHAPES = {
    "prefill": {"TOKENS": 8192, "NUM_EXPERTS": 64, "TOP_K": 8},
    "decode": {"TOKENS": 32, "NUM_EXPERTS": 64, "TOP_K": 8},
}
CPU_SHAPES = {"small": {"TOKENS": 64, "NUM_EXPERTS": 64, "TOP_K": 8}}
# torch.topk does not say which of equal values it returns, and the indices are compared exactly.
SKIP_DISTRIBUTIONS = {
    "zeros": "all 64 logits of a row tie: which 8 experts top-k returns is implementation-defined",
    "rows": "its zero rows tie all 64 logits: which 8 experts top-k returns is implementation-defined",
    "offset": "a row offset by up to 8192 keeps its logits to 1e-3 in float32: near-ties at the 8th expert, "
    "and which one top-k returns depends on the order of a kernel's rounding",
}


class Model(nn.Module):
    def __init__(self, top_k: int):
        super().__init__()
        self.top_k = top_k

    def forward(self, logits: torch.Tensor):
        probs = torch.softmax(logits, dim=-1)
        _, indices = torch.topk(logits, self.top_k, dim=-1, largest=True, sorted=True)
        weights = probs.gather(-1, indices)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, indices


def get_inputs():
    return [torch.randn(TOKENS, NUM_EXPERTS, dtype=torch.float32)]


def get_init_inputs():
    return [TOP_K]


def roofline_flops(logits) -> int:
    t, e = logits.shape
    # softmax (~5 per logit) plus a top-k selection (~log2(k) compares per logit).
    return 5 * t * e + 3 * t * e
