"""benchmarks/summarize_search.py: the tables of docs/results-h200.md from results files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "summarize_search.py"


def _contender(name: str, median_us: float) -> dict:
    samples = [median_us * (1 + 0.001 * k) for k in (-2, -1, 0, 1, 2)] * 4
    return {
        "name": name,
        "status": "accepted",
        "shapes": [{"shape": "decode", "pct_of_floor": 50.0, "measurement": {"samples_us": samples}}],
    }


def _problem(name: str, eager_us: float, compiled_us: float) -> dict:
    eager, compiled = _contender("eager-reference", eager_us), _contender("compile-default-reference", compiled_us)
    return {
        "problem": name,
        "target": None,
        "baseline": eager,
        "min_speedup": 1.05,
        "best": {"name": compiled["name"]},
        "attempts": [eager, compiled],
    }


def _summary(*files) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), *map(str, files)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_later_files_replace_a_problem_and_the_table_says_where_each_row_came_from(tmp_path):
    older = tmp_path / "s12-results.json.gz"
    older.write_bytes(
        gzip.compress(json.dumps({"problems": [_problem("gelu", 10.0, 10.0), _problem("softmax", 10.0, 5.0)]}).encode())
    )
    newer = tmp_path / "s14-results.json"
    newer.write_text(json.dumps({"problems": [_problem("gelu", 10.0, 4.0)]}))
    alone = _summary(older)
    assert "| gelu | decode: 10.0 | 1.00x" in alone and "measured in" not in alone
    both = _summary(older, newer)
    rows = [line for line in both.splitlines() if line.startswith("| gelu") or line.startswith("| softmax")]
    assert [r.split(" | ")[0] for r in rows] == ["| softmax", "| gelu"]  # one row each, the latest last
    assert "| gelu | decode: 10.0 | 2.50x" in both
    assert "significantly >= 1.1x faster than eager (interval's lower bound) on 2 (100%)" in both
    assert "measured in: softmax (s12-results); gelu (s14-results)" in both


def test_a_later_search_that_measured_nothing_leaves_the_earlier_row_and_says_so(tmp_path):
    older = tmp_path / "s12-results.json"
    older.write_text(json.dumps({"problems": [_problem("swiglu", 10.0, 4.0)]}))
    failed = _problem("swiglu", 10.0, 10.0)
    failed["baseline"] = {**failed["baseline"], "status": "rejected"}  # out of memory beside others
    newer = tmp_path / "s19-results.json"
    newer.write_text(json.dumps({"problems": [failed, _problem("gelu", 10.0, 5.0)]}))
    both = _summary(older, newer)
    assert "| swiglu | decode: 10.0 | 2.50x" in both
    assert "measured in: swiglu (s12-results); gelu (s19-results)" in both
    assert "- swiglu: its search in s19-results measured nothing" in both
    alone = _summary(newer)  # with no earlier row, the failed search is what there is
    assert "| swiglu |" in alone and "measured nothing" not in alone
    latest = tmp_path / "s20-results.json"  # measured again after the failed search: no note
    latest.write_text(json.dumps({"problems": [_problem("swiglu", 10.0, 2.0)]}))
    three = _summary(older, newer, latest)
    assert "| swiglu | decode: 10.0 | 5.00x" in three and "measured nothing" not in three
