"""KernelBench levels in shards: `bot plan --shards N PATHS` splits folders of problems into
balanced shards whose union is every problem exactly once, `bot optimize PATHS --shard K/N`
runs exactly the planned shard, and `bot merge` combines the shards' results."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, ROOT

import bot.engine.loop.pipeline as pipeline
from bot.cli.main import main
from bot.core.results import Results

KERNELBENCH = ROOT.parent / "shared" / "kernelbench"  # KernelBench as it ships, beside the checkout
LEVELS = [KERNELBENCH / "level1", KERNELBENCH / "level2"]
SMALL = [FIXTURES / "kernelbench" / "level1", FIXTURES / "kernelbench" / "level2"]
needs_kernelbench = pytest.mark.skipif(
    not all(level.is_dir() for level in LEVELS), reason=f"KernelBench levels 1 and 2 are not at {KERNELBENCH}"
)


def _plan(shards: int, paths: list[Path]) -> list[dict]:
    result = CliRunner().invoke(main, ["plan", "--shards", str(shards), "--json", *map(str, paths)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["include"]


@needs_kernelbench
@pytest.mark.parametrize("shards", [1, 3, 4, 8, 16, 200, 250])
def test_levels_1_and_2_split_into_balanced_shards_that_cover_every_problem_once(shards):
    files = sorted(str(p) for level in LEVELS for p in level.glob("*.py"))
    assert len(files) == 200
    plan = _plan(shards, LEVELS)
    listed = [path for entry in plan for path in entry["problems"]]
    assert Counter(listed) == Counter(files)  # every problem, exactly once
    assert len(plan) == min(shards, 200)  # empty shards are left out of the matrix
    assert [e["shard"] for e in plan] == [f"{k}/{shards}" for k in range(1, len(plan) + 1)]
    sizes = [len(e["problems"]) for e in plan]
    assert max(sizes) - min(sizes) <= 1  # one shape each, no TARGET: equal costs, equal counts


@needs_kernelbench
def test_optimize_runs_exactly_the_shard_the_plan_names(monkeypatch):
    """The shard `bot optimize` takes, seen where it hands its problems to the engine (no run)."""
    taken: list[list[str]] = []

    def record(problems, options, gpus, jobs, out, progress, trigger=None):
        taken.append([str(p.path) for p in problems])
        return []

    monkeypatch.setattr(pipeline, "optimize_all", record)
    plan = _plan(4, LEVELS)
    for k in range(1, 5):
        # The files in another order, and a folder as well as its files: the same shard.
        paths = [str(LEVELS[1]), *sorted(map(str, LEVELS[0].glob("*.py")), reverse=True), str(LEVELS[0])]
        result = CliRunner().invoke(main, ["optimize", *paths, "--shard", f"{k}/4", "--device", "cpu"])
        assert result.exit_code == 0, result.output
        assert f"shard {k}/4: 50 of 200 problem(s)" in result.stderr
    assert [sorted(t) for t in taken] == [sorted(e["problems"]) for e in plan]


def test_a_bad_shard_or_path_is_refused_before_any_work(tmp_path):
    for shard in ("0/2", "3/2", "x"):
        result = CliRunner().invoke(main, ["optimize", str(SMALL[0]), "--shard", shard, "--device", "cpu"])
        assert result.exit_code == 2 and "expected K/N with 1 <= K <= N" in result.stderr, result.output
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["plan", "--shards", "2", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "no problem files" in result.stderr
    result = CliRunner().invoke(main, ["optimize", str(tmp_path / "missing.py"), "--device", "cpu"])
    assert result.exit_code == 2 and "no such problem file or folder" in result.stderr


def test_shards_of_kernelbench_fixtures_run_and_merge_into_one_results_directory(tmp_path):
    """Real runs of the small KernelBench-format fixtures (the eager baseline only), three
    shards of two problems, one of them empty, merged and read by the metrics script."""
    plan = _plan(3, SMALL)
    assert len(plan) == 2 and sorted(p for e in plan for p in e["problems"]) == sorted(
        str(p.relative_to(ROOT)) for level in SMALL for p in level.glob("*.py")
    )
    outs = []
    for k in (1, 2, 3):
        out = tmp_path / f"shard{k}"
        done = subprocess.run(
            [sys.executable, "-m", "bot", "optimize", *map(str, SMALL), "--shard", f"{k}/3", "--device", "cpu"]
            + ["--exclude", "*", "--replicas", "1", "--time-cap-s", "1", "--no-cache", "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outs.append(out)
    ran = [
        [p.problem_path for p in Results.from_json(json.loads((o / "results.json").read_text())).problems] for o in outs
    ]
    assert ran[2] == [] and [Path(p).relative_to(ROOT).as_posix() for r in ran[:2] for p in r] == [
        p for e in plan for p in e["problems"]
    ]
    merged_dir = tmp_path / "merged"
    result = CliRunner().invoke(main, ["merge", *map(str, outs), "--out", str(merged_dir), "--repo", str(ROOT)])
    assert result.exit_code == 0, result.output
    merged = Results.from_json(json.loads((merged_dir / "results.json").read_text()))
    assert merged.shards == 3
    assert sorted(p.problem for p in merged.problems) == ["12_Gemm_Multiply_LeakyReLU", "19_ReLU"]
    assert all(not p.failed and p.time_split is not None for p in merged.problems)
    table = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "kernelbench.py"), str(merged_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert table.returncode == 0, table.stderr
    assert "level1" in table.stdout and "level2" in table.stdout
