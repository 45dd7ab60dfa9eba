"""What every timed batch of one shape shares (`Run`), and the window each batch is timed in."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bot.core.domain import Problem, Shape
from bot.core.tolerance import Rule
from bot.engine.timing.harness_cost import HarnessCost
from bot.engine.timing.lent_picks import PickLending
from bot.engine.timing.outside_checks import OutsideChecks
from bot.engine.timing.records import TimingOptions
from bot.engine.workers.client import WorkerClient

# Called right before each timed batch with its worker: the sandbox freezes every other
# contender's processes there (bot.sandbox.freezer), until the timing phase ends.
Window = Callable[[WorkerClient], object]


def no_window(worker: WorkerClient) -> None:
    return None


@dataclass(frozen=True)
class Run:
    """What every batch of one shape's timing shares."""

    problem: Problem
    shape: Shape
    reference: WorkerClient
    dtypes: list[str]
    rng: random.Random
    options: TimingOptions
    call_timeout_s: float
    harness: HarnessCost
    window: Window
    rules: Sequence[Rule | None]  # per output, the shape's (ReferenceInfo.rules)
    outside: OutsideChecks = field(default_factory=OutsideChecks)  # CPU: the batch read from outside
    # CUDA: picks too large to reveal, compared where they lie (bot.engine.timing.lent_picks)
    picks: PickLending = field(default_factory=lambda: PickLending(on=True))
