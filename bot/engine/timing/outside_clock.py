"""What a timed batch took on the parent's own clock, and how many calls the next batch gets.

The statistic of every claim is made of these samples: one per batch, the parent's wall time
from the batch's staging to the timed calls' reply, less what was none of the contender's (the
reference drawing the inputs, the parent copying them in while the contender is frozen:
bot.engine.timing.staging), less the harness's own work for a batch of that many calls as measured on
the trusted reference (bot.engine.timing.harness_cost), divided by the calls. A Measurement carries it
once per call of its batch, so that the median weighs batches by their calls, while batches
stay the units of every interval (bot.core.stats resamples whole batches).
The worker's own per-call figures are diagnostics (bot.engine.timing.hidden, the stream check):
the candidate's process can rebind any clock it reads, and spread a batch's time over its
calls as it likes while every batch total stays exact.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

# The next batch's size follows the fastest of this many latest samples of the contender's own:
# one slowed batch (a sleep in the warm-up) sizes no more than the batch right after it, and a
# moment of a busy host (on 2 shared vCPUs one batch's exchange took 10x the usual) does not
# shrink the batches, which would give the harness's fixed work a larger share of each sample.
# A contender can make its own samples slower, never faster, so it cannot shrink them either.
RECENT_SAMPLES = 5
# Each batch's size is drawn between these shares of the size that would fill the target, so
# that a candidate cannot know a batch's length (and which call is its last) ahead of it.
DRAW_LOW, DRAW_HIGH = 0.5, 1.5


# A batch the calibration explains in full (its noise can exceed a tiny call's time) is as fast
# as the parent's clock can tell: a sample is never below this, so every ratio is finite.
FLOOR_US = 0.001


def batch_sample_us(span_us: float, harness_us: float, calls: int) -> float:
    """One batch's time per call on the parent's clock: its span less the harness's work."""
    return max((span_us - harness_us) / max(calls, 1), FLOOR_US)


def per_call_estimate(samples_us: Sequence[float]) -> float:
    """The time per call that sizes the next batch: the fastest of the latest samples."""
    return min(samples_us[-RECENT_SAMPLES:])


def next_batch_size(per_call_us: float, target_us: float, cap: int, rng: random.Random) -> int:
    """Calls in the next batch: about `target_us` of calls, drawn at random from the secret
    rng between DRAW_LOW and DRAW_HIGH of that, within [1, cap]; at the cap, drawn from its
    upper half."""
    cap = max(1, cap)
    fill = target_us / max(per_call_us, 1.0)
    if fill >= cap:
        return rng.randint(max(1, cap // 2), cap)
    drawn = round(fill * rng.uniform(DRAW_LOW, DRAW_HIGH))
    return max(1, min(drawn, cap))
