"""Correctness trials: fresh secret-seeded inputs, full outputs compared in the parent."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from bot import verify
from bot.domain import CheckResult, Problem, Shape
from bot.workers import WorkerClient, WorkerFailure


@dataclass
class ReferenceInfo:
    """What the reference worker told us about one shape (for roofline and reports)."""

    meta: list[dict[str, Any]] = field(default_factory=list)
    nbytes: int = 0
    flops: int | None = None
    inputs: list[str] = field(default_factory=list)  # e.g. "bfloat16[8192, 4096]"


@dataclass
class TrialStats:
    max_abs_err: float = 0.0
    norm_rel_err: float = 0.0

    def add(self, details: Mapping[str, Any]) -> None:
        self.max_abs_err = max(self.max_abs_err, float(details.get("max_abs_err", 0.0)))
        self.norm_rel_err = max(self.norm_rel_err, float(details.get("norm_rel_err", 0.0)))


def failure_check(exc: WorkerFailure) -> CheckResult:
    """A worker failure as a check result; the log tail is the evidence a human needs."""
    names = {"import": "import", "construct": "construction", "call": "call", "start": "start",
             "channel": "result channel"}
    name = names.get(exc.phase, exc.phase)
    reason = exc.reason
    # A compiler's complaint (nvcc, g++, Triton) is the evidence a kernel author needs.
    errors = [line.strip() for line in exc.log_tail.splitlines() if "error" in line.lower()
              and not line.lstrip().startswith(("File ", "Traceback", "raise "))]
    if exc.phase == "import" and errors:
        reason += "\n" + "\n".join(errors[:6])
    return CheckResult(name, False, reason, {"log_tail": exc.log_tail})


def trial_plan(problem: Problem, rng: random.Random, per_distribution: int) -> list[tuple[str, int]]:
    """Each distribution `per_distribution` times, plus one more standard draw so that every
    contender is called at least twice with different inputs (no caching across calls)."""
    plan = [(d, rng.getrandbits(62)) for d in problem.distributions for _ in range(per_distribution)]
    plan.append(("standard", rng.getrandbits(62)))
    return plan


def run_trials(problem: Problem, shape: Shape, reference: WorkerClient,
               contenders: Mapping[str, WorkerClient], rng: random.Random, per_distribution: int,
               timeout_s: float, progress: Callable[[str], None]
               ) -> tuple[ReferenceInfo, dict[str, list[CheckResult]], dict[str, TrialStats]]:
    """Run every trial on every contender; a contender stops at its first failed check."""
    info = ReferenceInfo()
    checks: dict[str, list[CheckResult]] = {name: [] for name in contenders}
    stats = {name: TrialStats() for name in contenders}
    alive = dict(contenders)
    plan = trial_plan(problem, rng, per_distribution)
    for n, (dist, seed) in enumerate(plan, 1):
        progress(f"{problem.name} [{shape.name}] trial {n}/{len(plan)} ({dist}), "
                 f"{len(alive)} contender(s)")
        ref = reference.request({"op": "run", "seed": seed, "distribution": dist},
                                timeout_s * 20, "problem")  # float64 runs are slower
        info.meta, info.nbytes, info.flops = ref["meta"], ref["bytes"], ref["flops"]
        info.inputs = ref["input_meta"]
        dtypes = [m["dtype"] for m in ref["meta"]]
        label = f"shape {shape.name}, {dist} inputs"
        for name, worker in list(alive.items()):
            try:
                got = worker.request({"op": "run", "seed": seed, "distribution": dist},
                                     timeout_s, "call")
            except WorkerFailure as exc:
                checks[name].append(failure_check(exc))
                del alive[name]
                continue
            results = [verify.check_output_meta(ref["meta"], got["meta"]),
                       verify.check_inputs_unchanged(ref["inputs_before"], got["inputs_before"],
                                                     got["inputs_after"], label),
                       verify.check_threads(got["new_threads"], "a call")]
            if all(r.passed for r in results):
                for i, (expected, actual) in enumerate(zip(ref["outputs"], got["outputs"])):
                    out_label = label if len(dtypes) == 1 else f"{label}, output {i}"
                    result = verify.compare_values(expected, actual, dtypes[i], problem.tolerance,
                                                   out_label)
                    stats[name].add(result.details)
                    results.append(result)
            checks[name].extend(results)
            if not all(r.passed for r in results):
                del alive[name]
    return info, checks, stats

