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
