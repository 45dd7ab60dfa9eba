"""Every timed call's outputs checked from outside the candidate's process (CPU), not only the
calls the parent picks: with no call picked at all, a candidate wrong on most timed calls is
rejected by the projections on the parent's secret vectors. (The output ring, the shared
output buffer and the input clobbered while timed are in tests/test_verify_hacks.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits, memory

pytestmark = pytest.mark.skipif(not memory.supported(), reason="needs process_vm_readv (Linux)")


def test_every_timed_call_is_checked_with_no_call_picked():
    """cheat_some_calls is right on one timed call in four: seen with no call compared in full."""
    problem = load_problem(PROBLEMS / "scale_add.py")
    cands = [load_candidate(CANDIDATES / f"{n}.py") for n in ("cheat_some_calls", "honest")]
    options = EvalOptions(
        device="cpu",
        limits=Limits(memory_mb=4096, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=0.5, min_samples=5, checks_per_batch=0),
        cache_root=Path("/tmp/kernel-bot-test-cache"),
        use_cache=False,
    )
    verdicts = {o.candidate.name: o.verdict for o in evaluate(problem, cands, None, options).candidates}
    # The honest twin passes every timed-call check (its whole verdict can hang on `hidden time`
    # on a loaded host, which these checks do not touch).
    honest = [c for c in verdicts["honest"].checks if c.name.startswith("timed-call")]
    assert honest and all(c.passed for c in honest), verdicts["honest"].reasons
    failed = [c for c in verdicts["cheat_some_calls"].checks if not c.passed]
    assert [c.name for c in failed] == ["timed-call outputs"], verdicts["cheat_some_calls"].reasons
    assert "projection" in failed[0].evidence
