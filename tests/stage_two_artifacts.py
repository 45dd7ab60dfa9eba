"""Stage-1 artifacts for stage-2 tests, serialised by stage 1's own code (no GPU, no workers).

The measurements are synthetic, but the speedups and intervals come from `bot.core.stats` and the
JSON from `bot.engine.loop.optimize.problem_result` and `bot.engine.loop.outputs.results_document`,
exactly as `bot run` writes them.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

from bot.core import stats as bench
from bot.core.domain import (
    CandidateSource,
    CheckResult,
    Environment,
    Origin,
    Problem,
    Shape,
    Trigger,
    Verdict,
)
from bot.core.judge import Thresholds, significant
from bot.core.measurement import Measurement
from bot.core.outcomes import ContenderOutcome, ShapeOutcome
from bot.core.roofline import floor_us, peaks_for
from bot.core.settings import DEFAULTS
from bot.core.time_split import TimeSplit
from bot.engine.loop.attempts import Attempt
from bot.engine.loop.optimize import problem_result
from bot.engine.loop.outputs import results_document

PROBLEM_SOURCE = (
    'import torch\n\nTARGET = "kernels/rmsnorm.py"\n\n'
    "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
    "def get_inputs():\n    return [torch.randn(8, 8)]\n\n"
    "def get_init_inputs():\n    return []\n"
)
KERNEL_SOURCE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 1\n"
FAST_SOURCE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x  # fast\n"


def measurement(
    center_us: float, seed: int, batches: int = 8, per_batch: int = 5, workers: int = 2, worker_offset: float = 0.04
) -> Measurement:
    """Samples within 3 % of `center_us`, each worker process `worker_offset` slower than the last
    (fresh processes of one kernel differ so on the H200: docs/benchmark.md)."""
    rng = random.Random(seed)
    samples = tuple(
        center_us * (1 + worker_offset * (b % workers)) * (1 + 0.03 * rng.random())
        for b in range(batches)
        for _ in range(per_batch)
    )
    return Measurement(samples, (per_batch,) * batches, tuple(i % workers for i in range(batches)))


def _outcome(name: str, source: str, role: str, shapes: tuple[ShapeOutcome, ...]) -> ContenderOutcome:
    verdict = Verdict("accepted", (CheckResult("values", True, "all trials within tolerance"),))
    return ContenderOutcome(CandidateSource(name, source, Origin("search", "test")), role, verdict, shapes)


def honest_results(
    speedup_factor: float = 2.0,
    target: str = "kernels/rmsnorm.py",
    min_speedup: float = 1.05,
    device_name: str = "NVIDIA H100 80GB HBM3",
    slower_attempts: int = 0,
    batches: int = 8,
    per_batch: int = 5,
) -> dict[str, Any]:
    """results.json of one problem (rmsnorm) whose candidate is `speedup_factor` times faster,
    beside `slower_attempts` accepted candidates between it and the baseline."""
    base_m = measurement(100.0, 1, batches, per_batch)
    factors = [speedup_factor] + [
        1 + (speedup_factor - 1) * (k + 1) / (slower_attempts + 2) for k in range(slower_attempts)
    ]
    timed = [measurement(100.0 / f, 2 + k, batches, per_batch) for k, f in enumerate(factors)]
    spread = bench.worker_spread([base_m, *timed], trusted=base_m)
    shape = Shape("default")
    nbytes = 2 * 8 * 8 * 4  # float32[8, 8] read and written: the floor on the device's peaks
    floor = floor_us(nbytes, None, peaks_for(device_name))
    base_shape = ShapeOutcome(shape.name, "float32[8, 8]", "float32", base_m, None, floor, 0.0, 0.0, nbytes)
    baseline = _outcome("eager-reference", KERNEL_SOURCE, "baseline", (base_shape,))
    outcomes = []
    for k, m in enumerate(timed):
        sp = bench.speedup(base_m, m, min_speedup, spread=spread)
        name, source = ("fast-rmsnorm", FAST_SOURCE) if k == 0 else (f"tile-{k}", FAST_SOURCE + f"# {k}\n")
        outcomes.append(
            _outcome(
                name,
                source,
                "candidate",
                (ShapeOutcome(shape.name, "float32[8, 8]", "float32", m, sp, floor, 0.0, 0.0, nbytes),),
            )
        )
    problem = Problem(
        Path("/repo/problems/rmsnorm.py"),
        "rmsnorm",
        PROBLEM_SOURCE,
        Path("/repo"),
        target,
        (shape,),
        (shape,),
        {},
        ("standard",),
        "float64",
        (),
    )
    env = Environment("cuda", device_name, "2.13.0", "3.9.0", "12.8", "570.1", "3.11.7")
    chosen = outcomes[0] if significant(outcomes[0], min_speedup) else None
    attempts = tuple(Attempt(0, o) for o in outcomes)
    split = TimeSplit(12.5, start_s=2.0, compile_s=3.0, oracle_s=1.5, verify_s=2.5, timing_s=3.0, other_s=0.5)
    result = problem_result(
        problem,
        baseline,
        attempts,
        chosen,
        Thresholds(min_speedup),
        environment=env,
        stopped="done",
        wall_s=12.5,
        tolerance=str(DEFAULTS.tolerance),
        time_split=split,
    )
    return results_document([result], Trigger(kind="pull_request"), min_speedup).to_json()


def copied_candidates(copies: int, batches: int = 8, per_batch: int = 5) -> dict[str, Any]:
    """`honest_results` with its timed candidate copied under other names, `copies` in all: an
    artifact of many speedups that costs one to build (every copy re-derives to the same bits)."""
    doc = honest_results(batches=batches, per_batch=per_batch)
    attempts = doc["problems"][0]["attempts"]
    for k in range(copies - 1):
        twin = copy.deepcopy(attempts[0])
        twin["name"] = f"copy-{k}"
        attempts.append(twin)
    return doc
