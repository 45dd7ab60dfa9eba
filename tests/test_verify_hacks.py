"""The reward-hack regression suite: every cheat that can occur on CPU must be rejected,
with the check that catches it named, and honest variants must pass.

All soft cheats run in one evaluation (one reference worker, one worker each), which is
also the situation in the product: many candidates of one problem side by side.
"""

from __future__ import annotations

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem

# cheat file -> the check that must reject it
REJECTED = {
    "cheat_cache_by_shape": "values",
    "cheat_stale_after_warmup": "timed-call outputs",
    "cheat_mutate_input": "inputs unchanged",
    "cheat_empty": "values",
    "cheat_background_thread": "no new threads",
    "cheat_subclass": "output structure",
    "cheat_patch_checks": "values",
    "cheat_forge_stdout": "call",
    "cheat_forge_fds": "result channel",
    "cheat_sys_exit": "call",
    "cheat_predict_rng": "values",
    "cheat_low_precision": "values",
    "cheat_half_precision": "values",
    "cheat_distribution": "values",
    "cheat_zero_shortcut": "values",
    "cheat_hardcoded_shape": "call",
    "cheat_detect_timing": "timed-call outputs",
    "cheat_patch_reference": "values",
    "cheat_gc_scan": "values",
    "cheat_hide_thread": "no new threads",
    "cheat_some_calls": "timed-call outputs",  # right on 1 timed call in 4: missed w.p. (1/4)^checks
    "cheat_compute_on_reveal": "timed-call outputs",
    "reused_output": "timed-call aliasing",  # one output tensor for every call, as CUDA graph trees
    # Timed calls read from outside the worker (bot/engine/timing/outside_checks.py):
    "cheat_output_ring": "timed-call aliasing",  # 64 output buffers, more than a batch's 50 calls
    "cheat_shared_output_sleep": "timed-call aliasing",  # one buffer behind one-call batches
    "cheat_clobber_input_timed": "timed-call inputs",  # computes in its input while timed
    "cheat_forge_reply": "protocol",  # a timed batch answered without its commitments
    "cheat_forge_failure": "protocol",  # a failure whose fields are not what a failure holds
    "syntax_error": "import",
    "import_error": "import",
    "no_modelnew": "import",
}
# Accepted, and timed as what they are: times on the CPU are the parent's own.
ACCEPTED = ["honest", "fallback_reference", "cheat_patch_timers", "cheat_patch_harness", "cheat_env_secrets"]


@pytest.fixture(scope="module")
def outcomes(request):
    import os

    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions
    from bot.sandbox import Limits

    # Credentials in the bot's environment must never reach a worker.
    os.environ["GITHUB_TOKEN"] = "ghp_secret_for_tests"
    os.environ["OPENAI_API_KEY"] = "sk-secret-for-tests"
    try:
        problem = load_problem(PROBLEMS / "scale_add.py")
        cands = [load_candidate(CANDIDATES / f"{n}.py") for n in [*REJECTED, *ACCEPTED]]
        options = EvalOptions(
            device="cpu",
            use_cache=False,
            limits=Limits(memory_mb=4096, call_timeout_s=20),
            timing=TimingOptions(time_cap_s=1.0, min_samples=5),
            cache_root=__import__("pathlib").Path("/tmp/kernel-bot-test-cache"),
        )
        result = evaluate(problem, cands, None, options)
    finally:
        del os.environ["GITHUB_TOKEN"], os.environ["OPENAI_API_KEY"]
    return {o.candidate.name: o for o in result.candidates}


@pytest.mark.parametrize("name,check", sorted(REJECTED.items()))
def test_cheat_is_rejected_by_the_named_check(outcomes, name, check):
    verdict = outcomes[name].verdict
    assert not verdict.accepted, f"{name} was accepted"
    failed = [c.name for c in verdict.checks if not c.passed]
    assert check in failed, f"{name}: expected '{check}' to fail, failed: {verdict.reasons}"
    assert all(reason.strip() for reason in verdict.reasons)


