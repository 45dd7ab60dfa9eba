"""The GPU-side path (verify, bench, optimize) runs where only torch, triton, numpy and click
are installed: PyGithub, openai, junit-xml, docker, rich and matplotlib are for the GitHub, report
and terminal edges, and the bot's own GitHub edge (bot.github) is not needed either."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import CANDIDATES, PROBLEMS, ROOT

BLOCKER = """
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if (name.split(".")[0] in {"junit_xml", "github", "openai", "docker", "rich", "matplotlib"}
                or name == "bot.github" or name.startswith("bot.github.")):
            raise ModuleNotFoundError(f"No module named {name!r} (absent on the GPU machine)")
sys.meta_path.insert(0, Absent())
from bot.cli.main import main
sys.argv = ["bot", *sys.argv[1:]]
main()
"""


def _bot_without_edges(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def test_verify_and_optimize_need_none_of_the_edge_packages(tmp_path):
    proc = _bot_without_edges(
        "verify", str(PROBLEMS / "scale_add.py"), str(CANDIDATES / "honest.py"), "--device", "cpu", "--json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["accepted"] is True
    proc = _bot_without_edges(
        "optimize",
        str(PROBLEMS / "scale_add.py"),
        "--device",
        "cpu",
        "--exclude",
        "*",
        "--time-cap-s",
        "0.5",  # what is imported, not how long the baseline is timed
        "--json",
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["best"] is None  # every candidate excluded: nothing to pick
    assert (tmp_path / "out" / "results.json").is_file()
