"""Stage 2 alone, timed from the `workflow_run` event to the follow-up PR, on a CPU machine
whose publishing interpreter has no torch, triton or numpy installed.

A same-repository pull request touching rmsnorm's TARGET is opened in the GitHub API double
(tests/github_double: a real HTTP server over a real git repository); a stage-1 artifact is
serialised by stage 1's own code (tests/stage_two_artifacts.py); `bot publish` runs in a
fresh process of PYTHON, installed as kernel-bot-publish.yml installs it:

    python3 -m venv /tmp/publish-env
    /tmp/publish-env/bin/pip install --require-hashes --only-binary=:all: -r ci/publish.lock
    /tmp/publish-env/bin/pip install --no-deps --no-build-isolation --no-index .
    PYTHONPATH=tests .venv/bin/python benchmarks/stage_two_time.py --python /tmp/publish-env/bin/python

Prints one JSON line: seconds from the event to the PR, requests made, whether torch, triton
or numpy is importable by PYTHON. The double answers in about a millisecond; GitHub takes
100-300 ms a request, which the line's `requests` count lets a reader add.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from github_double import GitHubDouble  # noqa: E402
from stage_two_artifacts import KERNEL_SOURCE, PROBLEM_SOURCE, honest_results  # noqa: E402

REPO = "octo-org/octo-repo"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", required=True, help="the publishing interpreter (no torch)")
    parser.add_argument("--attempts", type=int, default=1, help="timed candidates in the artifact")
    parser.add_argument("--batches", type=int, default=8, help="batches per measurement")
    parser.add_argument("--per-batch", type=int, default=5, help="samples per batch")
    args = parser.parse_args()
    heavy = subprocess.run(
        [
            args.python,
            "-c",
            "import importlib.util as u; print([m for m in ('torch', 'triton', 'numpy') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp, GitHubDouble(Path(tmp) / "github", repo=REPO) as double:
        work = Path(tmp)
        double.repo.commit_files(
            "main", {"problems/rmsnorm.py": PROBLEM_SOURCE.encode(), "kernels/rmsnorm.py": KERNEL_SOURCE.encode()}
        )
        pr = double.repo.open_pull_request("feature/rmsnorm", {"kernels/rmsnorm.py": b"# touched\n"})
        sha = double.repo.head_sha(pr)
        (work / "main").mkdir()
        (work / "main" / "pyproject.toml").write_text("[tool.kernel-bot]\nmin-speedup = 1.05\n")
        (work / "artifact").mkdir()
        (work / "artifact" / "results.json").write_text(
            json.dumps(
                honest_results(slower_attempts=args.attempts - 1, batches=args.batches, per_batch=args.per_batch)
            )
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": tmp,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_EVENT_NAME": "workflow_run",
            "GITHUB_TOKEN": "test-token",
            "GITHUB_EVENT_PATH": str(work / "event.json"),
            "GITHUB_API_URL": double.url,
        }
        began = time.monotonic()
        (work / "event.json").write_text(
            json.dumps(
                {
                    "workflow_run": {
                        "id": 7,  # the stage-1 run: its id is the follow-up commit's trailer
                        "event": "pull_request",
                        "head_sha": sha,
                        "head_branch": pr.head_ref,
                        "head_repository": {"full_name": REPO},
                        "pull_requests": [{"number": pr.number}],
                    },
                    "repository": {"full_name": REPO, "default_branch": "main"},
                }
            )
        )
        proc = subprocess.run(
            [args.python, "-m", "bot", "publish", "--results", str(work / "artifact"), "--repo", str(work / "main")],
            env=env,
            capture_output=True,
            text=True,
        )
        took = time.monotonic() - began
        opened = [p.number for p in double.repo.open_pulls() if p.head_ref == f"kernel-bot/pr-{pr.number}"]
        print(
            json.dumps(
                {
                    "event_to_pr_s": round(took, 2),
                    "attempts": args.attempts,
                    "samples_per_measurement": args.batches * args.per_batch,
                    "rc": proc.returncode,
                    "pr_opened": bool(opened),
                    "requests": len(double.exchanges),
                    "heavy_modules_importable": json.loads(heavy.replace("'", '"')),
                    "stderr_tail": proc.stderr[-500:],
                }
            )
        )


if __name__ == "__main__":
    main()