@pytest.mark.parametrize("name", ACCEPTED)
def test_honest_variants_are_accepted(outcomes, name):
    verdict = outcomes[name].verdict
    assert verdict.accepted, f"{name} rejected: {verdict.reasons}"
    assert all(s.measurement is not None for s in outcomes[name].shapes)


def test_patched_clocks_do_not_change_the_measurement(outcomes):
    # The candidate spins 20 ms per call and scales every clock it can reach by 1/1000.
    for shape in outcomes["cheat_patch_timers"].shapes:
        assert shape.measurement.median_us > 18_000, shape.measurement.median_us


# A figure of the parent's clock on the CPU: on CI's two shared cores, beside two other test
# processes, the hidden 1 ms read 0.52 ms once; it runs with the timing tests, alone.
@pytest.mark.timing
def test_time_hidden_from_the_harness_clock_is_named_with_the_parents_figure_and_timed(outcomes):
    # The candidate spins 2 ms a call and halves the worker's own captured clock: the parent
    # sees about 1 ms a call that the worker's report leaves out, and times all 2 ms of it.
    cheat = outcomes["cheat_patch_harness"]
    check = next(c for c in cheat.verdict.checks if c.name == "hidden time")
    # Evidence only on the CPU: named in the check's figures (and in its text past the bound,
    # which the batches' scatter on a busy host can widen beyond what was hidden).
    assert check.passed and check.details["hidden_us_per_call"] > 700, check.details
    for shape in cheat.shapes:
        assert shape.measurement.median_us > 1_800, shape.measurement.median_us
    honest = next(c for c in outcomes["honest"].verdict.checks if c.name == "hidden time")
    assert honest.details["hidden_us_per_call"] < check.details["hidden_us_per_call"] / 2, honest.details


def test_a_thread_hidden_from_the_harness_listing_is_counted_from_outside(outcomes):
    check = next(c for c in outcomes["cheat_hide_thread"].verdict.checks if c.name == "no new threads" and not c.passed)
    assert "1 thread(s) more than at start" in check.evidence and "kernel's count" in check.evidence


def test_rejections_carry_evidence(outcomes):
    values = next(c for c in outcomes["cheat_low_precision"].verdict.checks if c.name == "values")
    assert "normwise rel err" in values.evidence or "abs err" in values.evidence
    mutated = next(c for c in outcomes["cheat_mutate_input"].verdict.checks if c.name == "inputs unchanged")
    assert "input(s) [0] were modified" in mutated.evidence
    shortcut = next(c for c in outcomes["cheat_zero_shortcut"].verdict.checks if c.name == "values")
    assert "zeros inputs" in shortcut.evidence  # the all-zero trial: relu(b) expected, zeros given
    forged = next(c for c in outcomes["cheat_forge_stdout"].verdict.checks if c.name == "call")
    assert "exited with code 0 without a result" in forged.evidence


def test_an_output_overwritten_by_the_next_call_is_said_to_be_valid_only_until_then(outcomes):
    checks = outcomes["reused_output"].verdict.checks
    check = next(c for c in checks if c.name == "timed-call aliasing" and not c.passed)
    assert "the output is valid only until the next call" in check.evidence
    assert "CUDA graph trees reuse output memory" in check.evidence
    computed_late = next(
        c for c in outcomes["cheat_compute_on_reveal"].verdict.checks if c.name == "timed-call outputs" and not c.passed
    )
    assert "valid only until the next call" not in computed_late.evidence


def test_timed_call_rejections_say_what_was_read_from_outside(outcomes):
    for name in ("cheat_output_ring", "cheat_shared_output_sleep"):
        check = next(c for c in outcomes[name].verdict.checks if c.name == "timed-call aliasing")
        assert "which the caller still holds" in check.evidence, check.evidence
    clobbered = next(c for c in outcomes["cheat_clobber_input_timed"].verdict.checks if c.name == "timed-call inputs")
    assert "was modified (read back from outside" in clobbered.evidence
