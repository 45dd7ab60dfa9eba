"""bot.github.client through PyGithub, over HTTP, against the GitHub double (a real bare git
repo behind it)."""

from __future__ import annotations

import copy
import subprocess
from dataclasses import replace

import pytest
from github_double import SECONDARY_RATE_LIMIT, SERVER_ERROR, Fault, GitHubDouble, Identity
from github_double.openapi import webhook_examples
from github_double.records import CommentRecord, now
from github_double.session import NO_PAUSES, SleepRecorder, client_for, fast_retry, sample_plan, tiny_png

from bot.core.errors import BotError
from bot.github.client import STICKY_MARKER, GitHubClient, trigger_from_event
from bot.github.ownership import FOLLOW_UP_MARKER

REPO = "octo-org/octo-repo"


@pytest.fixture
def double(tmp_path):
    with GitHubDouble(tmp_path, repo=REPO) as d:
        yield d
    unrouted = [(e.method, e.path) for e in d.exchanges if e.operation_id is None]
    assert not unrouted, f"bot.github.client called operations the double does not implement: {unrouted}"


@pytest.fixture
def source(double):
    """A contributor's same-repository pull request touching a problem file."""
    return double.repo.open_pull_request("feature/softmax", {"problems/softmax.py": b"x = 1\n"}, labels=("kernel-bot",))


def git_show(double: GitHubDouble, spec: str) -> bytes:
    return subprocess.run(["git", "-C", str(double.git.path), "show", spec], check=True, capture_output=True).stdout


def measured_plan(double: GitHubDouble, number: int, base: str, **fields):
    """A follow-up of `base` as measured at its tip now."""
    return sample_plan(number, base, measured_sha=double.repo.branch_sha(base), **fields)


def posts(double: GitHubDouble) -> list[str]:
    return [e.operation_id or "" for e in double.exchanges if e.method != "GET"]


# -- trigger_from_event ------------------------------------------------------------------


def _example(action: str) -> dict:
    return next(e for e in webhook_examples("pull_request") if e["action"] == action)


def test_trigger_from_real_labeled_payload():
    payload = _example("labeled")
    trigger = trigger_from_event("pull_request", payload, "Codertocat/Hello-World")
    pr = payload["pull_request"]
    assert trigger.kind == "pull_request" and trigger.action == "labeled"
    assert trigger.pr_number == pr["number"] == 2
    assert (trigger.base_ref, trigger.base_sha) == (pr["base"]["ref"], pr["base"]["sha"])
    assert (trigger.head_ref, trigger.head_sha) == (pr["head"]["ref"], pr["head"]["sha"])
    assert trigger.head_repo == "Codertocat/Hello-World" and not trigger.fork
    assert trigger.label == payload["label"]["name"] == "bug"
    assert trigger.labels == ("bug",)
    assert trigger.default_branch == "master"


def test_trigger_from_real_synchronize_payload():
    payload = _example("synchronize")
    trigger = trigger_from_event("pull_request", payload, "Codertocat/Hello-World")
    assert (trigger.action, trigger.pr_number, trigger.label) == ("synchronize", 2, None)
    assert trigger.head_sha == payload["pull_request"]["head"]["sha"]


def test_trigger_marks_forks_and_deleted_forks():
    payload = copy.deepcopy(_example("opened"))
    payload["pull_request"]["head"]["repo"]["full_name"] = "contributor/Hello-World"
    assert trigger_from_event("pull_request", payload, "Codertocat/Hello-World").fork
    payload["pull_request"]["head"]["repo"] = None  # GitHub sends null once the fork is deleted
    assert trigger_from_event("pull_request", payload, "Codertocat/Hello-World").fork


def test_trigger_for_schedule_and_dispatch():
    scheduled = trigger_from_event("schedule", {"schedule": "17 3 * * *"}, REPO)
    assert (scheduled.kind, scheduled.repo, scheduled.pr_number) == ("schedule", REPO, None)
    dispatch = webhook_examples("workflow_dispatch")[0]
    trigger = trigger_from_event("workflow_dispatch", dispatch, dispatch["repository"]["full_name"])
    assert trigger.kind == "workflow_dispatch"
    assert trigger.default_branch == dispatch["repository"]["default_branch"]
    built = {
        "inputs": {"problems": "softmax"},
        "ref": "refs/heads/main",
        "repository": {"full_name": REPO, "default_branch": "trunk"},
    }
    assert trigger_from_event("workflow_dispatch", built, REPO).default_branch == "trunk"


