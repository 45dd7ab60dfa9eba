"""The Action end to end, on CPU: a labeled-PR event goes through `bot run` (stage 1) and
`bot publish` (stage 2) against the GitHub API double, with real git and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from github_double.openapi import webhook_examples
from github_double.server import GitHubDouble

pytestmark = pytest.mark.timing  # asserts what real timing claims: run alone, not beside other tests

TARGET_REPO = FIXTURES / "target_repo"
REPO = "octo-org/octo-repo"
LABEL = "optimize-kernel"
SLOW = (TARGET_REPO / "kernels" / "row_scale.py").read_text()


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _bot(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd), "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=900
    )


def _checkout(double: GitHubDouble, ref: str, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(double.git.path), str(where)], check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "-q", ref], check=True)
    return where


def _pr_event(double: GitHubDouble, pr, fork: bool) -> dict:
    event = json.loads(json.dumps(next(e for e in webhook_examples("pull_request") if e["action"] == "labeled")))
    head_sha = double.repo.git.resolve(f"refs/pull/{pr.number}/head" if fork else f"refs/heads/{pr.head_ref}")
    base_sha = double.repo.branch_sha("main")
    event["number"] = pr.number
    event["label"]["name"] = LABEL
    p = event["pull_request"]
    p["number"], p["labels"] = pr.number, [{**event["label"], "name": LABEL}]
    p["head"].update(ref=pr.head_ref, sha=head_sha)
    p["head"]["repo"]["full_name"] = "contributor/octo-repo" if fork else REPO
    p["base"].update(ref="main", sha=base_sha)
    p["base"]["repo"]["full_name"] = REPO
    event["repository"]["full_name"] = REPO
    event["repository"]["default_branch"] = "main"
    return event


def _run_event(kind: str, head_branch: str, head_sha: str, pr_number: int | None, head_repo: str = REPO) -> dict:
    event = json.loads(json.dumps(webhook_examples("workflow_run")[0]))
    run = event["workflow_run"]
    run["head_repository"]["full_name"] = head_repo
    run.update(event=kind, head_branch=head_branch, head_sha=head_sha, conclusion="success")
    run["pull_requests"] = (
        [{"number": pr_number, "head": {"ref": head_branch, "sha": head_sha}, "base": {"ref": "main"}}]
        if pr_number
        else []
    )
    event["repository"]["full_name"] = REPO
    event["repository"]["default_branch"] = "main"
    return event


@pytest.fixture
def double(tmp_path):
    with GitHubDouble(tmp_path / "github") as d:
        d.repo.commit_files("main", _files(TARGET_REPO), "Initial kernels")
        yield d


def _stage_one(double, tmp_path, event_name, event, ref, token="test-token", name="s1"):
    ws = _checkout(double, ref, tmp_path / f"ws-{name}")
    (tmp_path / f"{name}.json").write_text(json.dumps(event))
    env = {
        "GITHUB_EVENT_PATH": str(tmp_path / f"{name}.json"),
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_WORKSPACE": str(ws),
        "GITHUB_API_URL": double.url,
        "GITHUB_TOKEN": token,
        "GITHUB_STEP_SUMMARY": str(tmp_path / f"{name}-summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / f"{name}-output.txt"),
    }
    results = tmp_path / f"results-{name}"
    proc = _bot(["run", "--results", str(results), "--device", "cpu", "--exclude", "compile-*"], env, ws)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return results, env


def _stage_two(double, tmp_path, results, event, token="test-token", name="s2"):
    main = _checkout(double, "main", tmp_path / f"main-{name}")
    (tmp_path / f"{name}.json").write_text(json.dumps(event))
    env = {
        "GITHUB_EVENT_PATH": str(tmp_path / f"{name}.json"),
        "GITHUB_EVENT_NAME": "workflow_run",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_WORKSPACE": str(main),
        "GITHUB_API_URL": double.url,
        "GITHUB_TOKEN": token,
    }
    return _bot(["publish", "--results", str(results)], env, main)


def _git_show(double, spec: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={double.git.path}", "show", spec], capture_output=True, text=True, check=True
    ).stdout


def test_labeled_pr_to_follow_up_pr_and_rerun_updates(double, tmp_path):
    pr = double.repo.open_pull_request(
        "feature/row-scale",
        {"kernels/row_scale.py": SLOW.encode() + b"# touched\n"},
        title="Touch row_scale",
        labels=(LABEL,),
    )
    results, env = _stage_one(double, tmp_path, "pull_request", _pr_event(double, pr, fork=False), "feature/row-scale")
    data = json.loads((results / "results.json").read_text())
    assert [p["problem"] for p in data["problems"]] == ["row_scale"]
    best = data["problems"][0]["best"]
    assert best is not None and best["speedup_ci"][0] >= 1.05, data["problems"][0]["attempts"]
    assert (results / "junit.xml").is_file() and "+++ b/kernels/row_scale.py" in (results / "patch.diff").read_text()
    assert "best-speedup=" in Path(env["GITHUB_OUTPUT"]).read_text()
    assert "row_scale" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()

    head_sha = double.repo.branch_sha("feature/row-scale")
    run_event = _run_event("pull_request", "feature/row-scale", head_sha, pr.number)
    proc = _stage_two(double, tmp_path, results, run_event)
    assert proc.returncode == 0, proc.stderr[-4000:]
    follow_ups = [p for p in double.repo.pulls.values() if p.head_ref == f"kernel-bot/pr-{pr.number}"]
    assert len(follow_ups) == 1
    follow = follow_ups[0]
    assert follow.base_ref == "feature/row-scale"  # merges into the triggering PR's branch
    assert _git_show(double, f"kernel-bot/pr-{pr.number}:kernels/row_scale.py") == best["source"]
    assert "x [" in follow.body and "<!-- kernel-bot:report -->" in follow.body
    assert "--device cuda" not in follow.body  # stage 1 measured on a CPU: its command says so
    # The chart lands with the default kernel paths too: the publishing stage drew it itself.
    chart = subprocess.run(
        ["git", f"--git-dir={double.git.path}", "show", f"kernel-bot/pr-{pr.number}:docs/kernel-bot/speedups.png"],
        capture_output=True,
        check=True,
    ).stdout
    assert chart.startswith(b"\x89PNG\r\n") and "docs/kernel-bot/speedups.png)" in follow.body
    comments = [c for c in double.repo.comments.values() if c.issue_number == pr.number]
    assert len(comments) == 1 and "<!-- kernel-bot:sticky -->" in comments[0].body

    proc = _stage_two(double, tmp_path, results, run_event, name="s2-again")  # a re-run
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert len([p for p in double.repo.pulls.values() if p.head_ref == f"kernel-bot/pr-{pr.number}"]) == 1
    assert len([c for c in double.repo.comments.values() if c.issue_number == pr.number]) == 1

    proc = _stage_two(double, tmp_path, results, run_event, token="read-only-token", name="s2-ro")
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "write" in proc.stderr.lower()


def test_fork_pr_gets_the_patch_in_a_comment_and_nothing_is_pushed(double, tmp_path):
    pr = double.repo.open_pull_request(
        "patch-1", {"kernels/row_scale.py": SLOW.encode() + b"# fork\n"}, labels=(LABEL,), fork="contributor/octo-repo"
    )
    results, _ = _stage_one(
        double, tmp_path, "pull_request", _pr_event(double, pr, fork=True), "main", name="fork"
    )  # the fork head is not a branch here
    refs_before = subprocess.run(
        ["git", f"--git-dir={double.git.path}", "for-each-ref"], capture_output=True, text=True
    ).stdout
    head_sha = double.repo.git.resolve(f"refs/pull/{pr.number}/head")
    claimed = json.loads((results / "results.json").read_text())["trigger"]
    assert claimed["pr_number"] == pr.number and claimed["head_sha"] == head_sha
    proc = _stage_two(
        double,
        tmp_path,
        results,
        _run_event("pull_request", "patch-1", head_sha, None, "contributor/octo-repo"),
        name="fork2",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    refs_after = subprocess.run(
        ["git", f"--git-dir={double.git.path}", "for-each-ref"], capture_output=True, text=True
    ).stdout
    assert refs_after == refs_before
    comment = next(c for c in double.repo.comments.values() if c.issue_number == pr.number)
    assert "```diff" in comment.body and "kernels/row_scale.py" in comment.body


def test_nightly_opens_a_pr_against_the_default_branch(double, tmp_path):
    event = json.loads(json.dumps(webhook_examples("workflow_dispatch")[0]))
    event["repository"]["full_name"], event["repository"]["default_branch"] = REPO, "main"
    event["ref"] = "refs/heads/main"
    results, _ = _stage_one(double, tmp_path, "workflow_dispatch", event, "main", name="nightly")
    head_sha = double.repo.branch_sha("main")
    proc = _stage_two(
        double, tmp_path, results, _run_event("workflow_dispatch", "main", head_sha, None), name="nightly2"
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    nightly = [p for p in double.repo.pulls.values() if p.head_ref == "kernel-bot/nightly"]
    assert len(nightly) == 1 and nightly[0].base_ref == "main"
