"""Exactly which file a follow-up may change for each problem, decided by stage 2 itself.

A follow-up replaces one file per improved problem: the `TARGET` that problem's file declares
at the commit the run measured, read through the contents API (never the artifact's word),
an existing kernel module inside `kernel-paths`, never a problem file, and only with the
bytes of the candidate the artifact says was verified (its SHA-256 is checked).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bot.core.errors import BotError
from bot.core.repo_path import is_plain_relative
from bot.core.results import ProblemResult
from bot.core.safe_text import first_hidden

SAFE_PATH = re.compile(r"^[A-Za-z0-9._/-]{1,300}$")
# Python packaging and test plumbing sit beside kernels but are not kernels: a candidate
# written there would run on import or in every test session. Compared in lower case: on a
# case-insensitive checkout (macOS, Windows) `Conftest.py` is `conftest.py`.
NEVER_TARGETS = frozenset({"__init__.py", "conftest.py", "setup.py", "__main__.py", "sitecustomize.py"})
TEST_FOLDERS = frozenset({"test", "tests"})
# Git tree modes (the trees API gives them; the contents API follows symlinks and cannot tell).
REGULAR_FILE_MODES = frozenset({"100644", "100755"})
FOLDER_MODE = "040000"
_MODE_NAMES = {"120000": "a symlink", "160000": "a submodule (gitlink)", FOLDER_MODE: "a folder"}


class FileReader(Protocol):
    def file_at(self, path: str, ref: str) -> bytes | None: ...

    def tree_modes(self, path: str, ref: str) -> tuple[str, ...] | None:
        """The git mode of each component of `path` in commit `ref`'s tree, down to the first
        that is not a folder; None when a component does not exist."""
        ...


@dataclass(frozen=True)
class ScopedChange:
    """One problem's follow-up file: where, what it holds today at the commit, what replaces it."""

    problem: str
    path: str
    current: str
    source: str


def declared_target(source: str) -> str | None:
    """The literal `TARGET = "..."` at module level of a problem file, read without running it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            names, value = [t.id for t in node.targets if isinstance(t, ast.Name)], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names, value = [node.target.id], node.value
        else:
            continue
        if "TARGET" in names and value is not None:
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else ""
    return None


def target_refusal(path: str, problems_dir: str, chart_path: str, allowed: Callable[[str], bool]) -> str | None:
    """Why `path` may not be a follow-up's file; None when it may."""
    parts = path.split("/")
    if not SAFE_PATH.match(path):
        return "has characters outside [A-Za-z0-9._/-]"
    if not is_plain_relative(path):
        return "is not a plain repository-relative path"
    problems = problems_dir.strip("/").lower().split("/")
    if [p.lower() for p in parts[: len(problems)]] == problems:  # `Problems/` too: one folder on macOS
        return f"is under {problems_dir}/, where the problems (the definition of correct) live"
    if path.lower() == chart_path.lower():
        return "is the chart's path"
    name = parts[-1].lower()
    if not name.endswith(".py") or name in NEVER_TARGETS or name.startswith("."):
        return "is not a kernel module (a .py file other than package and test plumbing)"
    if name.startswith("test_") or name.endswith("_test.py") or any(p.lower() in TEST_FOLDERS for p in parts[:-1]):
        return "is a test module (test_*.py, *_test.py or under a tests/ folder), not a kernel module"
    if not allowed(path):
        return "is outside the configured kernel paths"
    return None


def tree_refusal(path: str, modes: tuple[str, ...], sha: str) -> str | None:
    """Why the git tree at `sha` makes `path` no regular file to replace; None when it is one."""
    parts = path.split("/")
    for i, mode in enumerate(modes):
        last = i == len(parts) - 1
        if (last and mode in REGULAR_FILE_MODES) or (not last and mode == FOLDER_MODE):
            continue
        what = _MODE_NAMES.get(mode, f"git mode {mode}")
        where = "is" if last else f"has {'/'.join(parts[: i + 1])!r}, which is"
        return f"{where} {what} at {sha[:12]}, not a regular file"
    return None


def _verified_source(problem: ProblemResult) -> str:
    best = problem.best
    name = problem.problem
    if best is None:
        raise BotError(f"{name}: no best candidate; nothing is published")
    digest = hashlib.sha256(best.source.encode()).hexdigest()
    if digest != best.source_sha256:
        raise BotError(
            f"{name}: the best candidate's source does not hash to its recorded SHA-256; nothing is published"
        )
    hidden = first_hidden(best.source)
    if hidden is not None:
        line, char = hidden
        raise BotError(
            f"{name}: the best candidate's source holds characters a reader cannot see (U+{ord(char):04X} on "
            f"line {line}), which can make it show one program and run another; nothing is published"
        )
    if not any(a.name == best.name and a.source_sha256 == digest and a.status == "accepted" for a in problem.attempts):
        raise BotError(
            f"{name}: the best candidate {best.name!r} is not an accepted attempt with the same "
            "SHA-256; nothing is published"
        )
    return best.source


def _text(data: bytes, path: str, sha: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BotError(f"{path} at {sha[:12]} is not UTF-8 text; nothing is published") from None


def scoped_changes(
    improved: list[ProblemResult],
    head_sha: str,
    reader: FileReader,
    problems_dir: str,
    chart_path: str,
    allowed: Callable[[str], bool],
) -> list[ScopedChange]:
    """The one file per improved problem, checked against the problem file at `head_sha`;
    BotError (before anything is written) for the first problem that falls outside."""
    changes = []
    for problem in improved:
        name = problem.problem
        problem_path = f"{problems_dir.strip('/')}/{name}.py"
        raw = reader.file_at(problem_path, head_sha)
        if raw is None:
            raise BotError(f"{name}: {problem_path} does not exist at {head_sha[:12]}; nothing is published")
        target = declared_target(_text(raw, problem_path, head_sha)) or None
        if problem.target != target:
            declared = f"TARGET {target!r}" if target else "no TARGET"
            raise BotError(
                f"{name}: the results name target {problem.target!r}, but {problem_path} "
                f"declares {declared} at {head_sha[:12]}; nothing is published"
            )
        if target is None:  # nothing to replace, and a follow-up never adds a file: the plan notes it
            continue
        why = target_refusal(target, problems_dir, chart_path, allowed)
        if why:
            raise BotError(f"{name}: TARGET {target!r} {why}; nothing is published")
        modes = reader.tree_modes(target, head_sha)
        why = tree_refusal(target, modes, head_sha) if modes is not None else None
        if why:
            raise BotError(f"{name}: TARGET {target!r} {why}; nothing is published")
        current = reader.file_at(target, head_sha) if modes is not None else None
        if current is None:
            raise BotError(
                f"{name}: TARGET {target!r} does not exist at {head_sha[:12]}: a follow-up never "
                "adds a file; nothing is published"
            )
        changes.append(ScopedChange(name, target, _text(current, target, head_sha), _verified_source(problem)))
    return changes