@pytest.mark.parametrize(
    "event, payload, words",
    [
        ("push", {}, "unsupported event 'push'"),
        ("pull_request", {"action": "closed"}, "unsupported pull_request action 'closed'"),
        ("pull_request", {"action": "opened", "pull_request": {"number": 1}}, "malformed"),
    ],
)
def test_trigger_rejects_what_it_cannot_handle(event, payload, words):
    with pytest.raises(BotError, match=words):
        trigger_from_event(event, payload, REPO)


# -- publish -----------------------------------------------------------------------------


def test_publish_pushes_one_commit_and_opens_the_pull_request(double, source):
    plan = measured_plan(double, source.number, source.head_ref)
    result = client_for(double).publish(plan, max_open=3)

    assert result.created and not result.updated and result.skipped_reason is None
    assert git_show(double, f"{plan.branch}:kernels/softmax.py") == plan.files[0].content
    assert git_show(double, f"{plan.branch}:problems/softmax.py") == b"x = 1\n"  # base kept
    tip = double.git.read_commit(double.repo.branch_sha(plan.branch))
    assert tip.parents == (double.repo.head_sha(source),)
    assert tip.message == f"{plan.title}\n\nKernel-Bot-Run: 7\nKernel-Bot-Measured: {plan.measured_sha}\n"
    [pr] = double.repo.open_pulls()[1:]
    assert (pr.number, pr.head_ref, pr.base_ref) == (result.pr_number, plan.branch, source.head_ref)
    assert (pr.title, pr.body) == (plan.title, f"{FOLLOW_UP_MARKER}\n{plan.body}")
    assert result.pr_url == f"https://github.com/{REPO}/pull/{pr.number}"


def test_png_is_committed_byte_for_byte(double, source):
    client_for(double).publish(measured_plan(double, source.number, source.head_ref), max_open=3)
    assert git_show(double, "kernel-bot/pr-1:docs/plots/softmax.png") == tiny_png()


def test_second_publish_updates_instead_of_duplicating(double, source):
    client = client_for(double)
    plan = measured_plan(double, source.number, source.head_ref, head_sha=double.repo.head_sha(source))
    first = client.publish(plan, max_open=3)
    first_tip = double.repo.branch_sha(plan.branch)
    again = client.publish(plan, max_open=3)  # the same plan: nothing new to commit
    assert double.repo.branch_sha(plan.branch) == first_tip
    newer = replace(
        plan,
        title="kernel-bot: softmax 1.6x",
        body="now 1.6x",
        comment_body="kernel-bot found a 1.6x faster softmax.",
        files=(replace(plan.files[0], content=b"# v2\n"), plan.files[1]),
    )
    second = client.publish(newer, max_open=3)

    assert first.created and again.updated and second.updated and not second.created
    assert first.pr_number == again.pr_number == second.pr_number
    assert len(double.repo.open_pulls()) == 2  # the source PR and ours
    pr = double.repo.pulls[second.pr_number]
    assert (pr.title, pr.body) == ("kernel-bot: softmax 1.6x", f"{FOLLOW_UP_MARKER}\nnow 1.6x")
    assert git_show(double, f"{plan.branch}:kernels/softmax.py") == b"# v2\n"
    assert double.repo.branch_sha(plan.branch) != first_tip
    [comment] = double.repo.comments.values()
    assert first.comment_id == second.comment_id == comment.id
    assert comment.issue_number == source.number and comment.body.startswith(STICKY_MARKER)
    assert "1.6x" in comment.body
    [run] = double.repo.check_runs.values()  # updated by each re-run, never duplicated
    assert first.check_run_id == second.check_run_id == run.id and run.name == "kernel-bot"


