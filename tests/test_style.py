"""Habits kept on every run: ruff's lint and format over the tree (tests/fixtures excepted: they
are hostile or broken on purpose), and mypy --strict over the pure core (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
