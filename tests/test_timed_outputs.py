"""Every timed call's outputs and inputs checked from outside the candidate's process (CPU):
output rings longer than a batch, shared output buffers behind one-call batches, and inputs
clobbered only while timed are rejected; honest candidates are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.candidates import load_candidate
from bot.engine.evaluate import evaluate
from bot.engine.problems import load_problem
from bot.sandbox import memory

pytestmark = pytest.mark.skipif(not memory.supported(), reason="needs process_vm_readv (Linux)")

# cheat file -> the check that must reject it
REJECTED = {
    "cheat_output_ring": "timed-call aliasing",
    "cheat_shared_output_sleep": "timed-call aliasing",
    "cheat_clobber_input_timed": "timed-call inputs",
}
ACCEPTED = ["honest", "fallback_reference"]


@pytest.fixture(scope="module")
def outcomes():
    from bot.engine.evaluate import EvalOptions
    from bot.engine.timing import TimingOptions
    from bot.sandbox import Limits

    problem = load_problem(PROBLEMS / "scale_add.py")
    cands = [load_candidate(CANDIDATES / f"{n}.py") for n in [*REJECTED, *ACCEPTED]]
    options = EvalOptions(
        device="cpu",
        limits=Limits(memory_mb=4096, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=1.0, min_samples=5),
        cache_root=Path("/tmp/kernel-bot-test-cache"),
        use_cache=False,
    )
    result = evaluate(problem, cands, None, options)
    return {o.candidate.name: o for o in result.candidates}


@pytest.mark.parametrize("name,check", sorted(REJECTED.items()))
def test_cheat_is_rejected_by_the_named_check(outcomes, name, check):
    verdict = outcomes[name].verdict
    assert not verdict.accepted, f"{name} was accepted"
    failed = [c.name for c in verdict.checks if not c.passed]
    assert check in failed, f"{name}: expected '{check}' to fail, failed: {verdict.reasons}"


@pytest.mark.parametrize("name", ACCEPTED)
def test_honest_variants_are_accepted(outcomes, name):
    verdict = outcomes[name].verdict
    assert verdict.accepted, f"{name} rejected: {verdict.reasons}"
    assert all(s.measurement is not None for s in outcomes[name].shapes)


def test_the_evidence_names_where_the_memory_was_held(outcomes):
    for name in ("cheat_output_ring", "cheat_shared_output_sleep"):
        check = next(c for c in outcomes[name].verdict.checks if c.name == "timed-call aliasing")
        assert "which the caller still holds" in check.evidence, check.evidence
    clobbered = next(c for c in outcomes["cheat_clobber_input_timed"].verdict.checks if c.name == "timed-call inputs")
    assert "was modified (read back from outside" in clobbered.evidence


def test_every_timed_call_is_checked_with_no_call_picked():
    """With no call picked for a full comparison, a candidate wrong on 3 timed calls in 4 is
    still rejected: each output is projected on the parent's secret vector."""
    from bot.engine.evaluate import EvalOptions
    from bot.engine.timing import TimingOptions
    from bot.sandbox import Limits

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
    assert verdicts["honest"].accepted, verdicts["honest"].reasons
    failed = [c for c in verdicts["cheat_some_calls"].checks if not c.passed]
    assert [c.name for c in failed] == ["timed-call outputs"], verdicts["cheat_some_calls"].reasons
    assert "projection" in failed[0].evidence
