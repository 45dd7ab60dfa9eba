"""The JSON Schema of results.json: every field typed and bounded, unknown fields rejected.

Stage 1 writes results.json on a runner that ran untrusted kernels; stage 2 reads it back
with a write token. This module is the contract between them and imports nothing heavy
(no torch, no numpy), so the publishing job installs only what it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.core.distributions import DISTRIBUTIONS
from bot.core.errors import BotError
from bot.core.settings import TolerancePolicy, choices
from bot.core.time_split import FIELDS as TIME_SPLIT_FIELDS
from bot.core.time_split import REQUIRED as TIME_SPLIT_REQUIRED

RESULTS_SCHEMA_VERSION = 2

MAX_SOURCE_CHARS = 512 << 10  # a kernel file; the largest in kernels/ is under 20 KiB
MAX_TEXT = 4_000  # one reason, error or note; verifier reasons are under 500 characters
MAX_PROBLEMS = 500
MAX_ATTEMPTS = 2_000
MAX_SHAPES = 64
# Per measurement; a converged one has tens to thousands of samples in tens to hundreds of
# batches. Stage 2 re-derives every interval from them: these bound one speedup's bootstrap
# (bot.github.rederive_cost), the document's total is checked before any of it runs.
MAX_SAMPLES = 20_000
MAX_BATCHES = 2_000
MAX_DEPTH = 12  # results -> problems -> attempt -> checks -> details -> value is 9 deep
# Every value (number, string, list, map) of one document. Reading and re-deriving cost per value
# whatever its width (a sample `1` is two bytes of JSON), so the byte cap alone admits two million
# samples; a nightly sweep of every bundled problem has about 140,000 values.
MAX_VALUES = 500_000
# `$(?![\s\S])`: Python's `$` (which jsonschema uses) also matches before a final newline.
END = r"$(?![\s\S])"
NAME = r"^[^\x00-\x1f\x7f]{1,300}" + END  # candidate, shape and check names: one line (escaped when shown)
PROBLEM_NAME = r"^[A-Za-z0-9_.-]{1,100}" + END
REPO_PATH = r"^[A-Za-z0-9._/-]{1,300}" + END
SHA = r"^[0-9a-f]{40}" + END
SHA256 = r"^[0-9a-f]{64}" + END
HASH16 = r"^[0-9a-f]{16}" + END


def _text(limit: int = MAX_TEXT) -> dict[str, Any]:
    return {"type": "string", "maxLength": limit}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _array(items: dict[str, Any], limit: int, min_items: int = 0) -> dict[str, Any]:
    return {"type": "array", "items": items, "maxItems": limit, "minItems": min_items}


NUMBER = {"type": "number", "minimum": -1e300, "maximum": 1e300}
POSITIVE = {"type": "number", "exclusiveMinimum": 0, "maximum": 1e300}
COUNT = {"type": "integer", "minimum": 0, "maximum": 10_000_000}
SCALAR = {"anyOf": [_text(), NUMBER, {"type": "boolean"}, {"type": "null"}]}
# Free-form key/value maps (check details, clocks, llm usage): scalars, lists of them, and one
# more level of such maps (a check's `tolerance` is a map).
_SCALARS = {"anyOf": [SCALAR, _array(SCALAR, 64)]}
_MAP_OF_SCALARS = {
    "type": "object",
    "maxProperties": 64,
    "propertyNames": {"maxLength": 100},
    "additionalProperties": _SCALARS,
}
FLAT_MAP = {
    "type": "object",
    "maxProperties": 64,
    "propertyNames": {"maxLength": 100},
    "additionalProperties": {"anyOf": [SCALAR, _array(SCALAR, 64), _MAP_OF_SCALARS]},
}
INTERVAL = _array(POSITIVE, 2, 2)

BATCH_SIZE = {"type": "integer", "minimum": 1, "maximum": MAX_SAMPLES}
BATCH_WORKER = {"type": "integer", "minimum": 0, "maximum": 1024}
SAMPLES = _obj(
    {
        "samples_us": {
            **_array(POSITIVE, MAX_SAMPLES, 1),
            "description": "per call: its batch's time per call on the bot's own clock (the batch's "
            "span less the harness's calibrated work, over its calls; docs/benchmark.md), so the calls "
            "of one batch carry one value",
        },
        "batch_sizes": _array(BATCH_SIZE, MAX_BATCHES),
        "batch_workers": _array(BATCH_WORKER, MAX_BATCHES),
    },
    ("samples_us", "batch_sizes", "batch_workers"),
)

MEASUREMENT = _obj(
    {
        **SAMPLES["properties"],
        "median_us": POSITIVE,
        "iqr_us": NUMBER,
        "q1_us": NUMBER,
        "q3_us": NUMBER,
        "n": COUNT,
        "rel_se": {"anyOf": [NUMBER, {"type": "null"}]},
        "batches": COUNT,
        "workers": COUNT,
        "worker_medians_us": _array(POSITIVE, 1024),
    },
    ("median_us", "samples_us", "batch_sizes", "batch_workers"),
)

DERIVATION = _obj(
    {
        "baseline": SAMPLES,
        "spread_log_sd": {"type": "number", "minimum": 0, "maximum": 10},
        "spread_df": {"type": "integer", "minimum": 0, "maximum": 100_000},
        "resamples": {"type": "integer", "minimum": 100, "maximum": 10_000},
    },
    ("baseline", "spread_log_sd", "spread_df", "resamples"),
)

SHAPE = _obj(
    {
        "shape": {"type": "string", "pattern": NAME},
        "inputs": _nullable(_text(1_000)),
        "output_dtype": _nullable(_text(100)),
        "measurement": _nullable(MEASUREMENT),
        "speedup": _nullable(POSITIVE),
        "speedup_ci": _nullable(INTERVAL),
        "level": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "significance": {"enum": ["faster", "slower", "no significant difference"]},
        "derivation": DERIVATION,
        "floor_us": _nullable(NUMBER),
        "pct_of_floor": _nullable(NUMBER),
        "max_abs_err": _nullable(NUMBER),
        "norm_rel_err": _nullable(NUMBER),
        # What floor_us is computed from: stage 2 recomputes it with its own peaks.
        "nbytes": {"type": "integer", "minimum": 0, "maximum": 10**18},
        "flops": {"type": "integer", "minimum": 0, "maximum": 10**21},
    },
    ("shape",),
)

ORIGIN = _obj(
    {
        "strategy": {"enum": ["file", "reference", "target", "search", "llm", "split", "tuning"]},
        "detail": _text(1_000),
        "model": _nullable(_text(200)),
        "round": _nullable({"type": "integer", "minimum": 0, "maximum": 10_000}),
        "parent": _nullable({"type": "string", "pattern": HASH16}),
    }
)

CHECK = _obj(
    {
        "name": {"type": "string", "pattern": NAME},
        "passed": {"type": "boolean"},
        "evidence": _text(),
        "details": FLAT_MAP,
    },
    ("name", "passed"),
)

CONTENDER = {  # a baseline or an attempt, as bot.core.outcomes.ContenderOutcome writes it
    "name": {"type": "string", "pattern": NAME},
    "path": _nullable(_text(300)),
    "source_hash": {"type": "string", "pattern": HASH16},
    "source_sha256": {"type": "string", "pattern": SHA256},
    "role": {"enum": ["baseline", "candidate"]},
    "origin": ORIGIN,
    "accepted": {"type": "boolean"},
    "status": {"enum": ["accepted", "rejected"]},
    "reasons": _array(_text(), 64),
    "checks": _array(CHECK, 256),
    "speedup": _nullable(POSITIVE),
    "speedup_ci": _nullable(INTERVAL),
    "median_us": _nullable(POSITIVE),
    "slower_shapes": _array({"type": "string", "pattern": NAME}, MAX_SHAPES),
    "not_timed": _nullable(_text(300)),
    "shapes": _array(SHAPE, MAX_SHAPES),
}

ATTEMPT = _obj(
    {
        **CONTENDER,
        "round": {"type": "integer", "minimum": 0, "maximum": 10_000},
        "reason": _text(),
        "significant": {"type": "boolean"},
    },
    ("name", "round", "status", "source_sha256", "shapes"),
)

BEST = _obj(
    {
        "name": {"type": "string", "pattern": NAME},
        "path": _nullable(_text(300)),
        "source": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_CHARS},
        "source_sha256": {"type": "string", "pattern": SHA256},
        "speedup": POSITIVE,
        "speedup_ci": INTERVAL,
        "origin": ORIGIN,
        "shapes": _array(SHAPE, MAX_SHAPES, 1),
    },
    ("name", "source", "source_sha256", "speedup", "speedup_ci", "shapes"),
)

ENVIRONMENT = _obj(
    {
        "device": {"enum": ["cpu", "cuda"]},
        "device_name": {"type": "string", "pattern": r"^[A-Za-z0-9 ._()+-]{0,100}" + END},
        "torch": _text(100),
        "triton": _nullable(_text(100)),
        "cuda": _nullable(_text(100)),
        "driver": _nullable(_text(100)),
        "python": _text(100),
        "clocks": FLAT_MAP,
        "containment": _text(300),
    }
)

IMPLAUSIBLE = _obj(
    {
        "name": {"type": "string", "pattern": NAME},
        "speedup": _nullable(POSITIVE),
        "speedup_ci": _nullable(INTERVAL),
        "evidence": _text(),
    },
    ("name",),
)

SECONDS = {"type": "number", "minimum": 0, "maximum": 1e7}
# Where a problem's wall time went (bot.core.time_split.TimeSplit); optional: older documents lack it.
TIME_SPLIT = _obj({name: SECONDS for name in TIME_SPLIT_FIELDS}, TIME_SPLIT_REQUIRED)

PROBLEM = _obj(
    {
        "problem": {"type": "string", "pattern": PROBLEM_NAME},
        "problem_path": _text(300),
        "target": _nullable({"type": "string", "pattern": REPO_PATH}),
        "best": _nullable(BEST),
        "outcome": {"enum": ["failed", "improved", "no significant improvement", "not timed", "implausible"]},
        "error": _text(),
        "not_timed": _nullable(_text(300)),
        "implausible": _array(IMPLAUSIBLE, MAX_ATTEMPTS),
        "max_plausible_speedup": {"type": "number", "minimum": 1, "maximum": 1e6},
        "min_speedup": {"type": "number", "minimum": 1, "maximum": 100},
        "stopped": _text(500),
        "wall_s": {"type": "number", "minimum": 0, "maximum": 1e7},
        "baseline": _nullable(_obj(CONTENDER, ("name",))),
        "attempts": _array(ATTEMPT, MAX_ATTEMPTS),
        "skipped": _array(_obj({"transformation": _text(300), "reason": _text()}, ("transformation", "reason")), 256),
        "environment": ENVIRONMENT,
        "llm": FLAT_MAP,
        "distributions": _array({"enum": list(DISTRIBUTIONS)}, len(DISTRIBUTIONS), 1),
        "skipped_distributions": {
            "type": "object",
            "propertyNames": {"enum": list(DISTRIBUTIONS)},
            "additionalProperties": _text(500),
        },
        "reference_precision": {"enum": ["float64", "float32", "native"]},
        "tolerance": {"enum": choices(TolerancePolicy)},
        "time_split": TIME_SPLIT,
    },
    ("problem", "outcome", "attempts"),
)

_OPTIONAL_TEXT = _nullable(_text(300))
TRIGGER = _obj(
    {
        "kind": {"enum": ["pull_request", "schedule", "workflow_dispatch", "cli"]},
        "repo": _OPTIONAL_TEXT,
        "action": _OPTIONAL_TEXT,
        "pr_number": _nullable({"type": "integer", "minimum": 1, "maximum": 10**9}),
        "base_ref": _OPTIONAL_TEXT,
        "base_sha": _nullable({"type": "string", "pattern": SHA}),
        "head_ref": _OPTIONAL_TEXT,
        "head_sha": _nullable({"type": "string", "pattern": SHA}),
        "head_repo": _OPTIONAL_TEXT,
        "label": _OPTIONAL_TEXT,
        "labels": _array(_text(100), 100),
        "default_branch": _OPTIONAL_TEXT,
    },
    ("kind",),
)

RESULTS = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    **_obj(
        {
            "schema_version": {"const": RESULTS_SCHEMA_VERSION},
            "kind": {"const": "kernel-bot-results"},
            "created": _text(40),
            "trigger": TRIGGER,
            "min_speedup": {"type": "number", "minimum": 1, "maximum": 100},
            "problems": _array(PROBLEM, MAX_PROBLEMS),
            "shards": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        ("schema_version", "problems"),
    ),
}


def _extent(value: Any) -> tuple[int, int]:
    """(nesting depth, values) of a parsed JSON value, without recursion (a 100k-deep array is
    one line), stopping as soon as either passes its cap."""
    deepest, count, stack = 0, 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest, count = max(deepest, level), count + 1
        if level > MAX_DEPTH or count > MAX_VALUES:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest, count


def depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (up to the first level past MAX_DEPTH)."""
    return _extent(value)[0]


