"""The one reader of configuration: config file, action inputs (environment), CLI overrides.

Precedence, lowest first: defaults < config file < `KERNEL_BOT_*` action inputs (empty = unset)
< CLI overrides (None = unset). The config file is `[tool.kernel-bot]` in `pyproject.toml`, or
`kernel-bot.toml` with its kebab-case keys at the TOP LEVEL (the file name already says whose
keys they are). Configuring both is an error, not a merge: a pull request could add the second
file to shadow the first. The file may come from a pull request, so every value is checked and
paths must stay inside the repository.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import os
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from bot.core.errors import BotError
from bot.core.repo_path import PLAIN_RELATIVE, is_plain_relative
from bot.core.settings import (
    Backend,
    DeviceChoice,
    SandboxKind,
    Settings,
    Strategy,
    TimingMode,
    TolerancePolicy,
    choices,
)

PYPROJECT = "pyproject.toml"
KERNEL_BOT_TOML = "kernel-bot.toml"


class _Bad(ValueError):
    """A value that does not fit; the caller adds where it came from."""


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Bad("a non-empty string")
    return value.strip()


def _choice(kind: type[StrEnum]) -> Callable[[Any], StrEnum]:
    def check(value: Any) -> StrEnum:
        if value not in choices(kind):
            raise _Bad("one of " + ", ".join(repr(o) for o in choices(kind)))
        return kind(value)

    return check


def _number(minimum: float, inclusive: bool, what: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        # bool is an int in Python; `budget-s = true` is a mistake, not 1 second.
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < minimum or (value == minimum and not inclusive):
            raise _Bad(what)
        return float(value)

    return check


def _integer(minimum: int, what: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise _Bad(what)
        return value

    return check


def _relative_path(value: Any) -> str:
    if not isinstance(value, str) or not is_plain_relative(value.strip()):
        raise _Bad(PLAIN_RELATIVE)
    return value.strip()


def _chart_path(value: Any) -> str:
    if value == "":
        return ""
    path = _relative_path(value)
    if not path.endswith(".png"):
        raise _Bad(f'{PLAIN_RELATIVE} ending in .png, or "" for no chart')
    return path


def _kernel_paths(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise _Bad("a list of repository-relative glob patterns")
    for item in value:
        if not isinstance(item, str) or not is_plain_relative(item.strip()):
            raise _Bad(f"glob patterns, each {PLAIN_RELATIVE}; {item!r} is not")
    return tuple(item.strip() for item in value)


# Settings attribute -> check. The file key is the attribute in kebab-case.
CHECKS: dict[str, Callable[[Any], Any]] = {
    "problems_dir": _relative_path,
    "label": _string,
    "strategy": _choice(Strategy),
    "budget_s": _number(0, False, "a positive number of seconds"),
    "max_rounds": _integer(1, "an integer >= 1"),
    "samples": _integer(1, "an integer >= 1"),
    "min_speedup": _number(1, True, "a number >= 1 (1.05 = 5% faster)"),
    "max_plausible_speedup": _number(1, False, "a number > 1 (100 = a 100x speedup is flagged)"),
    "model": _string,
    "backend": _choice(Backend),
    "sandbox": _choice(SandboxKind),
    "max_open_prs": _integer(0, "an integer >= 0"),
    "kernel_paths": _kernel_paths,
    "chart_path": _chart_path,
    "time_cap_s": _number(0, False, "a positive number of seconds"),
    "timing": _choice(TimingMode),
    "device": _choice(DeviceChoice),
}


def _patterns(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise _Bad("a list of fnmatch patterns")
    return tuple(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad("true or false")
    return value


# The person at the command line may point anywhere; only the file (maybe from a PR) is fenced
# in. Settings the file may not touch (bot.core.settings says why) come only from here.
OVERRIDE_CHECKS: dict[str, Callable[[Any], Any]] = {
    **CHECKS,
    "problems_dir": _string,
    "replicas": _integer(1, "an integer >= 1"),
    "max_tokens": _integer(1, "an integer >= 1"),
    "exclude": _patterns,
    "use_cache": _flag,
    "tolerance": _choice(TolerancePolicy),
    "allow_uncontained": _flag,
}
FILE_KEYS = {name.replace("_", "-"): name for name in CHECKS}

# Action inputs as action.yml passes them through `env:`; the parser turns the string first.
ENV_INPUTS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "KERNEL_BOT_LABEL": ("label", str),
    "KERNEL_BOT_STRATEGY": ("strategy", str),
    "KERNEL_BOT_BUDGET_S": ("budget_s", float),
    "KERNEL_BOT_MODEL": ("model", str),
    "KERNEL_BOT_MIN_SPEEDUP": ("min_speedup", float),
    "KERNEL_BOT_SANDBOX": ("sandbox", str),
}


def _unknown(keys: Sequence[str], known: Sequence[str]) -> str:
    parts = []
    for key in keys:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)  # also min_speedup -> min-speedup
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(parts)


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib  # Python 3.11+; imported here so that nothing happens at import time

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BotError(f"{path}: cannot read ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BotError(f"{path}: not valid TOML: {exc}") from None


def read_config_file(repo_root: Path) -> tuple[Path | None, str, dict[str, Any]]:
    """(file, how its keys are named in messages, raw table) of the repo's bot config, if any."""
    pyproject, own = repo_root / PYPROJECT, repo_root / KERNEL_BOT_TOML
    table: dict[str, Any] | None = None
    if pyproject.is_file():
        tool = _read_toml(pyproject).get("tool", {})
        table = tool.get("kernel-bot") if isinstance(tool, dict) else None
        if table is not None and not isinstance(table, dict):
            raise BotError(f"{pyproject}: [tool.kernel-bot] must be a table")
    if own.is_file():
        if table is not None:
            raise BotError(f"kernel-bot is configured twice: {pyproject} ([tool.kernel-bot]) and {own}; keep one")
        data = _read_toml(own)
        if isinstance(data.get("kernel-bot"), dict):
            raise BotError(f"{own}: put the keys at the top level, not in a [kernel-bot] table")
        return own, "", data
    return (pyproject, "[tool.kernel-bot] ", table) if table is not None else (None, "", {})


