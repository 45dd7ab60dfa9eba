"""The plausibility guard: a speedup no honest change makes is flagged for a human, never claimed
(applied to a whole contender by bot.core.judge).

A ratio far above what kernel work gives (the default bound is 100x; the largest honest win
on the H200 sweep was rmsnorm's 9.81x) says more about the baseline (a simulator, a debug
path, a sleep) or the measurement than about the candidate. So does a median under the
roofline floor: no kernel moves its bytes faster than the memory can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLAG = "implausible; check the baseline"


@dataclass(frozen=True)
class Implausible:
    """A timed candidate the guard kept from being claimed, with the numbers that say why."""

    name: str
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None,
            "evidence": self.evidence,
        }


def _us(value: float) -> str:
    return f"{value:.4g} us" if value < 10_000 else f"{value / 1000:,.1f} ms"


def shape_reasons(
    shape: str, ratio: float | None, median_us: float | None, floor: float | None, max_plausible_speedup: float
) -> list[str]:
    """Why one shape's timing cannot be claimed: a ratio above `max_plausible_speedup`, a median under
    the roofline floor; empty where it can."""
    if ratio is None or median_us is None:
        return []
    reasons = []
    if ratio > max_plausible_speedup:
        reasons.append(
            f"{shape}: {ratio:,.1f}x is above the {max_plausible_speedup:g}x bound "
            f"(baseline {_us(median_us * ratio)}, candidate {_us(median_us)})"
        )
    if floor is not None and median_us < floor:
        reasons.append(f"{shape}: {_us(median_us)} is below the roofline floor of {_us(floor)}")
    return reasons