def _within(values: list[Any], kinds: frozenset[type], above: float, at_most: float) -> bool:
    """Every value of one of `kinds` (bool is neither int nor float here), each > `above` and
    <= `at_most`: one pass in C, where jsonschema takes some 15 us a value."""
    return not values or (set(map(type, values)) <= kinds and min(values) > above and max(values) <= at_most)


_NUMBERS, _INTS = frozenset({int, float}), frozenset({int})
# Item schemas of the long arrays (samples, batch sizes and workers) -> a check that accepts only
# what the schema accepts; an array it does not accept is validated item by item, for the message.
_FAST_ITEMS: tuple[tuple[dict[str, Any], Callable[[list[Any]], bool]], ...] = (
    (POSITIVE, lambda v: _within(v, _NUMBERS, 0, 1e300)),
    (BATCH_SIZE, lambda v: _within(v, _INTS, 0, MAX_SAMPLES)),
    (BATCH_WORKER, lambda v: _within(v, _INTS, -1, 1024)),
)


def _validator() -> Any:
    """Draft 2020-12 with the long numeric arrays checked in one pass."""
    from jsonschema import Draft202012Validator, validators

    items: Any = Draft202012Validator.VALIDATORS["items"]

    def fast_items(validator: Any, schema_items: Any, instance: Any, schema: Any) -> Any:
        if type(instance) is list and any(schema_items == known and ok(instance) for known, ok in _FAST_ITEMS):
            return
        yield from items(validator, schema_items, instance, schema)

    extend: Any = validators.extend  # untyped in jsonschema's stubs
    return extend(Draft202012Validator, {"items": fast_items})(RESULTS)


