"""The per-shape entries of results.json: a measurement's statistics beside its raw samples, and
a speedup beside what it was derived from.

Stage 2 re-derives these claims from the samples (bot.github.rederive), so the numbers are kept
exactly as written, not recomputed on the way in. The raw samples are held as the engine's own
`Measurement`, so a document and a run share one type of evidence. `from_json` checks only what a
Measurement checks of itself (its batches add up to its samples: ValueError otherwise) and builds
the rest unchecked: only `bot.core.results.Results.from_json`, which validates the whole document
first, reads input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.core.measurement import Measurement
from bot.core.outcomes import ShapeOutcome
from bot.core.results_json import Interval, as_list, drop_none, read_interval


@dataclass(frozen=True)
class MeasurementResult:
    """A measurement as written: its statistics (claims) beside its samples (evidence)."""

    samples: Measurement  # only its raw samples are written; the statistics beside are as claimed
    median_us: float
    iqr_us: float | None = None
    q1_us: float | None = None
    q3_us: float | None = None
    n: int | None = None
    rel_se: float | None = None
    batches: int | None = None
    workers: int | None = None
    worker_medians_us: tuple[float, ...] | None = None

    @classmethod
    def of(cls, m: Measurement) -> MeasurementResult:
        return cls(
            m,
            m.median_us,
            m.iqr_us,
            m.quantile_us(0.25),
            m.quantile_us(0.75),
            m.n,
            m.rel_se if math.isfinite(m.rel_se) else None,  # unknown from one batch: JSON has no Infinity
            len(m.sizes),
            m.workers,
            m.worker_medians,
        )

    def to_json(self) -> dict[str, Any]:
        stats = drop_none(
            {
                "median_us": self.median_us,
                "iqr_us": self.iqr_us,
                "q1_us": self.q1_us,
                "q3_us": self.q3_us,
                "n": self.n,
                "rel_se": self.rel_se,
                "batches": self.batches,
                "workers": self.workers,
                "worker_medians_us": as_list(self.worker_medians_us),
            },
            "iqr_us",
            "q1_us",
            "q3_us",
            "n",
            "rel_se",
            "batches",
            "workers",
            "worker_medians_us",
        )
        return {**stats, **self.samples.samples_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MeasurementResult:
        medians = d.get("worker_medians_us")
        return cls(
            Measurement.from_samples_json(d),
            d["median_us"],
            d.get("iqr_us"),
            d.get("q1_us"),
            d.get("q3_us"),
            d.get("n"),
            d.get("rel_se"),
            d.get("batches"),
            d.get("workers"),
            None if medians is None else tuple(medians),
        )


@dataclass(frozen=True)
class Derivation:
    """What a speedup was derived from besides the contender's own samples."""

    baseline: Measurement  # its raw samples
    spread_log_sd: float
    spread_df: int
    resamples: int

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.samples_json(),
            "spread_log_sd": self.spread_log_sd,
            "spread_df": self.spread_df,
            "resamples": self.resamples,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Derivation:
        return cls(Measurement.from_samples_json(d["baseline"]), d["spread_log_sd"], d["spread_df"], d["resamples"])


@dataclass(frozen=True)
class ShapeResult:
    shape: str
    inputs: str | None = None
    output_dtype: str | None = None
    measurement: MeasurementResult | None = None
    speedup: float | None = None
    speedup_ci: Interval | None = None
    level: float | None = None  # these three only with a speedup
    significance: str | None = None
    derivation: Derivation | None = None
    floor_us: float | None = None
    pct_of_floor: float | None = None
    max_abs_err: float | None = None
    norm_rel_err: float | None = None
    nbytes: int | None = None  # what floor_us is computed from (bot.core.roofline)
    flops: int | None = None

    @classmethod
    def of(cls, s: ShapeOutcome) -> ShapeResult:
        sp = s.speedup
        derivation = (
            Derivation(sp.baseline, sp.spread_log_sd, sp.spread_df, sp.resamples)
            if sp is not None and sp.baseline is not None
            else None
        )
        return cls(
            s.shape,
            s.inputs,
            s.output_dtype,
            MeasurementResult.of(s.measurement) if s.measurement else None,
            sp.ratio if sp else None,
            (sp.ci_low, sp.ci_high) if sp else None,
            sp.level if sp else None,
            sp.significance if sp else None,
            derivation,
            s.floor_us,
            s.pct_of_floor,
            s.max_abs_err,
            s.norm_rel_err,
            s.nbytes,
            s.flops,
        )

    def to_json(self) -> dict[str, Any]:
        return drop_none(
            {
                "shape": self.shape,
                "inputs": self.inputs,
                "output_dtype": self.output_dtype,
                "measurement": self.measurement.to_json() if self.measurement else None,
                "speedup": self.speedup,
                "speedup_ci": as_list(self.speedup_ci),
                "level": self.level,
                "significance": self.significance,
                "derivation": self.derivation.to_json() if self.derivation else None,
                "floor_us": self.floor_us,
                "pct_of_floor": self.pct_of_floor,
                "max_abs_err": self.max_abs_err,
                "norm_rel_err": self.norm_rel_err,
                "nbytes": self.nbytes,
                "flops": self.flops,
            },
            "level",
            "significance",
            "derivation",
            "nbytes",
            "flops",
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShapeResult:
        m, der = d.get("measurement"), d.get("derivation")
        return cls(
            d["shape"],
            d.get("inputs"),
            d.get("output_dtype"),
            MeasurementResult.from_json(m) if m else None,
            d.get("speedup"),
            read_interval(d.get("speedup_ci")),
            d.get("level"),
            d.get("significance"),
            Derivation.from_json(der) if der else None,
            d.get("floor_us"),
            d.get("pct_of_floor"),
            d.get("max_abs_err"),
            d.get("norm_rel_err"),
            d.get("nbytes"),
            d.get("flops"),
        )
