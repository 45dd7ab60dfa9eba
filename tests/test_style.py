"""Habits kept on every run: ruff's lint and format over the tree (tests/fixtures excepted: they
are hostile or broken on purpose), mypy --strict over the pure core (pyproject.toml), modules
small enough to read, and no parameter list too long to read at its call."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400
MAX_PARAMETERS = 7  # self and cls not counted
# Triton kernels take every pointer, stride and block size as a parameter of their own.
KERNELS = ROOT / "bot" / "propose" / "kernels"


def _modules() -> list[Path]:
    return sorted(p for p in (ROOT / "bot").rglob("*.py") if KERNELS not in p.parents)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_tree_is_formatted_as_ruff_formats_it():
    done = _run("ruff", "format", "--check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_core_passes_mypy_strict():
    done = _run("mypy", "--no-incremental", "bot/core")
    assert done.returncode == 0 and "Success" in done.stdout, done.stdout + done.stderr


def test_no_module_of_the_bot_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, long


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]


def test_no_function_of_the_bot_takes_more_than_7_parameters():
    found = {
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name}": len(_parameters(node))
        for p in _modules()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_parameters(node)) > MAX_PARAMETERS
    }
    assert not found, found
