"""results.json as typed, frozen objects: the one way the document is built, written and read.

`Results.to_json()` is the document stage 1 writes (bot.engine.outputs.write_results is the only
place it reaches disk); `Results.from_json()` validates a parsed document against
`bot.core.results_schema` (the single contract) and only then builds the objects, so stage 2
and `bot merge` never look into an unchecked dict. Numbers are kept exactly as written (a claim
stage 2 re-derives is not recomputed on the way in), and `to_json(from_json(doc))` gives back
`doc` for every document stage 1 writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from bot.core.domain import CheckResult, Environment, Origin, Trigger, source_sha256
from bot.core.measurement import Measurement
from bot.core.outcomes import ContenderOutcome, ShapeOutcome
from bot.core.plausible import DEFAULT_MAX_PLAUSIBLE_SPEEDUP, Implausible
from bot.core.results_schema import RESULTS_SCHEMA_VERSION, InvalidResults, validate  # noqa: F401

KIND = "kernel-bot-results"
RESULTS_FILE = "results.json"  # its name in a results directory
Interval = tuple[float, float]


def _ci(value: Any) -> Interval | None:
    return (value[0], value[1]) if isinstance(value, (list, tuple)) and len(value) == 2 else None


def _list(value: tuple[Any, ...] | None) -> list[Any] | None:
    return None if value is None else list(value)


def _drop_none(pairs: dict[str, Any], *optional: str) -> dict[str, Any]:
    """`pairs` without the optional (not nullable) keys whose value is None."""
    return {k: v for k, v in pairs.items() if not (v is None and k in optional)}


@dataclass(frozen=True)
class Samples:
    """Raw timing samples: everything a measurement's statistics are derived from."""

    samples_us: tuple[float, ...]
    batch_sizes: tuple[int, ...]
    batch_workers: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "samples_us": list(self.samples_us),
            "batch_sizes": list(self.batch_sizes),
            "batch_workers": list(self.batch_workers),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Samples:
        return cls(
            tuple(d.get("samples_us") or ()), tuple(d.get("batch_sizes") or ()), tuple(d.get("batch_workers") or ())
        )

    def measurement(self) -> Measurement:
        """ValueError where the batches do not add up to the samples."""
        return Measurement.from_samples_json(self.to_json())


