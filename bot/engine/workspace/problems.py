"""Loads KernelBench-format problem files into `Problem`s, without executing them.

Problem files come from the repository under test (possibly from a pull request), so the
bot's own process reads them with `ast` only: structure and literal metadata. Running
`get_inputs()` and `Model` happens in the reference worker, whose errors are reported
as `ProblemError` too.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.core.distributions import DistributionError, kept_distributions, skipped_distributions
from bot.core.domain import Problem, Shape
from bot.core.errors import ProblemError
from bot.core.settings import Device

PRECISIONS = ("float64", "float32", "native")
TOLERANCE_KEYS = {"norm_rel", "elem_rtol", "elem_atol_rel"}
REQUIRED = {"Model": ast.ClassDef, "get_inputs": ast.FunctionDef, "get_init_inputs": ast.FunctionDef}


def repo_root(path: Path) -> Path:
    """The git work tree holding `path`, else its folder."""
    try:
        out = subprocess.run(
            ["git", "-C", str(path.parent), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10
        )
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return path.parent


def _literal(node: ast.AST, name: str, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ProblemError(f"{where}: {name} must be a literal (read without running the file)") from None


def _shapes(value: Any, name: str, where: str, globals_: set[str]) -> tuple[Shape, ...]:
    if not isinstance(value, dict) or not value:
        raise ProblemError(f"{where}: {name} must be a non-empty dict of shape name -> overrides")
    shapes = []
    for shape_name, overrides in value.items():
        if not isinstance(overrides, dict):
            raise ProblemError(f"{where}: {name}[{shape_name!r}] must be a dict of global overrides")
        unknown = sorted(set(overrides) - globals_)
        if unknown:
            raise ProblemError(
                f"{where}: {name}[{shape_name!r}] overrides {unknown}, which the file does not define at module level"
            )
        shapes.append(Shape(str(shape_name), dict(overrides)))
    return tuple(shapes)


def load_problem(path: str | Path, root: Path | None = None) -> Problem:
    """Parse and validate a problem file; every failure is one clear `ProblemError` line."""
    path = Path(path).resolve()
    where = str(path)
    try:
        source = path.read_text()
    except OSError as exc:
        raise ProblemError(f"{where}: cannot read problem file ({exc.strerror})") from None
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise ProblemError(f"{where}:{exc.lineno}: syntax error: {exc.msg}") from None
    defs: dict[str, ast.AST] = {}
    assigns: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defs[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigns[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            assigns[node.target.id] = node.value
    for name, kind in REQUIRED.items():
        if not isinstance(defs.get(name), kind):
            what = "class" if kind is ast.ClassDef else "function"
            raise ProblemError(f"{where}: not a KernelBench problem: no {what} {name} at module level")
    meta = {
        k: _literal(v, k, where)
        for k, v in assigns.items()
        if k
        in {
            "TARGET",
            "SHAPES",
            "CPU_SHAPES",
            "TOLERANCE",
            "DISTRIBUTIONS",
            "SKIP_DISTRIBUTIONS",
            "REFERENCE_PRECISION",
            "WATCH",
        }
    }
    root = (root or repo_root(path)).resolve()
    target = meta.get("TARGET")
    if target is not None:
        if not isinstance(target, str) or Path(target).is_absolute():
            raise ProblemError(f"{where}: TARGET must be a repository-relative path string")
        resolved = (root / target).resolve()
        if root not in resolved.parents or not resolved.is_file():
            raise ProblemError(f"{where}: TARGET {target!r} is not a file inside {root}")
    names = set(assigns)
    gpu = _shapes(meta["SHAPES"], "SHAPES", where, names) if "SHAPES" in meta else (Shape("default"),)
    cpu = _shapes(meta["CPU_SHAPES"], "CPU_SHAPES", where, names) if "CPU_SHAPES" in meta else gpu
    tolerance = meta.get("TOLERANCE", {})
    if not isinstance(tolerance, dict) or set(tolerance) - TOLERANCE_KEYS:
        raise ProblemError(f"{where}: TOLERANCE must be a dict with keys from {sorted(TOLERANCE_KEYS)}")
    try:
        skipped = skipped_distributions(meta.get("DISTRIBUTIONS"), meta.get("SKIP_DISTRIBUTIONS"))
    except DistributionError as exc:
        raise ProblemError(f"{where}: {exc}") from None
    precision = meta.get("REFERENCE_PRECISION", "float64")
    if precision not in PRECISIONS:
        raise ProblemError(f"{where}: REFERENCE_PRECISION must be one of {PRECISIONS}")
    watch = meta.get("WATCH", [])
    if not isinstance(watch, (list, tuple)) or not all(isinstance(w, str) for w in watch):
        raise ProblemError(f"{where}: WATCH must be a list of path patterns")
    return Problem(
        path=path,
        name=path.stem,
        source=source,
        root=root,
        target_relpath=target,
        gpu_shapes=gpu,
        cpu_shapes=cpu,
        tolerance={k: float(v) for k, v in tolerance.items()},
        distributions=kept_distributions(skipped),
        reference_precision=precision,
        watch=tuple(watch),
        skipped_distributions=skipped,
    )


def find_problems(directory: str | Path, root: Path | None = None) -> list[Problem]:
    """Every problem file in a folder (files starting with '_' are skipped)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ProblemError(f"{folder}: no such problems directory")
    return [load_problem(p, root) for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]


def load_problems(paths: Sequence[str | Path]) -> list[Problem]:
    """Problem files, and every problem file of each folder among `paths` (as `find_problems`),
    each once (by resolved path), in the order given."""
    problems: list[Problem] = []
    seen: set[Path] = set()
    for given in map(Path, paths):
        if given.is_dir():
            found = find_problems(given)
            if not found:
                raise ProblemError(f"{given}: no problem files (*.py) in this folder")
        elif given.is_file():
            found = [load_problem(given)]
        else:
            raise ProblemError(f"{given}: no such problem file or folder")
        for problem in found:
            if problem.path not in seen:  # resolved by load_problem
                seen.add(problem.path)
                problems.append(problem)
    return problems


def only_shapes(problem: Problem, names: tuple[str, ...], device: str) -> Problem:
    """The problem restricted to the named shapes of `device` (e.g. only the launch-bound
    `decode` shapes); a problem with none of them is an error that lists the ones it has."""
    if not names:
        return problem
    have = problem.shapes_for(device)
    kept = tuple(s for s in have if s.name in names)
    if not kept:
        raise ProblemError(
            f"{problem.path}: no shape named {', '.join(names)} on {device} (it has: {', '.join(s.name for s in have)})"
        )
    return replace(problem, **{"cpu_shapes" if device == Device.CPU else "gpu_shapes": kept})