def test_fork_plan_only_comments_with_the_patch(double):
    fork_pr = double.repo.open_pull_request(
        "patch-1", {"problems/softmax.py": b"y = 2\n"}, fork="contributor/octo-repo"
    )
    plan = sample_plan(fork_pr.number, "main", fork=True)
    plan = replace(plan, comment_body=f"Apply with `git apply`:\n```diff\n{plan.patch}```")
    result = client_for(double).publish(plan, max_open=3)

    assert result.pr_number is None and not result.created and "fork" in result.skipped_reason
    assert double.repo.branch_sha(plan.branch) is None
    assert double.git.resolve("refs/heads/patch-1") is None  # the fork's branch never lands here
    assert len(double.repo.pulls) == 1
    [comment] = double.repo.comments.values()
    assert plan.patch in comment.body and comment.issue_number == fork_pr.number
    assert posts(double) == ["issues/create-comment"]


def test_cap_on_open_bot_pull_requests(double, source):
    client = client_for(double)
    for n in (101, 102):
        assert client.publish(
            replace(measured_plan(double, source.number, "main"), branch=f"kernel-bot/pr-{n}", source_pr=None),
            max_open=2,
        ).created
    # A fork PR whose branch happens to look like ours is not ours.
    double.repo.open_pull_request("kernel-bot/x", {"a.py": b"1\n"}, fork="mallory/octo-repo")
    assert sorted(client.open_bot_pull_requests()) == [2, 3]

    capped = client.publish(measured_plan(double, source.number, source.head_ref), max_open=2)
    assert capped.pr_number is None and "cap of 2" in capped.skipped_reason
    assert double.repo.branch_sha("kernel-bot/pr-1") is None  # nothing pushed for a skipped PR
    assert capped.comment_id is not None  # the source PR still hears about the result
    existing = client.publish(
        replace(measured_plan(double, source.number, "main"), branch="kernel-bot/pr-101", title="refreshed"), max_open=2
    )
    assert existing.updated and double.repo.pulls[existing.pr_number].title == "refreshed"


def test_pull_request_files_reads_every_page(double):
    pr = double.repo.open_pull_request("many", {f"problems/p{i}.py": b"1\n" for i in range(5)})
    client = client_for(double, pacing=replace(NO_PAUSES, per_page=2))
    assert sorted(client.pull_request_files(pr.number)) == [f"problems/p{i}.py" for i in range(5)]
    assert sum(e.operation_id == "pulls/list-files" for e in double.exchanges) == 3


def test_sticky_marker_counts_only_in_the_bots_own_comments(double, source):
    stamp = now()
    quoted = f"> {STICKY_MARKER} someone quoting the bot"
    double.repo.comments[1] = CommentRecord(
        1, source.number, quoted, Identity("octocat", 583_231, kind="User"), stamp, stamp
    )
    client_for(double).publish(measured_plan(double, source.number, source.head_ref), max_open=3)
    client_for(double).publish(
        replace(measured_plan(double, source.number, source.head_ref), comment_body="second"), max_open=3
    )
    assert double.repo.comments[1].body == quoted
    [ours] = [c for c in double.repo.comments.values() if c.author.kind == "Bot"]
    assert ours.body == f"{STICKY_MARKER}\nsecond"
    # A personal token posts as a user: naming its login makes that user's comments ours.
    as_octocat = client_for(double, sticky_author="octocat")
    assert (
        as_octocat.publish(
            replace(sample_plan(source.number, "main", fork=True), comment_body="mine"), max_open=3
        ).comment_id
        == 1
    )


# -- failures ----------------------------------------------------------------------------


def test_bad_gateway_twice_then_success(double, source, caplog):
    sleep = SleepRecorder()
    double.fail_next(SERVER_ERROR, times=2)
    result = client_for(double, retry=fast_retry(sleep=sleep)).publish(
        measured_plan(double, source.number, source.head_ref), max_open=3
    )
    assert result.created and double.pending_faults == 0
    assert sleep.delays == [0.01, 0.02]  # exponential backoff from base_delay_s
    assert len(double.repo.open_pulls()) == 2
    assert [r.levelname for r in caplog.records if "502" in r.getMessage()] == ["WARNING"] * 2


