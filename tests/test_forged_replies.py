"""A reply forged at any step of a worker's life fails only its contender, by the "protocol"
check, and the evaluation goes on: the worker is the candidate's process, so every reply it
sends is the candidate's to forge (docs/architecture.md, "Trust boundaries").

One evaluation holds an honest candidate, the honest baseline and one forger per step
(tests/fixtures/candidates/cheat_forge_at_step.py, each with its own STEP), timed with two
workers each, so that a replica's first call (the warm-up) is made too."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.domain import CandidateSource, Origin
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits

FORGER = CANDIDATES / "cheat_forge_at_step.py"
# Each step, and where its forged reply lands: the op whose reply the parent refuses.
STEPS = {
    "load": "load",  # the candidate's import
    "construct": "construct",  # its build for a shape
    "run": "run",  # its trials
    "warm-up": "run",  # a replica's first call, before the timing
    "stage": "stage",  # a timed batch's inputs
    "time": "time",  # the timed calls
    "outputs": "outputs",  # the picked calls' outputs, revealed after the batch
}


def _forger(step: str) -> CandidateSource:
    source = FORGER.read_text()
    written = source.replace('STEP = "time"', f"STEP = {step!r}")
    assert written != source or step == "time", "the fixture's STEP line moved"
    return CandidateSource(name=f"forge_{step}", source=written, origin=Origin("file", str(FORGER)))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    problem = load_problem(PROBLEMS / "scale_add.py")
    options = EvalOptions(
        device="cpu",
        limits=Limits(memory_mb=4096, import_timeout_s=120, construct_timeout_s=60, call_timeout_s=20),
        timing=TimingOptions(time_cap_s=0.5, min_samples=5, replicas=2),
        cache_root=Path(tmp_path_factory.mktemp("cache")),
        use_cache=False,
    )
    honest = load_candidate(CANDIDATES / "honest.py")
    result = evaluate(problem, [honest, *map(_forger, STEPS)], load_candidate(CANDIDATES / "honest.py"), options)
    assert result.baseline is not None
    return {"baseline": result.baseline, **{o.candidate.name: o for o in result.candidates}}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_reply_forged_at_each_step_fails_only_its_contender(outcomes, step):
    verdict = outcomes[f"forge_{step}"].verdict
    assert not verdict.accepted, f"a reply forged at {step} was accepted"
    failed = [c for c in verdict.checks if not c.passed]
    assert [c.name for c in failed] == ["protocol"], verdict.reasons
    assert f"malformed reply to op {STEPS[step]!r}" in failed[0].evidence, failed[0].evidence
    # The warm-up's forger answers its trials honestly: what fails it is its replica's first call.
    assert ("a second worker of the same code" in failed[0].evidence) == (step == "warm-up"), failed[0].evidence


def test_the_honest_contenders_are_accepted_and_timed_beside_the_forgers(outcomes):
    for name in ("honest", "baseline"):
        outcome = outcomes[name]
        assert outcome.verdict.accepted, outcome.verdict.reasons
        assert all(s.measurement is not None for s in outcome.shapes)
        assert all(s.measurement.workers == 2 for s in outcome.shapes)  # timed with its replica too
