"""Where a problem's wall time went: worker start, compilation, the reference (oracle),
verification, timing, and the rest, from intervals on the parent's own monotonic clock.

Parts of one problem overlap (contenders verify in parallel threads, one compiling while another
checks its second call): each instant of the problem's wall time is shared equally among the
distinct parts running then, so the parts and "other" (no part running: waits for the device held
by other problems, the parent's bookkeeping, proposing) add up to the wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

PARTS = ("start", "compile", "oracle", "verify", "timing")  # in the order a problem meets them

# Told how long a wait for the device lasted, (began, got) on the monotonic clock: a wait for its
# lock (bot.engine.workers.gpulock) or for room in its memory (bot.engine.workspace.memory_budget).
Waited = Callable[[float, float], None]


def no_record(began: float, got: float) -> None:
    """A wait nobody records."""


@dataclass(frozen=True)
class Segment:
    """One part running from `begin_s` to `end_s` (the parent's monotonic clock)."""

    part: str
    begin_s: float
    end_s: float


@dataclass(frozen=True)
class TimeSplit:
    """A problem's wall time by part, in seconds; the parts and `other_s` add up to `wall_s`.
    A run's split (`TimeSplit.total`) sums its problems', which ran side by side with `--jobs`
    or several GPU lanes, so it can exceed the run's own wall time."""

    wall_s: float
    start_s: float = 0.0  # worker processes (or forks) up to the end of their import
    compile_s: float = 0.0  # the contenders' construction and first calls (torch.compile, Triton JIT)
    oracle_s: float = 0.0  # the trusted reference's float64 work: construction, trials, timed-call checks
    verify_s: float = 0.0  # the contenders' later trial calls and the parent's comparisons
    timing_s: float = 0.0  # the timed phases, less the oracle's checks inside them
    other_s: float = 0.0  # none of the above
    # Not a part: how much of the wall time some thread of the problem waited for the device,
    # for its lock (bot.engine.workers.gpulock: held by another problem's work, or this one's
    # timing) or for room in its memory that other problems held (bot.engine.workspace.
    # memory_budget), whatever else ran meanwhile; None where not recorded (older documents).
    device_wait_s: float | None = None

    def parts(self) -> dict[str, float]:
        """Part name -> seconds, "other" last."""
        return {**{p: float(getattr(self, f"{p}_s")) for p in PARTS}, "other": self.other_s}

    def line(self) -> str:
        """`time: 41 s (start 6 s, compile 12 s, oracle 5 s, verify 8 s, timing 9 s, other 1 s)`,
        and `; waiting for the device 7.5 s` where some of it was."""
        shown = ", ".join(f"{name} {_seconds(s)}" for name, s in self.parts().items())
        waited = self.device_wait_s or 0.0
        shown_wait = f"; waiting for the device {_seconds(waited)}" if waited >= 0.05 else ""
        return f"time: {_seconds(self.wall_s)} ({shown}){shown_wait}"

    def to_json(self) -> dict[str, float]:
        """Every field; the wait only where recorded."""
        return {f.name: round(float(v), 3) for f in fields(self) if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TimeSplit:
        waited = d.get("device_wait_s")
        parts = {f.name: float(d.get(f.name, 0.0)) for f in fields(cls) if f.name != "device_wait_s"}
        return cls(**parts, device_wait_s=None if waited is None else float(waited))

    @classmethod
    def total(cls, splits: Iterable[TimeSplit]) -> TimeSplit | None:
        """The sum of `splits` (None for none): a run's time, summed over its problems; the
        wait summed over the splits that recorded one (None where none did)."""
        listed = list(splits)
        if not listed:
            return None
        parts = {
            f.name: sum(float(getattr(s, f.name)) for s in listed) for f in fields(cls) if f.name != "device_wait_s"
        }
        waits = [s.device_wait_s for s in listed if s.device_wait_s is not None]
        return cls(**parts, device_wait_s=sum(waits) if waits else None)


FIELDS = tuple(f.name for f in fields(TimeSplit))  # its keys in results.json
REQUIRED = tuple(f for f in FIELDS if f != "device_wait_s")  # every one but what older documents lack


def run_line(splits: Iterable[TimeSplit | None]) -> str | None:
    """The run's line: its problems' splits summed (None where none has one)."""
    listed = [s for s in splits if s is not None]
    total = TimeSplit.total(listed)
    if total is None:
        return None
    return f"run {total.line()}, summed over {len(listed)} problem(s) (problems run side by side add up)"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def covered_s(intervals: Iterable[tuple[float, float]], begin_s: float, end_s: float) -> float:
    """How much of `begin_s`..`end_s` the union of `intervals` covers."""
    total, reached = 0.0, begin_s
    clipped = ((max(lo, begin_s), min(hi, end_s)) for lo, hi in intervals)
    for lo, hi in sorted((lo, hi) for lo, hi in clipped if hi > lo):  # none outside the window
        if hi > reached:
            total += hi - max(lo, reached)
            reached = hi
    return total


def split_wall_time(
    segments: Iterable[Segment], begin_s: float, end_s: float, waits: Iterable[tuple[float, float]] = ()
) -> TimeSplit:
    """The split of the wall time from `begin_s` to `end_s`: each instant shared equally among
    the distinct parts of `segments` running then (clipped to the window); the rest is other.
    `waits`: intervals some thread waited for the device, their union reported beside the parts."""
    wall = max(end_s - begin_s, 0.0)
    events: list[tuple[float, int, str]] = []
    for seg in segments:
        if seg.part not in PARTS:
            raise ValueError(f"unknown part {seg.part!r} (expected one of {', '.join(PARTS)})")
        lo, hi = max(seg.begin_s, begin_s), min(seg.end_s, end_s)
        if hi > lo:
            events += [(lo, 1, seg.part), (hi, -1, seg.part)]
    events.sort()
    running = dict.fromkeys(PARTS, 0)  # how many segments of each part are open
    shares = dict.fromkeys(PARTS, 0.0)
    last = begin_s
    for when, change, part in events:
        active = [p for p, n in running.items() if n > 0]
        for p in active:
            shares[p] += (when - last) / len(active)
        running[part] += change
        last = when
    covered = sum(shares.values())
    return TimeSplit(
        wall,
        **{f"{p}_s": s for p, s in shares.items()},
        other_s=max(wall - covered, 0.0),
        device_wait_s=covered_s(waits, begin_s, end_s),
    )
