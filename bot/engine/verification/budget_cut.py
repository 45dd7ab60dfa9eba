"""The problem's budget at a candidate's first call: compilation and autotuning happen there
(torch.compile's max-autotune took 98 s of one KernelBench problem's 143 s on the H100, past a
60 s budget), so the call is given what is left of the budget, at least FLOOR_S, and a call
still running then is stopped: its candidate is not evaluated, as one the budget never reached
is not. The baseline, the problem's own code, is never cut: every speedup is against it."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.domain import CheckResult
from bot.engine.workers.client import WorkerFailure

BUDGET_CUT = "budget"  # the check a cut first call fails; its contender goes to `not_evaluated`
# What a first call may take however late it starts: a default torch.compile of a KernelBench
# problem took 2 to 22 s on the H100, so a candidate the budget reaches late is still tried.
FLOOR_S = 30.0


@dataclass(frozen=True)
class FirstCallBudget:
    """When the problem's budget ends, and whose first call it may stop."""

    ends: float | None = None  # time.monotonic() when the problem's budget ends; None: no budget
    spared: frozenset[str] = frozenset()  # contenders whose first call is never cut

    def timeout(self, name: str, limit_s: float, now: float) -> float:
        """The first call's timeout: `limit_s` (the workers' own limit), or less, what is left
        of the budget (at least FLOOR_S), for a contender that may be cut."""
        if self.ends is None or name in self.spared:
            return limit_s
        return min(limit_s, max(self.ends - now, FLOOR_S))

    def cut(self, exc: WorkerFailure, timeout_s: float, limit_s: float) -> CheckResult | None:
        """A first call that timed out at the budget's timeout, not at the workers' own limit,
        as a failed BUDGET_CUT check; None for any other failure."""
        if timeout_s >= limit_s or not exc.reason.startswith("timed out"):
            return None
        return CheckResult(
            BUDGET_CUT,
            False,
            f"its first call (compiling, autotuning) ran past the problem's budget: stopped after "
            f"{timeout_s:.0f} s, not evaluated",
        )
