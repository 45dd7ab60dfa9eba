"""`bot bench`'s human table: the note on launch-bound GPU shapes timed in few processes."""

from __future__ import annotations

from conftest import ROOT

from bot.core.domain import CandidateSource, Environment, Origin, Verdict
from bot.core.measurement import STEADY_REPLICAS, Measurement
from bot.core.outcomes import ContenderOutcome, Evaluation, ShapeOutcome
from bot.engine.workspace.problems import load_problem
from bot.report.tables import render_table


def _measured(median_us: float, workers: int) -> Measurement:
    # one batch of three calls per worker process, the middle one at the median
    samples = tuple(x for _ in range(workers) for x in (median_us * 0.99, median_us, median_us * 1.01))
    return Measurement(samples, (3,) * workers, tuple(range(workers)))


def _evaluation(device: str, medians: dict[str, float], workers: int) -> Evaluation:
    problem = load_problem(ROOT / "problems" / "gelu.py", root=ROOT)
    shapes = tuple(
        ShapeOutcome(name, "bfloat16[32, 14336]", "bfloat16", _measured(us, workers), None, None, None, None)
        for name, us in medians.items()
    )
    baseline = ContenderOutcome(
        CandidateSource("reference", problem.source, Origin("reference")), "baseline", Verdict("accepted", ()), shapes
    )
    env = Environment(device, "NVIDIA H200", "2.11", "3.6", None, None, "3.12")
    return Evaluation(problem, env, baseline, ())


def test_a_gpu_shape_under_10_us_in_few_processes_gets_a_note_naming_the_replicas_that_steady_it():
    table = render_table(_evaluation("cuda", {"decode": 4.9, "prefill": 135.0}, workers=2))
    notes = [line for line in table.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: decode takes 4.9 us; at 2 worker")
    assert f"--replicas {STEADY_REPLICAS}" in notes[0]


def test_no_note_with_enough_processes_on_the_cpu_or_for_longer_shapes():
    assert "note:" not in render_table(_evaluation("cuda", {"decode": 4.9}, workers=STEADY_REPLICAS))
    assert "note:" not in render_table(_evaluation("cpu", {"decode": 4.9}, workers=2))
    assert "note:" not in render_table(_evaluation("cuda", {"decode": 38.0}, workers=2))
