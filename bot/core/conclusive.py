"""Whether a contender's outcome is a conclusion that may stand for a new run (the result cache,
bot.engine.evaluation.cache), or luck that must be measured again.

A verdict on what the code computes is kept; anything a busy or short-of-memory machine can
decide is not. The rule, per contender, with `min_speedup` the claim's threshold:

- **Rejected**: conclusive when every failed check judged what the code computed (values,
  structure, inputs, aliasing, threads, imports). A failure of a check that rests on a clock
  (`CLOCK_CHECKS`: hidden time, wall clock, stream timing, roofline, a GPU left busy), a worker
  that did not start, or a failure that names a timeout, a kill or memory run out is judged
  again: a loaded host slows honest code past a bound, and beside other problems a GPU runs
  out of memory.
- **Accepted, not timed** (it runs under a simulator here): conclusive, nothing was timed.
- **Accepted and timed**: conclusive when its 95 % interval (the geometric mean of the shapes'
  bounds, as selection reads it) lies wholly on one side of `min_speedup`: low >= min_speedup
  (significantly faster: claimed) or high < min_speedup (significantly not faster: never
  claimed, however often it is measured), or some shape is significantly slower (a slowdown
  refuses it whatever the rest). An interval that holds `min_speedup` is inconclusive: an
  honest 7x measured once under load came out [0.13, 136]. So is a shape without a speedup or
  with fewer than two samples on a side (one call bounds nothing, bot.core.stats.speedup).

A conclusive interval is wrong no more often than a fresh one: at most 2.5 % on each side at the
95 % level, the risk every claim of the bot carries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.core.judge import significant
from bot.core.outcomes import ContenderOutcome

# Checks whose outcome rests on a clock: a busy host can fail honest code on them.
CLOCK_CHECKS = frozenset({"hidden time", "wall clock", "stream timing", "roofline", "GPU left busy"})
# A worker's failure that says the machine ran short (time, memory), not what the code computes.
RESOURCE_FAILURE = re.compile(
    r"timed out|no progress for|killed|out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED", re.IGNORECASE
)


@dataclass(frozen=True)
class Conclusion:
    conclusive: bool
    why: str  # one line, for the log: what makes it conclusive, or what is left open


def conclusion(outcome: ContenderOutcome, min_speedup: float) -> Conclusion:
    """Whether `outcome` is a conclusion (see the module's rule) under `min_speedup`."""
    if not outcome.verdict.accepted:
        return _rejection(outcome)
    if outcome.not_timed:
        return Conclusion(True, f"verified, not timed: {outcome.not_timed}")
    for shape in outcome.shapes:
        sp, m = shape.speedup, shape.measurement
        if sp is None or m is None:
            return Conclusion(False, f"shape {shape.shape} has no speedup")
        if m.n < 2 or (sp.baseline is not None and sp.baseline.n < 2):
            return Conclusion(False, f"shape {shape.shape} was timed with fewer than two calls on a side")
    slower = outcome.slower_shapes()
    if slower:
        return Conclusion(True, f"significantly slower on {', '.join(slower)}")
    ci = outcome.speedup_ci
    if ci is None:
        return Conclusion(False, "no interval")
    interval = f"[{ci[0]:.3g}, {ci[1]:.3g}]"
    if significant(outcome, min_speedup):  # the judge's rule, as selection reads it
        return Conclusion(True, f"significantly faster: {interval} clears {min_speedup}")
    if ci[1] < min_speedup:
        return Conclusion(True, f"significantly not faster: {interval} lies under {min_speedup}")
    return Conclusion(False, f"inconclusive: {interval} holds {min_speedup}")


def _rejection(outcome: ContenderOutcome) -> Conclusion:
    failed = [c for c in outcome.verdict.checks if not c.passed]
    if not failed:
        return Conclusion(False, "rejected without a failed check")
    for check in failed:
        if check.name in CLOCK_CHECKS or check.name == "start" or RESOURCE_FAILURE.search(check.evidence):
            return Conclusion(False, f"rejected on {check.name!r}, which a busy machine can decide")
    return Conclusion(True, f"rejected on {', '.join(c.name for c in failed)}")