@pytest.mark.parametrize("fault", [SECONDARY_RATE_LIMIT, replace(SECONDARY_RATE_LIMIT, status=429)])
def test_secondary_rate_limit_honours_retry_after(double, source, fault):
    sleep = SleepRecorder()
    double.fail_next(fault, times=1, methods=("POST",))
    result = client_for(double, retry=fast_retry(sleep=sleep)).publish(
        measured_plan(double, source.number, source.head_ref), max_open=3
    )
    assert result.created and sleep.delays == [1.0]  # Retry-After: 1 beats the 0.01 s backoff
    assert git_show(double, "kernel-bot/pr-1:kernels/softmax.py").startswith(b"# softmax")


def test_primary_rate_limit_is_not_retried(double, source):
    exhausted = Fault(
        "rate limit",
        403,
        {
            "message": "API rate limit exceeded for installation ID 1.",
            "documentation_url": "https://docs.github.com/rest",
        },
    )
    double.fail_next(exhausted)
    sleep = SleepRecorder()
    with pytest.raises(BotError, match="rate limit exhausted"):
        client_for(double, retry=fast_retry(sleep=sleep)).open_bot_pull_requests()
    assert sleep.delays == []


def test_gives_up_after_max_attempts(double, source):
    double.fail_next(SERVER_ERROR, times=10)
    with pytest.raises(BotError, match=r"kept failing .* after 3 attempts"):
        client_for(double, retry=fast_retry(max_attempts=3)).publish(
            measured_plan(double, source.number, "main"), max_open=3
        )


def test_token_without_write_permission(double, source):
    client = client_for(double, token="read-only-token")
    with pytest.raises(BotError, match=r"cannot push commits: grant `contents: write`"):
        client.publish(measured_plan(double, source.number, source.head_ref), max_open=3)
    with pytest.raises(BotError, match=r"cannot comment on pull requests: grant `pull-requests: write`"):
        client.publish(sample_plan(source.number, "main", fork=True), max_open=3)
    assert not double.repo.comments and double.repo.branch_sha("kernel-bot/pr-1") is None


def test_not_found_on_a_write_names_both_causes(double, source):
    # Fine-grained tokens without a permission get 404 on writes, not 403; so does a missing object.
    double.fail_next(Fault("hidden", 404, {"message": "Not Found", "documentation_url": "x"}), methods=("POST",))
    head_sha = double.repo.head_sha(source)
    plan = replace(sample_plan(source.number, "main", fork=True, head_sha=head_sha), comment_body=None)
    with pytest.raises(BotError) as err:
        client_for(double).publish(plan, max_open=3)
    assert str(err.value) == (
        "GitHub answered 404 'Not Found' while trying to create check runs: it does not "
        "exist, or the token lacks `checks: write` (fine-grained tokens get 404, not 403, "
        "for a missing grant)"
    )


def test_a_missing_pull_request_reads_as_missing(double):
    double.fail_next(Fault("gone", 404, {"message": "Not Found", "documentation_url": "x"}), methods=("GET",))
    with pytest.raises(BotError) as err:
        client_for(double).pull_requests_for_commit("a" * 40)
    assert str(err.value) == (
        f"GitHub answered 404 'Not Found' while trying to list the pull requests of commit "
        f"{'a' * 12}: it does not exist, or this token cannot see it"
    )


def test_bad_credentials(double):
    with pytest.raises(BotError, match="bad credentials"):
        client_for(double, token="expired").open_bot_pull_requests()


@pytest.mark.parametrize("token", ["", None])
def test_missing_token(token):
    with pytest.raises(BotError, match="no GitHub token"):
        GitHubClient(token, REPO)


def test_unsafe_paths_are_refused_before_any_request(double, source):
    plan = replace(
        measured_plan(double, source.number, "main"),
        files=(replace(sample_plan(1, "main").files[0], path="../.github/workflows/x.yml"),),
    )
    with pytest.raises(BotError, match="refusing to write"):
        client_for(double).publish(plan, max_open=3)
    assert posts(double) == []
