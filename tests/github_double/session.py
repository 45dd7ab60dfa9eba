"""Helpers to drive `bot.github.client` against the double, and one scripted session touching
every route."""

from __future__ import annotations

import contextlib
import struct
import zlib
from dataclasses import replace
from typing import Any

from github import Auth, Github

from bot.core.domain import CheckRunPlan, FileChange, PullRequestPlan
from bot.core.errors import BotError
from bot.github.client import GitHubClient
from bot.github.client_settings import GitHubPacing, GitHubRetry

from .server import SECONDARY_RATE_LIMIT, SERVER_ERROR, GitHubDouble


class SleepRecorder:
    """Stands in for time.sleep: records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


NO_PAUSES = GitHubPacing(seconds_between_requests=None, seconds_between_writes=None)


def fast_retry(**fields: Any) -> GitHubRetry:
    """Retries from a 10 ms first delay that record their waits; `fields` override the rest."""
    return GitHubRetry(**{"sleep": SleepRecorder(), "base_delay_s": 0.01, **fields})


def client_for(
    double: GitHubDouble,
    token: str = "test-token",
    *,
    retry: GitHubRetry | None = None,
    pacing: GitHubPacing = NO_PAUSES,
    sticky_author: str | None = None,
) -> GitHubClient:
    """A client without PyGithub's pauses between requests, and with a recorded sleep."""
    return GitHubClient(
        token, double.repo_name, double.url, retry=retry or fast_retry(), pacing=pacing, sticky_author=sticky_author
    )


def tiny_png() -> bytes:
    """A valid 1x1 PNG: its signature byte 0x89 is not UTF-8, so it must travel as base64."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x80\x00"))
        + chunk(b"IEND", b"")
    )


def sample_plan(
    source_pr: int | None,
    base: str,
    *,
    head_sha: str | None = None,
    fork: bool = False,
    speedup: str = "1.42x",
    measured_sha: str | None = None,
) -> PullRequestPlan:
    """A follow-up of `base`, measured at `measured_sha` (a push needs it) by run 7."""
    kernel = f"# softmax, {speedup} faster\nimport torch\n".encode()
    files = () if fork else (FileChange("kernels/softmax.py", kernel), FileChange("docs/plots/softmax.png", tiny_png()))
    check = (
        None
        if head_sha is None
        else CheckRunPlan("kernel-bot", head_sha, "success", f"softmax: {speedup}", f"Speedup {speedup} (95% CI ...)")
    )
    return PullRequestPlan(
        repo="octo-org/octo-repo",
        branch=f"kernel-bot/pr-{source_pr}",
        base=base,
        title=f"kernel-bot: softmax {speedup} faster",
        body=f"Measured speedup: {speedup}",
        files=files,
        patch="--- a/kernels/softmax.py\n+++ b/kernels/softmax.py\n",
        source_pr=source_pr,
        comment_body=f"kernel-bot found a {speedup} faster softmax.",
        fork=fork,
        check_run=check,
        measured_sha=measured_sha,
        run_id=7,
    )


def scripted_session(double: GitHubDouble) -> None:
    """Every route of the double, successes and failures, as the bot (and PyGithub) call them."""
    repo = double.repo
    source = repo.open_pull_request(
        "feature/softmax", {f"problems/op{i}.py": b"x = 1\n" for i in range(3)}, labels=("kernel-bot",)
    )
    fork = repo.open_pull_request("patch-1", {"problems/fork.py": b"y = 2\n"}, fork="contributor/octo-repo")
    head_sha = repo.head_sha(source)
    assert head_sha is not None
    client = client_for(double, pacing=replace(NO_PAUSES, per_page=2))  # 3 files on 2 pages: exercises Link pagination
    client.pull_request_files(source.number)
    assert client.pull_request(source.number) is not None and client.pull_request(999) is None
    assert [p.number for p in client.pull_requests_for_commit(head_sha)] == [source.number]
    assert client.file_at("problems/op0.py", head_sha) == b"x = 1\n"
    assert client.file_at("problems/missing.py", head_sha) is None
    plan = sample_plan(source.number, source.head_ref, head_sha=head_sha, measured_sha=head_sha)
    client.publish(plan, max_open=3)  # blobs, tree, commit, create ref, create PR, comment, check run
    client.publish(replace(plan, title="kernel-bot: softmax 1.50x faster"), max_open=3)  # updates
    client.publish(replace(plan, files=(plan.files[0],)), max_open=3)  # new commit: ref update (tip read first)
    run = repo.record_run("pull_request", head_sha, source.head_ref, pull_requests=(source.number,))
    assert client.workflow_run(run.id).head_sha == head_sha
    client.publish(sample_plan(fork.number, repo.default_branch, fork=True), max_open=3)

    double.fail_next(SERVER_ERROR, times=2)
    client.open_bot_pull_requests()
    double.fail_next(SECONDARY_RATE_LIMIT, times=1, methods=("POST",))
    client.publish(replace(plan, comment_body="rate limited once"), max_open=3)

    for token in ("read-only-token", "wrong-token"):
        with contextlib.suppress(BotError):
            client_for(double, token=token).publish(
                sample_plan(99, "main", measured_sha=repo.branch_sha("main")), max_open=3
            )

    # Operations the double serves beyond what publish needs, read through PyGithub itself.
    gh = Github(
        auth=Auth.Token("test-token"),
        base_url=double.url,
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )
    remote = gh.get_repo(double.repo_name)
    remote.get_git_tree(remote.get_git_commit(head_sha).tree.sha, recursive=True)
    remote.get_pull(source.number).title  # noqa: B018 - a lazy object: reading it sends the GET
