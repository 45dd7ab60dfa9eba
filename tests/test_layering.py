"""The package layout's import contracts (`[tool.importlinter]` in pyproject.toml) hold:
bot.core and bot.report import no torch, bot.harness (the candidate's process) imports nothing
of the engine and the engine nothing of the harness (they share bot.protocol), bot.github
(stage 2) imports no GPU stack and no code that runs candidates, and the layers only import
downwards."""

from __future__ import annotations

import json
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
    proc = _with_import(tmp_path, "engine/verification/compare.py", "import bot.harness.shared")
    assert proc.returncode != 0, proc.stdout[-6000:]
    assert "bot.engine.verification.compare -> bot.harness.shared" in proc.stdout, proc.stdout[-6000:]


# grimp (import-linter's graph) counts every import statement: at the top, under TYPE_CHECKING
# and inside functions alike, so a cycle cannot hide in a function body.
_GRAPH = """
import json, grimp
graph = grimp.build_graph("bot", cache_dir=None)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
"""


def _import_graph(root: Path) -> dict[str, list[str]]:
    """Each module of bot/ under `root` and the modules of bot/ it imports. `python -c` puts the
    working directory first on the path, so the graph is of this tree, not an installed copy."""
    proc = subprocess.run([sys.executable, "-c", _GRAPH], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative so that a
    deep chain of imports cannot reach Python's recursion limit), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(graph[root]))]
        while work:
            module, todo = work[-1]
            for imported in todo:
                if imported not in index:
                    index[imported] = low[imported] = len(index)
                    stack.append(imported)
                    on_stack.add(imported)
                    work.append((imported, iter(graph[imported])))
                    break
                if imported in on_stack:
                    low[module] = min(low[module], index[imported])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _described(cycles: list[list[str]], graph: dict[str, list[str]]) -> str:
    return "\n\n".join(
        "\n".join(f"  {m} -> {', '.join(i for i in graph[m] if i in cycle)}" for m in cycle) for cycle in cycles
    )


def test_no_module_of_the_bot_imports_itself_back():
    graph = _import_graph(ROOT)
    cycles = _cycles(graph)
    assert not cycles, "import cycles in bot/:\n" + _described(cycles, graph)


def test_an_import_that_closes_a_loop_is_found(tmp_path):
    # The check bites: bot.core.judge reads bot.core.results_shapes, so the reverse import closes a loop.
    shutil.copytree(ROOT / "bot", tmp_path / "bot", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "bot" / "core" / "results_shapes.py", "a") as fh:
        fh.write("\n\ndef _late():\n    import bot.core.judge  # noqa: F401\n")
    cycles = _cycles(_import_graph(tmp_path))
    assert any({"bot.core.judge", "bot.core.results_shapes"} <= set(cycle) for cycle in cycles), cycles
