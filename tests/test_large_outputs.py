"""Problems sized by their memory, through real workers on CPU: outputs larger than one frame,
a worker's resident-memory limit scaled to the problem, and a contender that floods the channel
with more than the problem's outputs can need."""

from __future__ import annotations

from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation.evaluate import evaluate
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits


def test_large_outputs_pass_under_a_lowered_floor_that_a_constant_limit_would_kill(quick_options):
    # Workers' resident memory peaks above 512 MiB here (~360 MiB with torch and its compiler,
    # 128 MiB of inputs, 128 MiB of outputs, the reference's float64 copies): a constant limit
    # of 512 MiB killed the reference ("killed: resident memory 512 MiB exceeded the limit of
    # 512 MiB"). Now the reference gets the machine's memory less its margin, and a contender
    # twice the problem's footprint (3 x 256 MiB), 1.5 GiB; the floor stays 512 MiB.
    problem = load_problem(PROBLEMS / "large_output.py")
    options = quick_options(
        limits=Limits(memory_mb=512, import_timeout_s=120, construct_timeout_s=60, call_timeout_s=60),
        timing=TimingOptions(time_cap_s=0.2, min_samples=3, min_batches=2, max_batch=2),
    )
    result = evaluate(problem, [load_candidate(CANDIDATES / "honest_large_output.py")], None, options)
    (outcome,) = result.candidates
    assert outcome.verdict.accepted, outcome.verdict.reasons
    assert outcome.shapes[0].max_abs_err is not None and outcome.shapes[0].max_abs_err < 1e-5


def test_a_contender_flooding_the_channel_is_tampering_and_its_honest_twin_passes(quick_options):
    problem = load_problem(PROBLEMS / "scale_add.py")
    cands = [load_candidate(CANDIDATES / f"{n}.py") for n in ("cheat_flood_channel", "honest")]
    result = evaluate(problem, cands, None, quick_options())
    outcomes = {o.candidate.name: o for o in result.candidates}
    flood = outcomes["cheat_flood_channel"].verdict
    assert not flood.accepted
    failed = next(c for c in flood.checks if not c.passed)
    assert failed.name == "result channel" and "exceeds this channel's bound" in failed.evidence, flood.reasons
    assert outcomes["honest"].verdict.accepted, outcomes["honest"].verdict.reasons
