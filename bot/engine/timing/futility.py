"""Futility: a candidate stops being timed on a shape once it can no longer be selected.

Stopping is only ever on the losing side, so it cannot make a claim: a stopped candidate's
speedup on the shape is derived from exactly the batches that stopped it (its own, and the
baseline's of the same rounds, so the comparison stays interleaved), and that interval lies
under the bar. A claim's interval still comes from the protocol's own stopping rule (every
median known to 1 %, or the time cap), which never looks at the ratio. What stopping costs is
power: a candidate that would have cleared the bar after all is, rarely, stopped first; the
looks use a 99 % interval, at a few rounds spaced apart, to keep that rare.

In the README's dry run on 2 vCPUs, without this, seven of twelve timed problems had a single
candidate at 0.33x to 0.77x of the baseline, each timed for the whole 5 s cap after its third
round had already said so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bot.core import stats as bench
from bot.core.measurement import Measurement

LEVEL = 0.99  # wider than the claims' 95 %: the look is repeated
LOOK_GROWTH = 1.5  # a look after rounds 3, 5, 8, 12, 18, ...


def bar(min_speedup: float, shapes: int) -> float:
    """The upper bound under which a candidate can no longer be selected on a shape. With one
    shape its interval is the candidate's, so under `min_speedup` it cannot clear the bar; with
    several, a shape under `min_speedup` can still be paid for by the others, and only a
    significant loss (under 1/min_speedup) rules the candidate out (no trade between shapes)."""
    return min_speedup if shapes == 1 else 1 / min_speedup


def first_batches(m: Measurement, batches: int) -> Measurement:
    """The measurement as it stood after its first `batches` batches."""
    n = sum(m.batch_sizes[:batches])
    return Measurement(m.samples_us[:n], m.batch_sizes[:batches], m.batch_workers[:batches])


@dataclass
class Futility:
    """Called after every timing round with the records and the workers still timed; names the
    contenders to stop (the baseline too, once no candidate is left to compare with it)."""

    baseline: str
    below: float  # bar(): a candidate whose upper bound falls under it stops
    min_speedup: float
    min_batches: int = 6  # on both sides before a look, and two on every worker
    stopped: dict[str, int] = field(default_factory=dict)  # candidate -> baseline batches then
    rounds: int = 0
    next_look: int = 0

    def __call__(self, records: Mapping, active: Mapping[str, Sequence]) -> set[str]:
        self.rounds += 1
        if self.baseline not in active or self.rounds < self.next_look:
            return set()
        base = _measured(records[self.baseline], len(active[self.baseline]), self.min_batches)
        candidates = {
            n: m
            for n in active
            if n != self.baseline and (m := _measured(records[n], len(active[n]), self.min_batches)) is not None
        }
        if base is None or not candidates:
            return set()
        self.next_look = max(self.rounds + 1, math.ceil(self.rounds * LOOK_GROWTH))
        spread = bench.worker_spread([base, *candidates.values()], trusted=base)
        out = {
            n
            for n, m in candidates.items()
            if bench.speedup(base, m, self.min_speedup, level=LEVEL, spread=spread).ci_high < self.below
        }
        for name in out:
            self.stopped[name] = len(base.batch_sizes)
        if out and set(active) - out == {self.baseline}:
            out.add(self.baseline)  # nothing left to compare it with
        return out

    def baseline_for(self, name: str, baseline: Measurement) -> Measurement:
        """The baseline a candidate's speedup is derived from: for one stopped early, its batches
        of the rounds the candidate was timed in."""
        return first_batches(baseline, self.stopped[name]) if name in self.stopped else baseline


def _measured(record, workers: int, min_batches: int) -> Measurement | None:
    """The record's measurement once it has enough batches for a look."""
    m = record.measurement()
    if m is None or len(m.batch_sizes) < min_batches:
        return None
    taken = record.batch_workers
    if any(taken.count(i) < 2 for i in range(workers)):
        return None
    return m
