"""The package layout's import contracts (`[tool.importlinter]` in pyproject.toml) hold:
bot.core and bot.report import no torch, bot.harness (the candidate's process) imports nothing
of the engine and the engine nothing of the harness (they share bot.protocol), bot.github
(stage 2) imports no GPU stack and no code that runs candidates, and the layers only import
downwards."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    assert LINT_IMPORTS.is_file(), f"{LINT_IMPORTS} missing: install the test extra (pip install -e '.[test]')"
    # --no-cache: a cache left by an earlier run must never answer for this tree.
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "0 broken" in proc.stdout, proc.stdout[-6000:]


def _with_import(tmp_path: Path, module: str, line: str) -> subprocess.CompletedProcess:
    """The check over a copy of the tree with `line` added to `module` (a path under bot/)."""
    shutil.copytree(ROOT / "bot", tmp_path / "bot", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "bot" / module, "a") as fh:
        fh.write(f"\n{line}  # noqa: E402,F401\n")
    return _lint_imports(tmp_path)


def test_a_torch_import_in_core_breaks_the_contracts(tmp_path):
    # The contracts bite: the same tree with one core module importing torch fails the check.
    proc = _with_import(tmp_path, "core/roofline.py", "import torch")
    assert proc.returncode != 0, proc.stdout[-6000:]
    assert "bot.core.roofline -> torch" in proc.stdout, proc.stdout[-6000:]


def test_a_harness_import_in_the_engine_breaks_the_contracts(tmp_path):
    # The parent's code reads a worker only through bot.protocol, never the candidate's side.
    proc = _with_import(tmp_path, "engine/compare.py", "import bot.harness.shared")
    assert proc.returncode != 0, proc.stdout[-6000:]
    assert "bot.engine.compare -> bot.harness.shared" in proc.stdout, proc.stdout[-6000:]