class InvalidResults(BotError):
    """A results document that does not match the schema (the message names the field)."""


def _where(path: Any) -> str:
    out = "results"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate(data: Any) -> None:
    """InvalidResults naming the first field of `data` the schema refuses (version first)."""
    from jsonschema.exceptions import best_match

    def refuse(where: str, what: str) -> InvalidResults:
        return InvalidResults(f"untrusted results rejected: {where}: {what}")

    if isinstance(data, dict) and data.get("schema_version") != RESULTS_SCHEMA_VERSION:
        raise refuse(
            "results.schema_version", f"expected {RESULTS_SCHEMA_VERSION}, got {str(data.get('schema_version'))[:40]!r}"
        )
    deepest, values = _extent(data)  # before any per-value work
    if deepest > MAX_DEPTH:
        raise refuse("results", f"nested deeper than {MAX_DEPTH} levels")
    if values > MAX_VALUES:
        raise refuse(
            "results",
            f"more than {MAX_VALUES:,} values (fewer samples, shapes or candidates)",
        )
    error = best_match(_validator().iter_errors(data))
    if error is not None:
        # The message quotes the offending value, which may be 500 KiB of forged text.
        message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
        if error.validator == "pattern":  # the regular expression itself says little to a reader
            message = f"{str(error.instance)[:200]!r} has characters or a length this field does not allow"
        raise refuse(_where(error.absolute_path), f"{error.validator}: {message}")
