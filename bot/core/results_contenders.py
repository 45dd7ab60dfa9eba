"""The contenders of results.json: the baseline and each attempt as judged and timed, and the
selected best with its source.

`from_json` builds without checking: only `bot.core.results.Results.from_json`, which validates
the whole document first, reads input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from bot.core.domain import CheckResult, Origin, source_sha256
from bot.core.outcomes import ContenderOutcome
from bot.core.results_json import Interval, as_list, drop_none, read_interval
from bot.core.results_shapes import ShapeResult


def _origin(d: Mapping[str, Any] | None) -> Origin | None:
    if d is None:
        return None
    return Origin(d.get("strategy", ""), d.get("detail", ""), d.get("model"), d.get("round"), d.get("parent"))


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
            **drop_none(
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
                    "speedup_ci": as_list(self.speedup_ci),
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
            tuple(CheckResult.from_json(c) for c in d.get("checks") or ()),
            d.get("speedup"),
            read_interval(d.get("speedup_ci")),
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
        return drop_none(
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
            cast(Interval, read_interval(d.get("speedup_ci"))),
            tuple(ShapeResult.from_json(s) for s in d.get("shapes") or ()),
            d.get("path"),
            _origin(d.get("origin")),
        )
