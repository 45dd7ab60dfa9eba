"""results.json as typed, frozen objects: the one way the document is built, written and read.

`Results.to_json()` is the document stage 1 writes (bot.engine.loop.outputs.write_results is the only
place it reaches disk); `Results.from_json()` validates a parsed document against
`bot.core.results_schema` (the single contract) and only then builds the objects, so stage 2
and `bot merge` never look into an unchecked dict. Numbers are kept exactly as written (a claim
stage 2 re-derives is not recomputed on the way in), and `to_json(from_json(doc))` gives back
`doc` for every document stage 1 writes.

Here are the document and its problems; the contenders they hold are in
bot.core.results_contenders, their per-shape entries in bot.core.results_shapes, and the JSON
conventions all of them share in bot.core.results_json.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from bot.core.domain import Environment, Skipped, Trigger
from bot.core.judge import Contender, Judgement, Thresholds, judge
from bot.core.plausible import Implausible
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.results_json import as_list, drop_none, read_interval
from bot.core.results_schema import RESULTS_SCHEMA_VERSION, InvalidResults, validate
from bot.core.settings import DEFAULTS
from bot.core.time_split import TimeSplit

KIND = "kernel-bot-results"
RESULTS_FILE = "results.json"  # its name in a results directory


def _implausible(d: Mapping[str, Any]) -> Implausible:
    return Implausible(d["name"], d.get("speedup"), read_interval(d.get("speedup_ci")), d.get("evidence", ""))


@dataclass(frozen=True)
class ProblemResult:
    """One problem of a run: its outcome, baseline, every attempt and the selected best.

    `from_json` here and in the parts it holds builds without checking (fields the schema requires
    default to empty) but for the raw samples, a `Measurement` that checks its own batches
    (ValueError): only `Results.from_json`, which validates the whole document first, reads input."""

    problem: str
    outcome: str
    # The rest by name only: its many optional fields, several of one type, are one slip from a
    # silent swap when passed by position.
    _: KW_ONLY
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
    max_plausible_speedup: float = DEFAULTS.max_plausible_speedup
    stopped: str | None = None
    wall_s: float | None = None
    baseline: ContenderResult | None = None
    skipped: tuple[Skipped, ...] = ()
    environment: Environment | None = None  # None: nothing was measured (written as {})
    llm: Mapping[str, Any] = field(default_factory=dict)
    reference_precision: str | None = None  # stage 1 leaves it out; the schema allows it
    tolerance: str | None = None  # the policy that judged (TolerancePolicy); None: the problem failed
    time_split: TimeSplit | None = None  # where wall_s went; absent in older documents

    @property
    def failed(self) -> bool:
        """It could not be evaluated: its error is in `error`."""
        return self.outcome == "failed"

    @property
    def thresholds(self) -> Thresholds:
        """The bars its contenders were judged at (after stage 2's re-derivation, the trusted ones)."""
        min_speedup = DEFAULTS.min_speedup if self.min_speedup is None else self.min_speedup
        return Thresholds(min_speedup, self.max_plausible_speedup or DEFAULTS.max_plausible_speedup)

    def judge(self, contender: Contender) -> Judgement:
        """The judge's word (bot.core.judge) on one of its contenders, at its thresholds."""
        return judge(contender, self.thresholds, self.not_timed)

    @property
    def improved(self) -> bool:
        """Its best is a claim: significant, timed and plausible. A document stage 1 wrote or
        stage 2 re-derived holds no other best; one read without re-derivation (`bot merge`, the
        renderers) may, and then nothing of it counts."""
        return self.best is not None and self.judge(self.best).claimed

    def to_json(self) -> dict[str, Any]:
        return drop_none(
            {
                "problem": self.problem,
                "problem_path": self.problem_path,
                "target": self.target,
                "best": self.best.to_json() if self.best else None,
                "distributions": as_list(self.distributions),
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
                "tolerance": self.tolerance,
                "time_split": self.time_split.to_json() if self.time_split else None,
            },
            "problem_path",
            "distributions",
            "skipped_distributions",
            "error",
            "min_speedup",
            "stopped",
            "wall_s",
            "reference_precision",
            "tolerance",
            "time_split",
        )

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProblemResult:
        best, base, dists = d.get("best"), d.get("baseline"), d.get("distributions")
        return cls(
            d["problem"],
            d.get("outcome", ""),
            attempts=tuple(ContenderResult.from_json(a) for a in d.get("attempts") or ()),
            problem_path=d.get("problem_path"),
            target=d.get("target"),
            best=BestResult.from_json(best) if best else None,
            distributions=None if dists is None else tuple(dists),
            skipped_distributions=d.get("skipped_distributions"),
            error=d.get("error"),
            not_timed=d.get("not_timed"),
            implausible=tuple(_implausible(f) for f in d.get("implausible") or ()),
            min_speedup=d.get("min_speedup"),
            max_plausible_speedup=d.get("max_plausible_speedup", DEFAULTS.max_plausible_speedup),
            stopped=d.get("stopped"),
            wall_s=d.get("wall_s"),
            baseline=ContenderResult.from_json(base) if base else None,
            skipped=tuple(Skipped(s["transformation"], s["reason"]) for s in d.get("skipped") or ()),
            # {}: nothing was measured
            environment=Environment.from_json(d["environment"]) if d.get("environment") else None,
            llm=dict(d.get("llm") or {}),
            reference_precision=d.get("reference_precision"),
            tolerance=d.get("tolerance"),
            time_split=TimeSplit.from_json(d["time_split"]) if d.get("time_split") else None,
        )


def _problem(i: int, d: Mapping[str, Any]) -> ProblemResult:
    """What the schema cannot say, refused like what it can: samples whose batches do not add up."""
    try:
        return ProblemResult.from_json(d)
    except ValueError as exc:
        raise InvalidResults(f"untrusted results rejected: results.problems[{i}]: {exc}") from None


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
        return tuple(p for p in self.problems if p.improved)

    @property
    def failed(self) -> tuple[ProblemResult, ...]:
        return tuple(p for p in self.problems if p.failed)

    @property
    def best_speedup(self) -> float | None:
        return max((p.best.speedup for p in self.improved if p.best), default=None)

    def to_json(self) -> dict[str, Any]:
        return drop_none(
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
            tuple(_problem(i, p) for i, p in enumerate(data["problems"])),
            Trigger.from_json(trigger) if trigger is not None else None,
            data.get("min_speedup"),
            data.get("created"),
            data.get("shards"),
            data["schema_version"],
            data.get("kind"),
        )
