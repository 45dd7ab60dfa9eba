"""The timed calls the parent picks, where their outputs are too large to reveal (a CUDA shape
over HarnessCost.FULL_CHECK_BYTES), compared in full where they lie: the reference computes the
call's outputs, lends blocks bound to them, the contender writes the picked call's outputs
there, and the reference judges them (bot.engine.timing.lent_picks). Run here on CPU blocks
(sealed memfds) with the CUDA path's settings forced: commitments by fingerprint, inputs staged
in each worker, no call revealed over the channel."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.progress import Note
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing import harness_cost
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import Limits


@pytest.fixture
def as_on_cuda(monkeypatch):
    """Every HarnessCost made as on CUDA for a shape too large to reveal."""
    made = harness_cost.HarnessCost.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.reveals_in_full, self.commits_by_digest = False, False
        if self.fills_from_outside:
            self.stop_filling("inputs staged in each worker: as on CUDA")

    monkeypatch.setattr(harness_cost.HarnessCost, "__init__", init)


def _evaluate(names: list[str], checks_per_batch: int = 1, notes: list[str] | None = None, device: str = "cpu"):
    problem = load_problem(PROBLEMS / "scale_add.py")
    options = EvalOptions(
        device=device,
        limits=Limits(memory_mb=4096 if device == "cpu" else 32768, call_timeout_s=20 if device == "cpu" else 60),
        timing=TimingOptions(time_cap_s=0.5, min_samples=5, checks_per_batch=checks_per_batch),
        cache_root=Path("/tmp/kernel-bot-test-cache"),
        use_cache=False,
    )
    cands = [load_candidate(CANDIDATES / f"{n}.py") for n in names]
    return evaluate(
        problem,
        cands,
        None,
        options,
        lambda e: notes.append(e.text) if isinstance(e, Note) and notes is not None else None,
    )


def _timed(verdict) -> list:
    return [c for c in verdict.checks if c.name == "timed-call outputs"]


def test_picked_calls_too_large_to_reveal_are_judged_in_full_in_the_reference(as_on_cuda):
    """cheat_nudge_timed's timed calls, off by a tenth of the normwise bound (they pass by
    fingerprint alone: the next test), fail in full, elementwise, and are not mistaken for an
    output changed after its call; honest code passes; cheat_some_calls (right on one timed
    call in four) fails."""
    result = _evaluate(["honest", "cheat_nudge_timed", "cheat_some_calls"], checks_per_batch=2)
    verdicts = {o.candidate.name: o.verdict for o in result.candidates}
    honest = _timed(verdicts["honest"])
    assert honest and all(c.passed for c in honest), verdicts["honest"].reasons
    failed = [c for c in _timed(verdicts["cheat_nudge_timed"]) if not c.passed]
    assert failed and all("element" in c.evidence and "valid only until" not in c.evidence for c in failed), failed
    some = [c for c in _timed(verdicts["cheat_some_calls"]) if not c.passed]
    assert some, verdicts["cheat_some_calls"].reasons


def test_without_lending_the_nudge_passes_the_fingerprint_alone(as_on_cuda, monkeypatch):
    """The cheat above where the reference cannot lend (as without CUDA VMM): only fingerprints
    check the picks, and the run says so in a note (the nudge then passes: the bound
    docs/verifier.md states)."""
    from bot.engine.timing import lent_picks
    from bot.engine.workers.client import WorkerFailure

    def refuse(reference, timeout_s, alone=False):
        raise WorkerFailure("problem", "no blocks to lend here")

    monkeypatch.setattr(lent_picks, "lend", refuse)
    notes: list[str] = []
    result = _evaluate(["cheat_nudge_timed"], notes=notes)
    verdict = result.candidates[0].verdict
    timed = _timed(verdict)
    assert timed and all(c.passed and c.details.get("commitment") == "fingerprint" for c in timed), verdict.reasons
    assert any("checked by fingerprint alone: no blocks to lend here" in n for n in notes), notes