@dataclass(frozen=True)
class MeasurementResult:
    """A measurement as written: its statistics (claims) beside its samples (evidence)."""

    samples: Samples
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
            Samples(m.samples_us, m.batch_sizes, m.batch_workers),
            m.median_us,
            m.iqr_us,
            m.quantile_us(0.25),
            m.quantile_us(0.75),
            m.n,
            m.rel_se,
            len(m.sizes),
            m.workers,
            m.worker_medians,
        )

    def to_json(self) -> dict[str, Any]:
        stats = _drop_none(
            {
                "median_us": self.median_us,
                "iqr_us": self.iqr_us,
                "q1_us": self.q1_us,
                "q3_us": self.q3_us,
                "n": self.n,
                "rel_se": self.rel_se,
                "batches": self.batches,
                "workers": self.workers,
                "worker_medians_us": _list(self.worker_medians_us),
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
        return {**stats, **self.samples.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MeasurementResult:
        medians = d.get("worker_medians_us")
        return cls(
            Samples.from_json(d),
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

    baseline: Samples
    spread_log_sd: float
    spread_df: int
    resamples: int

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline.to_json(),
            "spread_log_sd": self.spread_log_sd,
            "spread_df": self.spread_df,
            "resamples": self.resamples,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Derivation:
        return cls(Samples.from_json(d["baseline"]), d["spread_log_sd"], d["spread_df"], d["resamples"])


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

    @classmethod
    def of(cls, s: ShapeOutcome) -> ShapeResult:
        sp = s.speedup
        derivation = (
            Derivation(
                Samples(sp.baseline.samples_us, sp.baseline.batch_sizes, sp.baseline.batch_workers),
                sp.spread_log_sd,
                sp.spread_df,
                sp.resamples,
            )
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
        )

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "shape": self.shape,
                "inputs": self.inputs,
                "output_dtype": self.output_dtype,
                "measurement": self.measurement.to_json() if self.measurement else None,
                "speedup": self.speedup,
                "speedup_ci": _list(self.speedup_ci),
                "level": self.level,
                "significance": self.significance,
                "derivation": self.derivation.to_json() if self.derivation else None,
                "floor_us": self.floor_us,
                "pct_of_floor": self.pct_of_floor,
                "max_abs_err": self.max_abs_err,
                "norm_rel_err": self.norm_rel_err,
            },
            "level",
            "significance",
            "derivation",
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
            _ci(d.get("speedup_ci")),
            d.get("level"),
            d.get("significance"),
            Derivation.from_json(der) if der else None,
            d.get("floor_us"),
            d.get("pct_of_floor"),
            d.get("max_abs_err"),
            d.get("norm_rel_err"),
        )


def _origin(d: Mapping[str, Any] | None) -> Origin | None:
    if d is None:
        return None
    return Origin(d.get("strategy", ""), d.get("detail", ""), d.get("model"), d.get("round"), d.get("parent"))


def _check(d: Mapping[str, Any]) -> CheckResult:
    return CheckResult(d["name"], d["passed"], d.get("evidence", ""), dict(d.get("details") or {}))


@dataclass(frozen=True)
class ContenderResult:
    """The baseline or one attempt (`round`, `reason` and `significant` only for attempts)."""

    name: str
    shapes: tuple[ShapeResult, ...] = ()
    path: str | None = None
    source_hash: str | None = None
    source_sha256: str | None = None
    role: str | None = None
    origin: Origin | None = None
    accepted: bool | None = None
    status: str | None = None
    reasons: tuple[str, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    speedup: float | None = None
    speedup_ci: Interval | None = None
    median_us: float | None = None
    slower_shapes: tuple[str, ...] = ()
    not_timed: str | None = None
    round: int | None = None
    reason: str | None = None
    significant: bool | None = None

    @property
    def is_accepted(self) -> bool:
        return self.status == "accepted" if self.accepted is None else self.accepted

    @classmethod
    def of(
        cls, o: ContenderOutcome, round_: int | None = None, reason: str | None = None, significant: bool | None = None
    ) -> ContenderResult:
        c = o.candidate
        return cls(
            c.name,
            tuple(ShapeResult.of(s) for s in o.shapes),
            str(c.path) if c.path else None,
            c.source_hash,
            source_sha256(c.source),
            o.role,
            c.origin,
            o.verdict.accepted,
            o.verdict.status,
            o.verdict.reasons,
            o.verdict.checks,
            o.speedup,
            o.speedup_ci,
            o.median_us,
            tuple(o.slower_shapes()),
            o.not_timed,
            round_,
            reason,
            significant,
        )

    def to_json(self) -> dict[str, Any]:
        attempt = (
            {"round": self.round, "status": self.status, "reason": self.reason, "significant": self.significant}
            if self.round is not None
            else {}
        )
        return {
            **attempt,
            **_drop_none(
                {
                    "name": self.name,
                    "path": self.path,
                    "source_hash": self.source_hash,
                    "source_sha256": self.source_sha256,
                    "role": self.role,
                    "origin": self.origin.to_json() if self.origin else None,
                    "accepted": self.accepted,
                    "status": self.status,
                    "reasons": list(self.reasons),
                    "checks": [c.to_json() for c in self.checks],
                    "speedup": self.speedup,
                    "speedup_ci": _list(self.speedup_ci),
                    "median_us": self.median_us,
                    "slower_shapes": list(self.slower_shapes),
                    "not_timed": self.not_timed,
                    "shapes": [s.to_json() for s in self.shapes],
                },
                "source_hash",
                "source_sha256",
                "role",
                "origin",
                "accepted",
                "status",
            ),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ContenderResult:
        return cls(
            d["name"],
            tuple(ShapeResult.from_json(s) for s in d.get("shapes") or ()),
            d.get("path"),
            d.get("source_hash"),
            d.get("source_sha256"),
            d.get("role"),
            _origin(d.get("origin")),
            d.get("accepted"),
            d.get("status"),
            tuple(d.get("reasons") or ()),
            tuple(_check(c) for c in d.get("checks") or ()),
            d.get("speedup"),
            _ci(d.get("speedup_ci")),
            d.get("median_us"),
            tuple(d.get("slower_shapes") or ()),
            d.get("not_timed"),
            d.get("round"),
            d.get("reason"),
            d.get("significant"),
        )


@dataclass(frozen=True)
class BestResult:
    """The selected candidate, with its source: what a follow-up pull request writes."""

    name: str
    source: str
    source_sha256: str
    speedup: float
    speedup_ci: Interval
    shapes: tuple[ShapeResult, ...]
    path: str | None = None
    origin: Origin | None = None

    @classmethod
    def of(cls, o: ContenderOutcome) -> BestResult:
        c = o.candidate
        return cls(
            c.name,
            c.source,
            source_sha256(c.source),
            cast(float, o.speedup),  # selected: it has a speedup and its interval
            cast(Interval, o.speedup_ci),
            tuple(ShapeResult.of(s) for s in o.shapes),
            str(c.path) if c.path else None,
            c.origin,
        )

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "name": self.name,
                "path": self.path,
                "source": self.source,
                "source_sha256": self.source_sha256,
                "speedup": self.speedup,
                "speedup_ci": list(self.speedup_ci or ()),
                "origin": self.origin.to_json() if self.origin else None,
                "shapes": [s.to_json() for s in self.shapes],
            },
            "origin",
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BestResult:
        return cls(
            d["name"],
            d.get("source", ""),
            d.get("source_sha256", ""),
            cast(float, d.get("speedup")),  # the schema requires both where a reader trusts them
            cast(Interval, _ci(d.get("speedup_ci"))),
            tuple(ShapeResult.from_json(s) for s in d.get("shapes") or ()),
            d.get("path"),
            _origin(d.get("origin")),
        )


def _implausible(d: Mapping[str, Any]) -> Implausible:
    return Implausible(d["name"], d.get("speedup"), _ci(d.get("speedup_ci")), d.get("evidence", ""))


def _environment(d: Mapping[str, Any] | None) -> Environment | None:
    """None for `{}`: a problem that failed measured nothing."""
    if not d:
        return None
    return Environment(
        d.get("device", ""),
        d.get("device_name", ""),
        d.get("torch", ""),
        d.get("triton"),
        d.get("cuda"),
        d.get("driver"),
        d.get("python", ""),
        dict(d.get("clocks") or {}),
        containment=d.get("containment", ""),
    )


@dataclass(frozen=True)
class Skipped:
    transformation: str
    reason: str


@dataclass(frozen=True)
class ProblemResult:
    """One problem of a run: its outcome, baseline, every attempt and the selected best.

    `from_json` here and below builds without checking (fields the schema requires default to
    empty): only `Results.from_json`, which validates the whole document first, reads input."""

    problem: str
    outcome: str
    attempts: tuple[ContenderResult, ...] = ()
    problem_path: str | None = None
    target: str | None = None
    best: BestResult | None = None
    distributions: tuple[str, ...] | None = None
    skipped_distributions: Mapping[str, str] | None = None
    error: str | None = None
    not_timed: str | None = None
    implausible: tuple[Implausible, ...] = ()
    min_speedup: float | None = None
    max_plausible_speedup: float = DEFAULT_MAX_PLAUSIBLE_SPEEDUP
    stopped: str | None = None
    wall_s: float | None = None
    baseline: ContenderResult | None = None
    skipped: tuple[Skipped, ...] = ()
    environment: Environment | None = None  # None: nothing was measured (written as {})
    llm: Mapping[str, Any] = field(default_factory=dict)
    reference_precision: str | None = None  # stage 1 leaves it out; the schema allows it

    @property
    def failed(self) -> bool:
        """It could not be evaluated: its error is in `error`."""
        return self.outcome == "failed"

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "problem": self.problem,
                "problem_path": self.problem_path,
                "target": self.target,
                "best": self.best.to_json() if self.best else None,
                "distributions": _list(self.distributions),
                "skipped_distributions": None
                if self.skipped_distributions is None
                else dict(self.skipped_distributions),
                "outcome": self.outcome,
                "error": self.error,
                "not_timed": self.not_timed,
                "implausible": [f.to_json() for f in self.implausible],
                "min_speedup": self.min_speedup,
                "max_plausible_speedup": self.max_plausible_speedup,
                "stopped": self.stopped,
                "wall_s": self.wall_s,
                "baseline": self.baseline.to_json() if self.baseline else None,
                "attempts": [a.to_json() for a in self.attempts],
                "skipped": [{"transformation": s.transformation, "reason": s.reason} for s in self.skipped],
                "environment": self.environment.to_json() if self.environment else {},
                "llm": dict(self.llm),
                "reference_precision": self.reference_precision,
            },
            "problem_path",
            "distributions",
            "skipped_distributions",
            "error",
            "min_speedup",
            "stopped",
            "wall_s",
            "reference_precision",
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProblemResult:
        best, base, dists = d.get("best"), d.get("baseline"), d.get("distributions")
        return cls(
            d["problem"],
            d.get("outcome", ""),
            tuple(ContenderResult.from_json(a) for a in d.get("attempts") or ()),
            d.get("problem_path"),
            d.get("target"),
            BestResult.from_json(best) if best else None,
            None if dists is None else tuple(dists),
            d.get("skipped_distributions"),
            d.get("error"),
            d.get("not_timed"),
            tuple(_implausible(f) for f in d.get("implausible") or ()),
            d.get("min_speedup"),
            d.get("max_plausible_speedup", DEFAULT_MAX_PLAUSIBLE_SPEEDUP),
            d.get("stopped"),
            d.get("wall_s"),
            ContenderResult.from_json(base) if base else None,
            tuple(Skipped(s["transformation"], s["reason"]) for s in d.get("skipped") or ()),
            _environment(d.get("environment")),
            dict(d.get("llm") or {}),
            d.get("reference_precision"),
        )


@dataclass(frozen=True)
class Results:
    """The whole document: what triggered the run, the threshold, one entry per problem."""

    problems: tuple[ProblemResult, ...]
    trigger: Trigger | None = None
    min_speedup: float | None = None
    created: str | None = None
    shards: int | None = None
    schema_version: int = RESULTS_SCHEMA_VERSION
    kind: str | None = KIND

    @property
    def improved(self) -> tuple[ProblemResult, ...]:
        return tuple(p for p in self.problems if p.best is not None)

    @property
    def failed(self) -> tuple[ProblemResult, ...]:
        return tuple(p for p in self.problems if p.failed)

    @property
    def best_speedup(self) -> float | None:
        return max((p.best.speedup for p in self.improved if p.best), default=None)

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {
                "schema_version": self.schema_version,
                "kind": self.kind,
                "created": self.created,
                "trigger": self.trigger.to_json() if self.trigger else None,
                "min_speedup": self.min_speedup,
                "problems": [p.to_json() for p in self.problems],
                "shards": self.shards,
            },
            "kind",
            "created",
            "trigger",
            "min_speedup",
            "shards",
        )

    def dumps(self) -> str:
        """The text of results.json."""
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, data: Any) -> Results:
        """Validated against the schema first: InvalidResults (naming the field) if it does not match."""
        validate(data)
        trigger = data.get("trigger")
        return cls(
            tuple(ProblemResult.from_json(p) for p in data["problems"]),
            Trigger.from_json(trigger) if trigger is not None else None,
            data.get("min_speedup"),
            data.get("created"),
            data.get("shards"),
            data["schema_version"],
            data.get("kind"),
        )
