"""Stage 2 treats stage 1's results directory as untrusted data: the schema refuses every
malformed field before anything reads it (and before any request to GitHub)."""

from __future__ import annotations

import json
import math

import pytest
from stage_two_artifacts import honest_results

from bot.core.distributions import DISTRIBUTIONS
from bot.core.errors import BotError
from bot.core.results_schema import MAX_DEPTH
from bot.github.untrusted import MAX_RESULTS_BYTES, load_results, validate_results

ALLOWED = lambda path: path.startswith("kernels/")  # noqa: E731


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"x": [value]}
    return value


def test_an_honest_artifact_passes():
    assert validate_results(honest_results(), ALLOWED)["problems"][0]["problem"] == "rmsnorm"


P0 = "results.problems[0]"


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda r: r.update(schema_version=1), "results.schema_version: expected 2, got '1'"),
        (lambda r: r["problems"][0].update(wall_s="x"), f"{P0}.wall_s: type: 'x' is not of type 'number'"),
        (lambda r: r["problems"][0].update(skipped="x"), f"{P0}.skipped: type: 'x' is not of type 'array'"),
        (lambda r: r["problems"][0].update(min_speedup="x"), f"{P0}.min_speedup: type: 'x' is not of type 'number'"),
        (
            lambda r: r["problems"][0].update(distributions=[1]),
            f"{P0}.distributions[0]: enum: 1 is not one of {list(DISTRIBUTIONS)}",
        ),
        (
            lambda r: r["problems"][0]["attempts"][0].update(speedup_ci="x"),
            f"{P0}.attempts[0].speedup_ci: anyOf: 'x' is not valid under any of the given schemas",
        ),
        (
            lambda r: r["problems"][0]["attempts"][0].update(median_us="x"),
            f"{P0}.attempts[0].median_us: anyOf: 'x' is not valid under any of the given schemas",
        ),
        (
            lambda r: r["problems"][0]["attempts"][0].update(round="1<script>"),
            f"{P0}.attempts[0].round: type: '1<script>' is not of type 'integer'",
        ),
        (
            lambda r: r["problems"][0].update(reference_precision="float64 <img src=x>"),
            f"{P0}.reference_precision: enum: 'float64 <img src=x>' is not one of ['float64', 'float32', 'native']",
        ),
        (
            lambda r: r["problems"][0].update(target="kernels/a.py\nkernels/b.py"),
            f"{P0}.target: pattern: 'kernels/a.py\\nkernels/b.py' has characters or a length this field does not allow",
        ),
        (
            lambda r: r["problems"][0].update(target="kernels/a.py\n"),
            f"{P0}.target: pattern: 'kernels/a.py\\n' has characters or a length this field does not allow",
        ),
        (
            lambda r: r["problems"][0].update(target="../../.github/workflows/x.yml"),
            f"{P0}.target: '../../.github/workflows/x.yml' is not a plain repository-relative path",
        ),
        (
            lambda r: r["problems"][0].update(target=".github/workflows/ci.py"),
            f"{P0}.target: '.github/workflows/ci.py' is outside the configured kernel paths",
        ),
        (
            lambda r: r["problems"][0].update(problem="../x"),
            f"{P0}.problem: pattern: '../x' has characters or a length this field does not allow",
        ),
        (
            lambda r: r["problems"][0]["environment"].update(host="runner-7.internal"),
            f"{P0}.environment: additionalProperties: Additional properties are not allowed ('host' was unexpected)",
        ),
        (
            lambda r: r.update(surprise=1),
            "results: additionalProperties: Additional properties are not allowed ('surprise' was unexpected)",
        ),
        (lambda r: r["problems"][0].update(llm=_nested(MAX_DEPTH)), f"results: nested deeper than {MAX_DEPTH} levels"),
        (
            lambda r: r["problems"][0]["best"].update(source="x" * (600 << 10)),
            f"{P0}.best.source: maxLength: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        ),
        (lambda r: r.update(problems="all"), "results.problems: type: 'all' is not of type 'array'"),
        (
            lambda r: r["problems"][0]["time_split"].update(other_s=-1),
            f"{P0}.time_split.other_s: minimum: -1 is less than the minimum of 0",
        ),
        (
            lambda r: r["problems"][0]["time_split"].update(llm_s=3),
            f"{P0}.time_split: additionalProperties: Additional properties are not allowed ('llm_s' was unexpected)",
        ),
        (
            lambda r: r["problems"][0]["time_split"].pop("timing_s"),
            f"{P0}.time_split: required: 'timing_s' is a required property",
        ),
    ],
)
def test_malformed_fields_are_refused_with_the_field_named(mutate, message):
    data = honest_results()
    mutate(data)
    with pytest.raises(BotError) as err:
        validate_results(data, ALLOWED)
    assert str(err.value).startswith(f"untrusted results rejected: {message}")
    assert len(str(err.value)) < 500  # a 600 KiB forged value is not echoed back


