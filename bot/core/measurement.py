"""Timing samples of one contender on one shape, and the speedup of one contender over another.

A Measurement keeps the raw samples and derives every statistic from them; a Speedup keeps what
its interval was derived from, so the publishing stage can derive it again from results.json
(bot.core.stats computes it, bot.github.rederive checks it). Only the standard library is
imported here so that the GPU-side path stays light.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Worker processes per contender, at most (`--replicas`): on the H200 a 5 us kernel's median
# repeated within 1 % across fresh runs with this many, and moved by 2 % with two (docs/benchmark.md).
STEADY_REPLICAS = 16


@dataclass(frozen=True)
class Measurement:
    """Raw timing samples of one contender on one shape; statistics are derived."""

    samples_us: tuple[float, ...]
    # Lengths of the consecutive batches the samples were taken in (one visit of the
    # interleaved protocol each). Calls within a batch share their moment (clocks, host
    # state), so batches, not calls, are the independent units; () means every sample is
    # its own batch.
    batch_sizes: tuple[int, ...] = ()
    # Which of the contender's worker processes took each batch (bot.engine.timing.interleaved, replicas); ()
    # means one worker took them all.
    batch_workers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.batch_sizes and sum(self.batch_sizes) != len(self.samples_us):
            raise ValueError(f"batch sizes {sum(self.batch_sizes)} != {len(self.samples_us)} samples")
        if self.batch_workers and len(self.batch_workers) != len(self.batch_sizes):
            raise ValueError(f"{len(self.batch_workers)} batch workers for {len(self.batch_sizes)} batches")

    @property
    def workers(self) -> int:
        return len(set(self.batch_workers)) or 1

    @property
    def worker_medians(self) -> tuple[float, ...]:
        """The median of each worker's own samples, in worker order."""
        if not self.batch_workers:
            return (self.median_us,)
        taken: dict[int, list[float]] = {}
        start = 0
        for worker, size in zip(self.batch_workers, self.batch_sizes):
            taken.setdefault(worker, []).extend(self.samples_us[start : start + size])
            start += size
        return tuple(statistics.median(taken[w]) for w in sorted(taken))

    @property
    def n(self) -> int:
        return len(self.samples_us)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.batch_sizes or (1,) * len(self.samples_us)

    @property
    def batch_medians(self) -> tuple[float, ...]:
        out, start = [], 0
        for size in self.sizes:
            out.append(statistics.median(self.samples_us[start : start + size]))
            start += size
        return tuple(out)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    def quantile_us(self, q: float) -> float:
        s = sorted(self.samples_us)
        pos = q * (len(s) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def iqr_us(self) -> float:
        return self.quantile_us(0.75) - self.quantile_us(0.25)

    @property
    def rel_se(self) -> float:
        """Relative standard error of the median: the larger of the estimate from the IQR
        of all calls and the one from the spread between batches (calls within a batch are
        correlated, so the first alone is too optimistic)."""
        if self.n < 2 or self.median_us <= 0:
            return math.inf
        sigma = self.iqr_us / 1.349
        within = 1.2533 * sigma / math.sqrt(self.n) / self.median_us
        if not self.batch_sizes:
            return within
        meds = self.batch_medians
        if len(meds) < 2:
            return math.inf
        between = statistics.stdev(meds) / math.sqrt(len(meds)) / self.median_us
        return max(within, between)

    def to_json(self, with_samples: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "median_us": self.median_us,
            "iqr_us": self.iqr_us,
            "q1_us": self.quantile_us(0.25),
            "q3_us": self.quantile_us(0.75),
            "n": self.n,
            "rel_se": self.rel_se,
            "batches": len(self.sizes),
            "workers": self.workers,
            "worker_medians_us": list(self.worker_medians),
        }
        if with_samples:
            out.update(self.samples_json())
        return out

    def samples_json(self) -> dict[str, Any]:
        """The raw samples alone: everything the statistics are derived from."""
        return {
            "samples_us": list(self.samples_us),
            "batch_sizes": list(self.batch_sizes),
            "batch_workers": list(self.batch_workers),
        }

    @classmethod
    def from_samples_json(cls, data: Mapping[str, Any]) -> Measurement:
        """The inverse of `samples_json`. A missing or null list reads as (): no samples, or one
        sample a batch, or one worker (a document read without its schema may lack them).
        ValueError where the batches do not add up to the samples."""
        return cls(
            tuple(float(v) for v in data.get("samples_us") or ()),
            tuple(int(v) for v in data.get("batch_sizes") or ()),
            tuple(int(v) for v in data.get("batch_workers") or ()),
        )


@dataclass(frozen=True)
class Speedup:
    """Baseline median / candidate median with a bootstrap confidence interval."""

    ratio: float
    ci_low: float
    ci_high: float
    level: float
    significance: str  # "faster" | "slower" | "no significant difference"
    # What the interval was derived from besides the candidate's own samples: the publishing
    # stage recomputes ratio and interval from these and refuses an artifact that disagrees.
    baseline: Measurement | None = None
    spread_log_sd: float = 0.0
    spread_df: int = 0
    resamples: int = 2000

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "speedup": self.ratio,
            "speedup_ci": [self.ci_low, self.ci_high],
            "level": self.level,
            "significance": self.significance,
        }
        if self.baseline is not None:
            out["derivation"] = {
                "baseline": self.baseline.samples_json(),
                "spread_log_sd": self.spread_log_sd,
                "spread_df": self.spread_df,
                "resamples": self.resamples,
            }
        return out
