"""benchmarks/path_wins.py: which compile path was the fastest of its base, over result files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "path_wins.py"


def _attempt(name: str, speedup: float | None) -> dict:
    return {"name": name, "speedup": speedup, "status": "accepted" if speedup else "rejected"}


def _run(*files) -> dict:
    out = subprocess.run([sys.executable, str(SCRIPT), *map(str, files), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_each_base_is_a_run_and_the_fastest_compile_path_wins_it(tmp_path):
    first = {
        "problems": [
            {
                "problem": "a",
                "attempts": [
                    _attempt("compile-default-reference", 1.2),
                    _attempt("compile-default-static-reference", 1.5),
                    _attempt("compile-default-target", 0.9),
                    _attempt("compile-max-autotune-target", 0.8),
                    _attempt("cuda-graph-reference", 9.0),  # not a compile path
                    _attempt("compile-max-autotune-reference", None),  # rejected: not timed
                ],
            },
            # One compile path timed: nothing to compare, not a run.
            {"problem": "b", "attempts": [_attempt("compile-default-reference", 3.0)]},
        ]
    }
    second = {
        "problems": [
            {
                "problem": "c",
                "attempts": [
                    _attempt("compile-default-reference", 2.0),
                    _attempt("compile-default-static-reference", 1.0),
                ],
            }
        ]
    }
    (tmp_path / "one.json").write_text(json.dumps(first))
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "results.json").write_text(json.dumps({"problems": []}))
    (tmp_path / "two.json.gz").write_bytes(gzip.compress(json.dumps(second).encode()))
    tally = _run(tmp_path / "one.json", tmp_path / "dir", tmp_path / "two.json.gz")
    assert tally == {
        "compile-default": {"runs": 3, "wins": 2},
        "compile-default-static": {"runs": 2, "wins": 1},
        "compile-max-autotune": {"runs": 1, "wins": 0},
    }


def test_the_table_lists_the_most_winning_path_first(tmp_path):
    results = {
        "problems": [
            {
                "problem": "a",
                "attempts": [
                    _attempt("compile-default-reference", 1.0),
                    _attempt("compile-max-autotune-reference", 2.0),
                ],
            }
        ]
    }
    (tmp_path / "r.json").write_text(json.dumps(results))
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "r.json")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| compile")]
    assert rows == ["| compile-max-autotune | 1 | 1 |", "| compile-default | 1 | 0 |"]
