"""Stage 2 reads stage 1's results directory as untrusted data.

Stage 1 ran pull-request code on a GPU runner; whatever it wrote may have been forged. So
`bot publish` reads only `results.json`, caps its size, checks every field it will use
against the version-1 schema, and refuses kernel paths outside the configured allowlist
(the allowlist comes from the default branch's configuration, never from the artifact).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Callable

from bot.errors import BotError
from bot.outputs import RESULTS_SCHEMA_VERSION

MAX_RESULTS_BYTES = 16 << 20
MAX_SOURCE_BYTES = 512 << 10
MAX_PROBLEMS = 500
MAX_ATTEMPTS = 2000
MAX_TEXT = 20_000
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class _Invalid(Exception):
    pass


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise _Invalid(f"{where}: {what}")


def _number(value: Any, where: str, positive: bool = False) -> None:
    _need(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > 0 or not positive), where, "expected a finite number")


def _optional_number(value: Any, where: str) -> None:
    if value is not None:
        _number(value, where)


def _text(value: Any, where: str, limit: int = MAX_TEXT) -> None:
    _need(isinstance(value, str) and len(value) <= limit, where, f"expected a string of at most {limit} chars")


def _shapes(shapes: Any, where: str) -> None:
    _need(isinstance(shapes, list) and len(shapes) <= 64, where, "expected a list of at most 64 shapes")
    for i, s in enumerate(shapes):
        w = f"{where}[{i}]"
        _need(isinstance(s, dict), w, "expected an object")
        _text(s.get("shape"), f"{w}.shape", 200)
        for key in ("speedup", "floor_us", "pct_of_floor", "max_abs_err", "norm_rel_err"):
            _optional_number(s.get(key), f"{w}.{key}")
        ci = s.get("speedup_ci")
        _need(ci is None or (isinstance(ci, list) and len(ci) == 2), f"{w}.speedup_ci", "expected [low, high]")
        for j, v in enumerate(ci or ()):
            _number(v, f"{w}.speedup_ci[{j}]")
        m = s.get("measurement")
        _need(m is None or isinstance(m, dict), f"{w}.measurement", "expected an object")
        if m:
            _number(m.get("median_us"), f"{w}.measurement.median_us", positive=True)


def _contender(c: Any, where: str, with_source: bool) -> None:
    _need(isinstance(c, dict), where, "expected an object")
    _text(c.get("name"), f"{where}.name", 300)
    if with_source:
        _need(isinstance(c.get("source"), str) and len(c["source"].encode()) <= MAX_SOURCE_BYTES,
              f"{where}.source", f"expected source code of at most {MAX_SOURCE_BYTES >> 10} KiB")
    _optional_number(c.get("speedup"), f"{where}.speedup")
    _shapes(c.get("shapes", []), f"{where}.shapes")
    for i, r in enumerate(c.get("reasons") or ()):
        _text(r, f"{where}.reasons[{i}]")
    slower = c.get("slower_shapes", [])
    _need(isinstance(slower, list) and len(slower) <= 64, f"{where}.slower_shapes", "expected a list of shape names")
    for i, name in enumerate(slower):
        _text(name, f"{where}.slower_shapes[{i}]", 300)


def _problem(p: Any, where: str, allowed: Callable[[str], bool]) -> None:
    _need(isinstance(p, dict), where, "expected an object")
    _need(isinstance(p.get("problem"), str) and bool(_NAME.match(p["problem"])), f"{where}.problem",
          "expected a plain name ([A-Za-z0-9_.-])")
    target = p.get("target")
    if target is not None:
        _text(target, f"{where}.target", 300)
        parts = target.split("/")
        _need(not target.startswith("/") and ".." not in parts and ".git" not in parts and "" not in parts,
              f"{where}.target", f"{target!r} is not a plain repository-relative path")
        _need(allowed(target), f"{where}.target", f"{target!r} is outside the configured kernel paths")
    if p.get("best") is not None:
        _contender(p["best"], f"{where}.best", with_source=True)
        ci = p["best"].get("speedup_ci")
        _need(isinstance(ci, list) and len(ci) == 2, f"{where}.best.speedup_ci", "expected [low, high]")
        for j, v in enumerate(ci):
            _number(v, f"{where}.best.speedup_ci[{j}]", positive=True)
    if p.get("baseline") is not None:
        _contender(p["baseline"], f"{where}.baseline", with_source=False)
    attempts = p.get("attempts", [])
    _need(isinstance(attempts, list) and len(attempts) <= MAX_ATTEMPTS, f"{where}.attempts",
          f"expected a list of at most {MAX_ATTEMPTS}")
    for i, a in enumerate(attempts):
        _contender(a, f"{where}.attempts[{i}]", with_source=False)
    env = p.get("environment", {})
    _need(isinstance(env, dict), f"{where}.environment", "expected an object")
    dists = p.get("distributions", [])
    _need(isinstance(dists, list) and len(dists) <= 16 and all(isinstance(d, str) and _NAME.match(d) for d in dists),
          f"{where}.distributions", "expected a list of plain names")
    skipped = p.get("skipped_distributions", {})
    _need(isinstance(skipped, dict) and len(skipped) <= 16, f"{where}.skipped_distributions",
          "expected an object of name -> reason")
    for name, reason in skipped.items():
        _need(bool(_NAME.match(name)), f"{where}.skipped_distributions", f"{name!r} is not a plain name")
        _text(reason, f"{where}.skipped_distributions.{name}", 1000)
    for key in ("outcome", "error"):  # shown in the comment and the check run
        if p.get(key) is not None:
            _text(p[key], f"{where}.{key}", MAX_TEXT)


def validate_results(data: Any, allowed: Callable[[str], bool]) -> dict[str, Any]:
    """The results object if it matches schema version 1; BotError naming the first bad field."""
    try:
        _need(isinstance(data, dict), "results", "expected a JSON object")
        _need(data.get("schema_version") == RESULTS_SCHEMA_VERSION, "results.schema_version",
              f"expected {RESULTS_SCHEMA_VERSION}, got {data.get('schema_version')!r}")
        _number(data.get("min_speedup", 1.05), "results.min_speedup", positive=True)
        trigger = data.get("trigger", {})
        _need(isinstance(trigger, dict), "results.trigger", "expected an object")
        problems = data.get("problems")
        _need(isinstance(problems, list) and len(problems) <= MAX_PROBLEMS, "results.problems",
              f"expected a list of at most {MAX_PROBLEMS}")
        for i, p in enumerate(problems):
            _problem(p, f"results.problems[{i}]", allowed)
    except _Invalid as exc:
        raise BotError(f"untrusted results rejected: {exc}") from None
    return data


def load_results(directory: Path, allowed: Callable[[str], bool]) -> dict[str, Any]:
    """Read `results.json` from an artifact directory (only that file; size-capped)."""
    path = directory / "results.json"
    if path.is_symlink() or not path.is_file():
        raise BotError(f"{path}: no results.json (or not a regular file) in the results directory")
    size = path.stat().st_size
    if size > MAX_RESULTS_BYTES:
        raise BotError(f"{path}: {size} bytes exceeds the {MAX_RESULTS_BYTES >> 20} MiB cap")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise BotError(f"{path}: not valid JSON ({exc})") from None
    return validate_results(data, allowed)
