"""`bot publish` runs with torch, triton, docker, openai and the bot's stage 1 packages
(bot.engine, bot.harness, bot.sandbox, ...) unimportable: the job holding the write token
installs none of those libraries, and stage 2 needs none of the bot's code that runs
candidates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib

from conftest import FIXTURES, ROOT
from github_double import GitHubDouble
from stage_two_artifacts import KERNEL_SOURCE, PROBLEM_SOURCE, honest_results

REPO = "octo-org/octo-repo"


def test_publish_opens_the_follow_up_with_heavy_modules_blocked(tmp_path):
    with GitHubDouble(tmp_path / "github", repo=REPO) as double:
        double.repo.commit_files(
            "main", {"problems/rmsnorm.py": PROBLEM_SOURCE.encode(), "kernels/rmsnorm.py": KERNEL_SOURCE.encode()}
        )
        pr = double.repo.open_pull_request("feature/rmsnorm", {"kernels/rmsnorm.py": b"# touched\n"})
        sha = double.repo.head_sha(pr)
        (tmp_path / "main").mkdir()
        (tmp_path / "main" / "pyproject.toml").write_text("[tool.kernel-bot]\nmin-speedup = 1.05\n")
        (tmp_path / "artifact").mkdir()
        (tmp_path / "artifact" / "results.json").write_text(json.dumps(honest_results()))
        event = {
            "workflow_run": {
                "id": 7,
                "event": "pull_request",
                "head_sha": sha,
                "head_branch": pr.head_ref,
                "head_repository": {"full_name": REPO},
                "pull_requests": [{"number": pr.number}],
            },
            "repository": {"full_name": REPO, "default_branch": "main"},
        }
        (tmp_path / "event.json").write_text(json.dumps(event))
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_EVENT_NAME": "workflow_run",
            "GITHUB_TOKEN": "test-token",
            "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
            "GITHUB_API_URL": double.url,
        }
        log = tmp_path / "blocked.log"
        began = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                str(FIXTURES / "stage_two" / "block_heavy_imports.py"),
                str(log),
                "publish",
                "--results",
                str(tmp_path / "artifact"),
                "--repo",
                str(tmp_path / "main"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        took = time.monotonic() - began
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not log.exists(), log.read_text()
        assert [p.head_ref for p in double.repo.open_pulls() if p.head_ref.startswith("kernel-bot/")] == [
            f"kernel-bot/pr-{pr.number}"
        ]
        assert took < 30, f"stage 2 took {took:.1f} s"


def test_the_publish_extra_is_what_the_publish_workflow_installs():
    import yaml

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["publish"]
    names = {r.split(">")[0].split("=")[0].split("[")[0].lower() for r in extra}
    assert names == {"click", "pygithub", "jsonschema", "matplotlib", "numpy"}  # the chart, the re-derivation
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "kernel-bot-publish.yml").read_text())
    steps = workflow["jobs"]["publish"]["steps"]
    install = next(s["run"] for s in steps if s.get("name", "").startswith("Install kernel-bot"))
    assert "torch" not in install and "-r ci/publish.lock" in install and "--no-deps" in install
    locked = {line.split("==")[0] for line in (ROOT / "ci" / "publish.lock").read_text().splitlines() if "==" in line}
    assert "torch" not in locked and "triton" not in locked and names <= locked