def test_size_cap_symlink_nan_deep_json_and_bad_json(tmp_path):
    cases = {
        "a": b" " * (MAX_RESULTS_BYTES + 1),
        "c": b"{not json",
        "d": json.dumps(honest_results()).replace('"wall_s": 12.5', '"wall_s": NaN').encode(),
        "e": b"[" * 100_000 + b"]" * 100_000,
        "f": json.dumps(honest_results()).encode(),
    }
    for name, raw in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_bytes(raw)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").symlink_to("/etc/hostname")
    expected = {
        "a": f"exceeds the {MAX_RESULTS_BYTES >> 20} MiB cap",
        "b": "not a regular file",
        "c": "not valid JSON",
        "d": "not valid JSON (NaN is not a JSON number)",
        "e": f"untrusted results rejected: results: nested deeper than {MAX_DEPTH} levels",
    }
    for name, text in expected.items():
        with pytest.raises(BotError) as err:
            load_results(tmp_path / name, ALLOWED)
        assert text in str(err.value), name
    assert load_results(tmp_path / "f", ALLOWED).schema_version == 2


def _close(a, b) -> bool:
    """Equal, numbers to 1e-12 (numpy's exp may round the last bit otherwise than math's)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return a == b


def test_many_speedups_are_re_derived_to_the_numbers_stage_one_wrote():
    from bot.core.results import Results
    from bot.github.rederive import rederive

    results = honest_results(slower_attempts=11)
    derived = rederive(Results.from_json(results), 1.05).to_json()
    claimed = [a["speedup_ci"] for a in results["problems"][0]["attempts"]]
    assert _close([a["speedup_ci"] for a in derived["problems"][0]["attempts"]], claimed)
    assert derived["problems"][0]["best"]["name"] == "fast-rmsnorm"
    assert _close(derived, {**results, "min_speedup": 1.05})  # an honest artifact's numbers are its own


S0 = "problems[0].attempts[0].shapes[0].measurement"


@pytest.mark.parametrize(
    "field,values",
    [
        ("samples_us", [1.5, 0, 2]),
        ("samples_us", [1.5, -3.0]),
        ("samples_us", [2, True]),
        ("samples_us", [2, "3"]),
        ("samples_us", [2, 1e301]),
        ("samples_us", [2, None]),
        ("batch_sizes", [1, 0]),
        ("batch_sizes", [1, 1.5]),
        ("batch_sizes", [1, True]),
        ("batch_sizes", [1, 20_001]),
        ("batch_workers", [0, -1]),
        ("batch_workers", [0, 1025]),
    ],
)
def test_the_one_pass_check_of_long_arrays_refuses_what_the_schema_refuses(field, values):
    """Samples, batch sizes and workers are checked in one pass; an array it does not accept is
    validated item by item, so the item and the reason are those jsonschema alone names."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    from bot.core.results_schema import RESULTS, validate

    data = honest_results()
    measurement = data["problems"][0]["attempts"][0]["shapes"][0]["measurement"]
    sizes = measurement["batch_sizes"]
    measurement[field] = values + (measurement[field][len(values) :] if field != "samples_us" else [])
    if field == "samples_us":
        measurement.update(batch_sizes=[len(values)], batch_workers=[0])
    plain = best_match(Draft202012Validator(RESULTS).iter_errors(data))
    assert plain is not None and list(plain.absolute_path)[-2:] == [field, 1], (sizes, plain)
    with pytest.raises(BotError) as err:
        validate(data)
    assert str(err.value).startswith(f"untrusted results rejected: results.{S0}.{field}[1]: {plain.validator}: ")


def test_an_artifact_of_more_values_than_the_cap_is_refused_before_the_schema():
    from bot.core.results_schema import MAX_VALUES

    data = honest_results()
    data["problems"][0]["llm"] = {f"k{i}": [0] * 60 for i in range(MAX_VALUES // 60 + 1)}  # also over maxProperties
    with pytest.raises(BotError) as err:
        validate_results(data, ALLOWED)
    assert str(err.value) == (
        "untrusted results rejected: results: more than 500,000 values (fewer samples, shapes or candidates)"
    )
