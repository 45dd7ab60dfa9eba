"""Splitting a sweep over runners or runs: a GitHub Actions matrix of shards, balanced by cost.
`bot plan --shards N`, `bot run --shard K/N` and `bot optimize --shard K/N` all cut with `assign`,
so the same problems make the same shards whichever command asks."""

from __future__ import annotations

import re
from pathlib import Path

from bot.core.domain import Problem
from bot.core.errors import BotError


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' with 1 <= K <= N."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise BotError(f"--shard {text!r}: expected K/N with 1 <= K <= N, e.g. 2/4")
    return int(match[1]), int(match[2])


def expected_cost(problem: Problem) -> float:
    """Relative cost of optimising a problem: shapes x implementations to transform."""
    bases = 2 if problem.target_relpath else 1
    return float(len(problem.gpu_shapes) * bases)


def assign(problems: list[Problem], shards: int) -> list[list[Problem]]:
    """Longest-processing-time-first: the costliest problem goes to the least loaded shard.
    Ties break on the problem's name, then its path (two folders may hold a `19_ReLU.py`), so the
    plan depends only on the set of problems."""
    if shards < 1:
        raise BotError("--shards must be at least 1")
    loads = [0.0] * shards
    buckets: list[list[Problem]] = [[] for _ in range(shards)]
    for problem in sorted(problems, key=lambda p: (-expected_cost(p), p.name, str(p.path))):
        i = min(range(shards), key=lambda k: (loads[k], k))
        buckets[i].append(problem)
        loads[i] += expected_cost(problem)
    return [sorted(b, key=lambda p: (p.name, str(p.path))) for b in buckets]


def shard_problems(problems: list[Problem], k: int, n: int) -> list[Problem]:
    return assign(problems, n)[k - 1]


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


def matrix(problems: list[Problem], shards: int, root: Path) -> dict[str, list[dict[str, object]]]:
    """`{"include": [{"shard": "1/N", "problems": [...]}, ...]}` for `strategy.matrix`: paths
    relative to `root` (the repository, or the folder the command runs in), absolute elsewhere."""
    buckets = assign(problems, shards)
    return {
        "include": [
            {
                "shard": f"{i}/{shards}",
                "problems": [_shown(p.path, root) for p in bucket],
                "cost": sum(expected_cost(p) for p in bucket),
            }
            for i, bucket in enumerate(buckets, 1)
            if bucket
        ]
    }