def _file_values(repo_root: Path) -> dict[str, Any]:
    path, prefix, table = read_config_file(repo_root)
    unknown = [k for k in table if k not in FILE_KEYS]
    if unknown:
        raise BotError(
            f"{path}: unknown {prefix}key(s) {_unknown(unknown, list(FILE_KEYS))}; known: {', '.join(FILE_KEYS)}"
        )
    values = {}
    for key, raw in table.items():
        try:
            values[FILE_KEYS[key]] = CHECKS[FILE_KEYS[key]](raw)
        except _Bad as exc:
            raise BotError(f"{path}: {prefix}{key}: expected {exc}, got {raw!r}") from None
    return values


def _env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    values = {}
    for var, (name, parse) in ENV_INPUTS.items():
        raw = environ.get(var, "").strip()
        if not raw:  # an action input left empty arrives as "": it means "not given"
            continue
        try:
            values[name] = CHECKS[name](parse(raw))
        except (_Bad, ValueError) as exc:
            expected = exc if isinstance(exc, _Bad) else "a number"
            raise BotError(
                f"environment variable {var} (action input "
                f"{name.replace('_', '-')!r}): expected {expected}, got {raw!r}"
            ) from None
    return values


def _override_values(overrides: Mapping[str, Any]) -> dict[str, Any]:
    unknown = [k for k in overrides if k not in OVERRIDE_CHECKS]
    if unknown:
        raise BotError(f"unknown setting(s) {_unknown(unknown, list(OVERRIDE_CHECKS))}")
    values = {}
    for name, raw in overrides.items():
        if raw is None:
            continue
        try:
            values[name] = OVERRIDE_CHECKS[name](raw)
        except _Bad as exc:
            raise BotError(f"option --{name.replace('_', '-')}: expected {exc}, got {raw!r}") from None
    return values


def load_settings(
    repo_root: Path | None, environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """The command's settings, every value validated: defaults < the config file of the repository
    at `repo_root` < its KERNEL_BOT_* action inputs (`environ`, by default os.environ) < the
    command line's `overrides`. Commands given problem files have no repository (`repo_root`
    None): their settings are the defaults under the command line alone."""
    if repo_root is None:
        return Settings(**_override_values(overrides or {}))
    environ = os.environ if environ is None else environ
    merged = {**_file_values(Path(repo_root)), **_env_values(environ), **_override_values(overrides or {})}
    return Settings(**merged)


# --- paths the bot may change --------------------------------------------------------------


def _match_parts(path: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        # `**` spans whole segments: `a/**/b` matches `a/b` and `a/x/y/b`; a trailing one
        # matches everything below the folder (but not the folder itself).
        if not rest:
            return bool(path)
        return any(_match_parts(path[i:], rest) for i in range(len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], head) and _match_parts(path[1:], rest)


def path_matches(path: str, pattern: str) -> bool:
    """fnmatch for repository paths, one segment at a time: `*` stays in a segment, `**` spans many."""
    if not is_plain_relative(path):
        return False
    return _match_parts(PurePosixPath(path).parts, PurePosixPath(pattern).parts)


def path_allowed(path: str, settings: Settings) -> bool:
    """May the bot write `path` (repository-relative)? Absolute paths and '..' never may."""
    return any(path_matches(path, pattern) for pattern in settings.kernel_paths)
