"""Stage 2 reads stage 1's results directory as untrusted data.

Stage 1 ran pull-request code on a GPU runner; whatever it wrote may have been forged. So
`bot publish` reads only `results.json`, caps its size and nesting, refuses NaN and
Infinity, and validates it against `bot.core.results_schema` (JSON Schema: every field typed
and bounded, unknown fields rejected) before any field is used.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.core.errors import BotError
from bot.core.repo_path import is_plain_relative
from bot.core.results import RESULTS_FILE, Results
from bot.core.results_schema import MAX_DEPTH

# Parsing and validating cost about 1 s of CPU a MiB on the CI machine (jsonschema checks every
# sample: 3.92 MiB of samples took 3.6 to 4.3 s), and the re-derivation cap (bot.github.rederive_cost)
# admits about 2 MB of samples: 4 MiB leaves room for text and bounds validation to ~5 s.
MAX_RESULTS_BYTES = 4 << 20


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_targets(results: Results, allowed: Callable[[str], bool]) -> None:
    """Every TARGET a plain repository-relative path inside the configured kernel paths."""

    def refuse(where: str, what: str) -> BotError:
        return BotError(f"untrusted results rejected: {where}: {what}")

    for i, problem in enumerate(results.problems):
        target = problem.target
        if target is not None and not is_plain_relative(target):
            raise refuse(f"results.problems[{i}].target", f"{target!r} is not a plain repository-relative path")
        if target is not None and not allowed(target):
            raise refuse(f"results.problems[{i}].target", f"{target!r} is outside the configured kernel paths")


def read_results(data: Any, allowed: Callable[[str], bool]) -> Results:
    """The typed document of parsed JSON that matches the schema (checked once, by
    Results.from_json) and names only allowed TARGETs; BotError naming the first bad field."""
    results = Results.from_json(data)
    _check_targets(results, allowed)
    return results


def validate_results(data: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
    """`data` itself if `read_results` accepts it."""
    read_results(data, allowed)
    return data


def parse_results(raw: bytes, where: str) -> Any:
    """JSON without NaN/Infinity; errors (including absurd nesting) as one BotError line."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BotError(f"{where}: not valid JSON ({str(exc)[:200]})") from None
    except RecursionError:
        raise BotError(f"untrusted results rejected: results: nested deeper than {MAX_DEPTH} levels") from None


def load_results(directory: Path, allowed: Callable[[str], bool]) -> Results:
    """Read `results.json` from an artifact directory (only that file; size-capped): the one
    reader of the file, validated before the typed document is built from it."""
    path = directory / RESULTS_FILE
    if path.is_symlink() or not path.is_file():
        raise BotError(f"{path}: no results.json (or not a regular file) in the results directory")
    size = path.stat().st_size
    if size > MAX_RESULTS_BYTES:
        raise BotError(f"{path}: {size} bytes exceeds the {MAX_RESULTS_BYTES >> 20} MiB cap")
    return read_results(parse_results(path.read_bytes(), str(path)), allowed)
