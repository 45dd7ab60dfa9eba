"""Splits by input size: one execution path for launch-bound shapes, another for large ones,
chosen from the paths' measured speedups per shape."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bot.core.domain import CandidateSource
from bot.core.stats import geomean
from bot.propose.derive import Base, derived
from bot.propose.paths import PATHS

SPLIT_WRAPPER = '''

# --- kernel-bot: {detail} ---------------------------------------------------------
_KernelBotBase = {base}
{helper}

def _kernel_bot_input_bytes(inputs):
    return sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))  # one call per tensor


class ModelNew(_KernelBotBase):
    """Small (launch-bound) inputs take one path and large ones another, split by input size."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernel_bot_small = {small}
        self._kernel_bot_large = {large}

    def forward(self, *inputs):
        if _kernel_bot_input_bytes(inputs) <= {threshold}:
            return self._kernel_bot_small(*inputs)
        return self._kernel_bot_large(*inputs)
'''


@dataclass(frozen=True)
class Split:
    """Inputs of at most `threshold` bytes take the `small` path, larger ones the `large` one."""

    small: str  # a key of PATHS: "eager", "cuda-graph", "compile:<mode>", ...
    large: str
    threshold: int
    gain: float  # expected geometric-mean speedup over the best single path


def input_bytes(description: str) -> int | None:
    """Bytes of the tensors in a shape's input description, e.g. "bfloat16[8, 4096], int64[8]"."""
    import torch

    total = 0
    for dtype, dims in re.findall(r"(\w+)\[([\d,\s]*)\]", description):
        kind = getattr(torch, dtype, None)
        if not isinstance(kind, torch.dtype):
            return None
        numel = 1
        for d in filter(None, (x.strip() for x in dims.split(","))):
            numel *= int(d)
        total += numel * kind.itemsize
    return total or None


def plan_split(shape_bytes: list[int], speedups: dict[str, list[float | None]], min_gain: float = 1.03) -> Split | None:
    """The best two-path split of the shapes by input size, if it beats every single path by
    `min_gain` in geometric mean over the shapes (the per-problem figure of merit)."""
    n = len(shape_bytes)
    paths = {
        p: [float(x) for x in v] for p, v in speedups.items() if len(v) == n and all(x is not None and x > 0 for x in v)
    }
    if n < 2 or len(paths) < 2:
        return None
    order = sorted(range(n), key=lambda i: shape_bytes[i])

    def score(path: str, idx: list[int]) -> float:
        return geomean([paths[path][i] for i in idx])

    single = max(score(p, order) for p in paths)
    best: Split | None = None
    for k in range(1, n):
        small_idx, large_idx = order[:k], order[k:]
        if shape_bytes[order[k - 1]] == shape_bytes[order[k]]:
            continue  # no size threshold separates these shapes
        small = max(paths, key=lambda p: score(p, small_idx))
        large = max(paths, key=lambda p: score(p, large_idx))
        if small == large:
            continue
        total = geomean([paths[small][i] for i in small_idx] + [paths[large][i] for i in large_idx])
        threshold = int(math.sqrt(shape_bytes[order[k - 1]] * shape_bytes[order[k]]))
        if best is None or total / single > best.gain:
            best = Split(small, large, threshold, total / single)
    return best if best is not None and best.gain >= min_gain else None


def split_candidate(base: Base, split: Split, round_: int | None = None) -> CandidateSource:
    small, large = PATHS[split.small], PATHS[split.large]
    detail = f"{small.words} for inputs up to {split.threshold} bytes, {large.words} above, of {base.label}"
    helper = "".join(dict.fromkeys(p.helper for p in (small, large)))  # each once, in order
    return derived(
        base,
        SPLIT_WRAPPER,
        detail,
        f"split-{base.label}",
        round_,
        helper=helper,
        small=small.expression,
        large=large.expression,
        threshold=split.threshold,
    )
