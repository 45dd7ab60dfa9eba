"""results.json has one typed form (bot.core.results), one writer and one reader."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from stage_two_artifacts import honest_results

from bot.core.domain import Trigger
from bot.core.measurement import Measurement
from bot.core.results import ProblemResult, Results
from bot.core.results_schema import RESULTS_SCHEMA_VERSION, InvalidResults
from bot.core.settings import OWN_ERROR_MULTIPLE

ROOT = Path(__file__).resolve().parent.parent
PR = Trigger(
    kind="pull_request",
    repo="o/r",
    action="labeled",
    pr_number=7,
    head_ref="feature",
    head_sha="a" * 40,
    head_repo="fork/r",
    label="optimize-kernel",
    labels=("optimize-kernel", "gpu"),
)


def test_a_written_document_reads_back_to_the_same_text():
    doc = honest_results(slower_attempts=2)
    assert json.dumps(Results.from_json(doc).to_json()) == json.dumps(doc)  # keys, order and numbers


def test_the_typed_document_carries_what_readers_use():
    results = Results.from_json(honest_results(speedup_factor=2.0))
    (problem,) = results.problems
    assert problem.problem == "rmsnorm" and problem.best is not None and problem.best.speedup > 1.5
    assert results.best_speedup == problem.best.speedup and results.improved == (problem,)
    assert problem.best.shapes[0].measurement.samples.n > 0
    assert problem.environment is not None and problem.environment.device_name == "NVIDIA H100 80GB HBM3"


def test_a_failed_problem_keeps_its_error_and_writes_no_environment():
    failed = ProblemResult("p", "failed", error="could not load p.py", environment=None)
    doc = Results((failed,), PR, 1.05).to_json()
    assert doc["problems"][0]["error"] == "could not load p.py" and doc["problems"][0]["environment"] == {}
    back = Results.from_json(doc)
    assert back.failed == back.problems and back.problems[0].environment is None
    assert back.to_json() == doc


def test_trigger_has_one_serialised_form():
    assert PR.to_json()["labels"] == ["optimize-kernel", "gpu"]
    assert Trigger.from_json(PR.to_json()) == PR
    assert Trigger.from_json({}) == Trigger(kind="schedule")
    assert Trigger.from_json({"kind": "cli", "unknown": 1}) == Trigger(kind="cli")


def test_a_document_that_fails_the_schema_is_refused_naming_the_field():
    doc = honest_results()
    doc["problems"][0]["attempts"][0]["speedup"] = "fast"
    with pytest.raises(InvalidResults, match=r"results\.problems\[0\]\.attempts\[0\]\.speedup"):
        Results.from_json(doc)
    extra = copy.deepcopy(honest_results())
    extra["problems"][0]["injected"] = True
    with pytest.raises(InvalidResults, match="injected"):
        Results.from_json(extra)


def test_samples_whose_batches_do_not_add_up_are_refused_like_a_schema_error():
    doc = honest_results()
    doc["problems"][0]["attempts"][0]["shapes"][0]["measurement"]["batch_sizes"][0] += 1
    with pytest.raises(InvalidResults, match=r"results\.problems\[0\]: batch sizes"):
        Results.from_json(doc)
    baseline = copy.deepcopy(honest_results())["problems"][0]["attempts"][0]["shapes"][0]["derivation"]["baseline"]
    baseline["batch_workers"].pop()
    with pytest.raises(ValueError, match="batch workers"):
        Measurement.from_samples_json(baseline)


def test_samples_read_back_as_the_engines_measurement():
    shape = honest_results()["problems"][0]["attempts"][0]["shapes"][0]
    written = shape["measurement"]
    measured = Results.from_json(honest_results()).problems[0].attempts[0].shapes[0].measurement
    assert measured is not None and measured.samples.samples_json() == {
        k: written[k] for k in ("samples_us", "batch_sizes", "batch_workers")
    }
    assert measured.samples.median_us == written["median_us"]
    # A document read without its schema: missing lists read as none, one sample a batch, one worker.
    assert Measurement.from_samples_json({"samples_us": [2.0, 1.0, 3.0]}) == Measurement((2.0, 1.0, 3.0))
    assert Measurement.from_samples_json({}) == Measurement(())
    assert Measurement.from_samples_json({"samples_us": [1.0], "batch_sizes": [], "batch_workers": []}).workers == 1


def test_only_the_current_schema_version_is_read():
    doc = honest_results()
    doc["schema_version"] = RESULTS_SCHEMA_VERSION - 1
    with pytest.raises(InvalidResults, match=f"expected {RESULTS_SCHEMA_VERSION}"):
        Results.from_json(doc)


def _modules() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "bot").rglob("*.py"))}


def test_results_json_is_named_in_one_place_written_in_one_and_read_in_one():
    modules = _modules()
    named = [m for m, text in modules.items() if re.search(r"""["']results\.json["']""", text)]
    assert named == ["bot/core/results.py"]
    using = sorted(m for m, text in modules.items() if re.search(r"\bRESULTS_FILE\b", text))
    assert using == ["bot/core/results.py", "bot/engine/loop/outputs.py", "bot/github/untrusted.py"]
    assert not re.search(r"write|open\(", modules["bot/github/untrusted.py"].split("RESULTS_FILE")[-1])
    # The document is turned into text (Results.dumps) only by the writer.
    dumping = sorted(m for m, text in modules.items() if re.search(r"\.dumps\(\)", text))
    assert dumping == ["bot/engine/loop/outputs.py"]


def test_every_field_the_schema_allows_has_a_place_in_the_typed_document():
    from bot.core import results_schema as schema

    doc = honest_results()
    problem = doc["problems"][0]
    problem["reference_precision"] = "float32"
    assert set(problem) | {"error", "reference_precision"} >= set(schema.PROBLEM["properties"])
    assert set(problem["attempts"][0]) == set(schema.ATTEMPT["properties"])
    assert set(problem["best"]) == set(schema.BEST["properties"])
    # flops: left out where the problem counts none (rmsnorm's floor is its bytes alone)
    assert set(problem["attempts"][0]["shapes"][0]) | {"flops"} == set(schema.SHAPE["properties"])
    assert set(problem["environment"]) == set(schema.ENVIRONMENT["properties"])
    assert set(problem["attempts"][0]["shapes"][0]["measurement"]) == set(schema.MEASUREMENT["properties"])
    assert set(problem["attempts"][0]["origin"]) == set(schema.ORIGIN["properties"])
    assert set(problem["attempts"][0]["checks"][0]) == set(schema.CHECK["properties"])
    assert set(doc["trigger"]) == set(schema.TRIGGER["properties"])
    assert set(doc) | {"shards"} == set(schema.RESULTS["properties"]) - {"$schema"}
    assert Results.from_json(doc).to_json() == doc


def test_a_measurement_of_one_batch_writes_valid_json():
    """One batch gives no spread between batches: its relative error is unknown (None), never
    an Infinity that JSON and the schema refuse."""
    import json

    from bot.core.measurement import Measurement
    from bot.core.results_shapes import MeasurementResult

    m = Measurement((10.0, 11.0, 12.0), (3,))
    assert m.rel_se == float("inf")
    out = MeasurementResult.of(m)
    assert out.rel_se is None
    json.dumps(out.to_json(), allow_nan=False)


def test_the_tolerance_policy_that_judged_is_written_read_back_and_reported():
    from bot.report.markdown import verification

    doc = honest_results()
    assert doc["problems"][0]["tolerance"] == "strict"  # the default policy, said
    assert f"widened by {OWN_ERROR_MULTIPLE:g} times the problem's own error" in verification(Results.from_json(doc))
    doc["problems"][0]["tolerance"] = "kernelbench"
    results = Results.from_json(doc)
    assert results.problems[0].tolerance == "kernelbench" and results.to_json() == doc
    assert "KernelBench's rule (`torch.allclose`" in verification(results)
    assert "the problem's own dtype on the same device" in verification(results)
    doc["problems"][0]["tolerance"] = "lenient"
    with pytest.raises(InvalidResults, match=r"results\.problems\[0\]\.tolerance"):
        Results.from_json(doc)
