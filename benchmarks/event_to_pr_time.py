"""From a labeled-PR event to the follow-up PR, timed end to end, on the GPU runner.

A pull request touching one operator (rmsnorm's TARGET, kernels/rmsnorm_triton.py) is opened
in the GitHub API double (tests/github_double: a real HTTP server backed by a real git
repository) and labeled. Stage 1 (`bot run`, search strategy, on the GPU, read-only token)
writes the results directory; stage 2 (`bot publish`, from a `workflow_run` event, write
token) opens the follow-up PR. The clock runs from the event to the follow-up PR's existence.

    PYTHONPATH=.:tests python3 benchmarks/event_to_pr_time.py --out DIR [--device cuda]

A GPU machine without network needs PyGithub and junit-xml as wheels: benchmarks/README.md says how.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from github_double.server import GitHubDouble  # noqa: E402  (tests/ on the path first)

REPO = "octo-org/octo-repo"
LABEL = "optimize-kernel"
TOUCHED = "kernels/rmsnorm_triton.py"
CONFIG = """[project]
name = "example-kernels"
version = "0.0.1"

[tool.kernel-bot]
problems-dir = "problems"
kernel-paths = ["kernels/**"]
time-cap-s = 2
budget-s = 180
timing = "{timing}"
"""


def _tree() -> dict[str, bytes]:
    files = {"pyproject.toml": CONFIG.format(timing=os.environ.get("TIMING", "latency")).encode()}
    for folder in ("problems", "kernels"):
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                files[str(path.relative_to(ROOT))] = path.read_bytes()
    return files


def _bot(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
    # The bot as installed on the runner: this checkout first, then what PYTHONPATH adds (wheels).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd), "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **env}
    if "GIT_EXEC_PATH" in os.environ:  # a git unpacked beside the system's
        full["GIT_EXEC_PATH"] = os.environ["GIT_EXEC_PATH"]
    with log.open("w") as err:  # what the bot prints and its progress, in one log
        proc = subprocess.run(
            [sys.executable, "-m", "bot", *args],
            cwd=cwd,
            env=full,
            stdout=err,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
            check=False,
        )
    if proc.returncode != 0:
        sys.exit(f"bot {args[0]} exited {proc.returncode}; see {log}")


def _clone(double: GitHubDouble, ref: str, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(double.git.path), str(where)], check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "-q", ref], check=True)
    return where


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    with GitHubDouble(out / "github") as double:
        double.repo.commit_files("main", _tree(), "Kernels")
        touched = (ROOT / TOUCHED).read_bytes() + b"# touched by the pull request\n"
        pr = double.repo.open_pull_request(
            "feature/rmsnorm", {TOUCHED: touched}, title="Touch rmsnorm", labels=(LABEL,)
        )
        head_sha, base_sha = double.repo.branch_sha("feature/rmsnorm"), double.repo.branch_sha("main")
        repo = {"full_name": REPO, "default_branch": "main"}
        event = {
            "action": "labeled",
            "number": pr.number,
            "label": {"name": LABEL},
            "repository": repo,
            "pull_request": {
                "number": pr.number,
                "labels": [{"name": LABEL}],
                "head": {"ref": "feature/rmsnorm", "sha": head_sha, "repo": {"full_name": REPO}},
                "base": {"ref": "main", "sha": base_sha, "repo": {"full_name": REPO}},
            },
        }
        (out / "event.json").write_text(json.dumps(event))
        workspace = _clone(double, "feature/rmsnorm", out / "workspace")

        started = time.monotonic()  # the event arrives; the runner has checked out the PR
        _bot(
            ["run", "--results", str(out / "results"), "--device", args.device],
            {
                "GITHUB_EVENT_PATH": str(out / "event.json"),
                "GITHUB_EVENT_NAME": "pull_request",
                "GITHUB_REPOSITORY": REPO,
                "GITHUB_WORKSPACE": str(workspace),
                "GITHUB_API_URL": double.url,
                "GITHUB_TOKEN": "read-only-token",
                "GITHUB_STEP_SUMMARY": str(out / "summary.md"),
                "GITHUB_OUTPUT": str(out / "output.txt"),
            },
            workspace,
            out / "stage1.log",
        )
        stage_one_s = time.monotonic() - started

        run_event = {
            "action": "completed",
            "repository": repo,
            "workflow_run": {
                "id": 7,  # the stage-1 run: its id is the follow-up commit's trailer
                "event": "pull_request",
                "head_branch": "feature/rmsnorm",
                "head_sha": head_sha,
                "conclusion": "success",
                "head_repository": {"full_name": REPO},
                "pull_requests": [
                    {"number": pr.number, "base": {"ref": "main"}, "head": {"ref": "feature/rmsnorm", "sha": head_sha}}
                ],
            },
        }
        (out / "workflow_run.json").write_text(json.dumps(run_event))
        main_ws = _clone(double, "main", out / "main")
        _bot(
            ["publish", "--results", str(out / "results")],
            {
                "GITHUB_EVENT_PATH": str(out / "workflow_run.json"),
                "GITHUB_EVENT_NAME": "workflow_run",
                "GITHUB_REPOSITORY": REPO,
                "GITHUB_WORKSPACE": str(main_ws),
                "GITHUB_API_URL": double.url,
                "GITHUB_TOKEN": "test-token",
            },
            main_ws,
            out / "stage2.log",
        )
        total_s = time.monotonic() - started

        follow = [p for p in double.repo.pulls.values() if p.head_ref == f"kernel-bot/pr-{pr.number}"]
        results = json.loads((out / "results" / "results.json").read_text())
        best = results["problems"][0]["best"] if results["problems"] else None
        summary = {
            "stage_one_s": round(stage_one_s, 1),
            "event_to_follow_up_pr_s": round(total_s, 1),
            "problems": [p["problem"] for p in results["problems"]],
            "best": {k: best[k] for k in ("name", "speedup", "speedup_ci")} if best else None,
            "follow_up_pr": (
                {
                    "number": follow[0].number,
                    "head": follow[0].head_ref,
                    "base": follow[0].base_ref,
                    "body_has_numbers": "x [" in follow[0].body,
                }
                if follow
                else None
            ),
            "environment": results.get("environment"),
        }
        if follow:
            shown = subprocess.run(
                ["git", f"--git-dir={double.git.path}", "show", f"{follow[0].head_ref}:{TOUCHED}"],
                capture_output=True,
                text=True,
                check=False,
            )
            summary["follow_up_branch_holds_best"] = bool(best) and shown.stdout == best["source"]
            (out / "follow_up_body.md").write_text(follow[0].body)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
