"""Autotuning of a Triton implementation's module-level knobs (block sizes, warps, stages):
variants of its source with other values, a coordinate sweep first."""

from __future__ import annotations

import ast
import itertools
import re

from bot.core.domain import CandidateSource, Origin
from bot.propose.derive import Base

# Module-level constants a Triton implementation exposes for tuning, and values to try.
TUNABLES = {
    "BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192),
    "BLOCK": (256, 512, 1024, 2048, 4096),
    "BLOCK_M": (32, 64, 128, 256),
    "BLOCK_N": (32, 64, 128, 256),
    "BLOCK_K": (32, 64, 128),
    "NUM_WARPS": (1, 2, 4, 8, 16),
    "NUM_STAGES": (1, 2, 3, 4, 5),
}
MAX_TUNING_VARIANTS = 16


def tunable_constants(source: str) -> dict[str, int]:
    """Module-level integer constants named like Triton tuning knobs."""
    found = {}
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in TUNABLES
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
        ):
            found[node.targets[0].id] = node.value.value
    return found


def autotune_variants(
    base: Base,
    round_: int | None = None,
    limit: int = MAX_TUNING_VARIANTS,
    tried: frozenset[tuple[tuple[str, int], ...]] = frozenset(),
    pairs: bool = True,
) -> list[CandidateSource]:
    """Variants of a Triton implementation with other block sizes, warps and stages. First each
    knob alone through all its values, the others kept (a coordinate sweep: however many knobs
    there are, none goes untried; on the H200 a fused matmul's five knobs made the old strided
    sample of their product miss whole axes), then pairs of knobs moved together, spread over
    the grid, up to `limit` (unless `pairs` is False: a descent step moves one knob at a time).
    Settings in `tried` (see `setting_of`) are left out."""
    current = tunable_constants(base.source)
    if not current:
        return []
    seen = set(tried) | {_setting_key(current)}
    singles, doubles = [], []
    for key in current:
        for value in TUNABLES[key]:
            singles.append({**current, key: value})
    for a, b in itertools.combinations(current, 2) if pairs else ():
        for va, vb in itertools.product(TUNABLES[a], TUNABLES[b]):
            if va != current[a] and vb != current[b]:
                doubles.append({**current, a: va, b: vb})
    chosen: list[dict[str, int]] = []

    def take(settings: list[dict[str, int]]) -> None:
        for setting in settings:
            key = _setting_key(setting)
            if key not in seen and len(chosen) < limit:
                seen.add(key)
                chosen.append(setting)

    take(singles)
    if len(chosen) < limit and doubles:  # spread what is left over the pairs, not their first corner
        take(doubles[:: max(1, len(doubles) // (limit - len(chosen)))])
    return [_tuned(base, setting, round_) for setting in chosen]


def _setting_key(setting: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(setting.items()))


def setting_of(source: str) -> tuple[tuple[str, int], ...]:
    """A Triton implementation's knob setting, as `autotune_variants` compares them."""
    return _setting_key(tunable_constants(source))


def _tuned(base: Base, setting: dict[str, int], round_: int | None) -> CandidateSource:
    source = base.source
    for key, value in setting.items():
        source = re.sub(rf"^{key}\s*=\s*\d+", f"{key} = {value}", source, count=1, flags=re.M)
    detail = "autotune " + ", ".join(f"{k}={v}" for k, v in setting.items())
    return CandidateSource(
        name="tune-" + "-".join(f"{k.lower()}{v}" for k, v in setting.items()),
        source=source,
        origin=Origin("search", detail, round=round_, parent=base.parent_hash),
    )
