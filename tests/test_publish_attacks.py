"""`bot publish` against the GitHub double, as an attacker who wrote the stage-1 artifact:
each attack is refused with its exact message and nothing is written (or, for forged
numbers, only the failed check run that says so)."""

from __future__ import annotations

import copy
import itertools
import json
import subprocess

import pytest
from github_double import Fault, GitHubDouble
from github_double import payloads as P
from github_double.session import client_for
from stage_two_artifacts import FAST_SOURCE, KERNEL_SOURCE, PROBLEM_SOURCE, honest_results

from bot.core.errors import BotError
from bot.github.stage_two import publish_stage_two

REPO = "octo-org/octo-repo"


@pytest.fixture
def double(tmp_path):
    with GitHubDouble(tmp_path / "github", repo=REPO) as d:
        d.repo.commit_files(
            "main",
            {"problems/rmsnorm.py": PROBLEM_SOURCE.encode(), "kernels/rmsnorm.py": KERNEL_SOURCE.encode()},
            "kernels",
        )
        yield d


@pytest.fixture
def root(tmp_path):
    """The default-branch checkout stage 2 runs in: its config is the trusted one."""
    path = tmp_path / "main"
    path.mkdir()
    (path / "pyproject.toml").write_text("[tool.kernel-bot]\nmin-speedup = 1.05\n")
    return path


_RUN_IDS = itertools.count(9_000)


def run_event(
    head_sha: str,
    head_branch: str,
    pr_numbers: tuple[int, ...] = (),
    head_repo: str | None = REPO,
    event: str = "pull_request",
) -> dict:
    return {
        "workflow_run": {
            "id": next(_RUN_IDS),
            "path": f".github/workflows/{'optimize-kernel' if event == 'pull_request' else 'nightly'}.yml",
            "event": event,
            "head_sha": head_sha,
            "head_branch": head_branch,
            "head_repository": None if head_repo is None else {"full_name": head_repo},
            "pull_requests": [{"number": n} for n in pr_numbers],
            "conclusion": "success",
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


_RUNS = itertools.count()


def publish(double, tmp_path, root, results: dict, event: dict | None, run_id=None, client=None) -> list[str]:
    """`bot publish` from a workflow_run `event`, or by hand (`event` None) on `--run-id run_id`."""
    name = str(next(_RUNS))
    art = tmp_path / f"artifact-{name}"
    art.mkdir()
    (art / "results.json").write_text(json.dumps(results))
    environ = {"GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": "test-token", "GITHUB_API_URL": double.url}
    if event is not None:
        (tmp_path / f"event-{name}.json").write_text(json.dumps(event))
        environ.update(GITHUB_EVENT_NAME="workflow_run", GITHUB_EVENT_PATH=str(tmp_path / f"event-{name}.json"))
    said: list[str] = []
    publish_stage_two(art, root, said.append, environ, client=client or client_for(double), run_id=run_id)
    return said


def snapshot(double: GitHubDouble) -> tuple:
    refs = subprocess.run(
        ["git", f"--git-dir={double.git.path}", "for-each-ref"], capture_output=True, text=True, check=True
    ).stdout
    return (
        refs,
        sorted((p.number, p.title, p.state, p.body) for p in double.repo.pulls.values()),
        sorted((c.id, c.issue_number, c.body) for c in double.repo.comments.values()),
        sorted(double.repo.check_runs),
    )


def writes(double: GitHubDouble, start: int = 0) -> list[str]:
    """The writes the double answered, from its `start`-th exchange on."""
    return [e.operation_id or e.path for e in double.exchanges[start:] if e.method != "GET"]


def refused(double, tmp_path, root, results, event, message: str, run_id=None) -> None:
    before, start = snapshot(double), len(double.exchanges)
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, event, run_id)
    assert str(err.value) == message
    assert writes(double, start) == [] and snapshot(double) == before


def same_repo_pr(double, files: dict[str, bytes] | None = None):
    pr = double.repo.open_pull_request(
        "feature/rmsnorm",
        files or {"kernels/rmsnorm.py": b"# touched\n" + KERNEL_SOURCE.encode()},
        labels=("kernel-bot",),
    )
    return pr, double.repo.head_sha(pr)


# -- the honest path, and re-runs ------------------------------------------------------------


def test_honest_artifact_opens_one_follow_up_and_a_rerun_duplicates_nothing(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    event = run_event(sha, pr.head_ref, (pr.number,))
    results = honest_results()
    said = publish(double, tmp_path, root, results, event)
    follow = [p for p in double.repo.pulls.values() if p.head_ref == f"kernel-bot/pr-{pr.number}"]
    assert len(follow) == 1 and follow[0].base_ref == "feature/rmsnorm" and said[0].startswith("kernel-bot: opened")
    tip = double.repo.branch_sha(f"kernel-bot/pr-{pr.number}")
    show = subprocess.run(
        ["git", f"--git-dir={double.git.path}", "show", f"{tip}:kernels/rmsnorm.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert show == FAST_SOURCE and f"{results['problems'][0]['best']['speedup']:.2f}x faster" in follow[0].title
    publish(double, tmp_path, root, honest_results(), event)
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") == tip  # no new commit
    assert len([p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]) == 1
    assert len([c for c in double.repo.comments.values() if c.issue_number == pr.number]) == 1
    assert len(double.repo.check_runs) == 1


def test_a_failure_between_push_and_pull_request_is_repaired_by_a_rerun(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    event = run_event(sha, pr.head_ref, (pr.number,))
    double.fail_next(Fault("validation", 422, P.error(422, "Validation Failed")), operation="pulls/create")
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, honest_results(), event)
    assert str(err.value) == "GitHub refused to create pull requests: GitHub answered 422 'Validation Failed'"
    tip = double.repo.branch_sha(f"kernel-bot/pr-{pr.number}")
    assert tip is not None and not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    publish(double, tmp_path, root, honest_results(), event)
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") == tip
    assert len([p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]) == 1


def test_a_branch_created_before_a_bad_gateway_is_found_again_by_the_retry(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    lost = Fault("bad gateway after the write", 502, {"message": "Server Error"}, carried_out=True)
    double.fail_next(lost, operation="git/create-ref")
    said = publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)))
    assert said[0].startswith("kernel-bot: opened")
    tip = double.repo.branch_sha(f"kernel-bot/pr-{pr.number}")
    assert double.git.read_commit(tip).parents == (sha,) and len(_follow_ups(double)) == 1
    assert writes(double).count("git/create-ref") == 1  # the retry found its own commit: up to date


# -- identity: from the API, never from the artifact ---------------------------------------


def _other_contributor_pr(double):
    """PR #n with a follow-up branch of its own: the target of the attacks."""
    victim, _ = same_repo_pr(double)
    double.repo.commit_files(f"kernel-bot/pr-{victim.number}", {"kernels/rmsnorm.py": b"# earlier follow-up\n"})
    return victim


def _claiming(results: dict, **fields) -> dict:
    claimed = copy.deepcopy(results)
    claimed["trigger"].update(fields)
    return claimed


def _run_says(event: dict, field: str, stated, actual: str) -> str:
    run = event["workflow_run"]
    return (
        f"the results' trigger.{field} is {str(stated)!r}, but GitHub's run {run['id']} ({run['path']}) "
        f"says {actual}; nothing is published"
    )


@pytest.mark.parametrize("deleted", [False, True])
def test_a_fork_artifact_claiming_another_pr_is_refused_its_own_gets_a_comment(double, tmp_path, root, deleted):
    victim = _other_contributor_pr(double)
    fork = double.repo.open_pull_request(
        "main",
        {"kernels/rmsnorm.py": b"# fork\n" + KERNEL_SOURCE.encode()},
        fork="attacker/octo-repo",
        labels=("kernel-bot",),
    )
    if deleted:
        double.repo.delete_fork(fork)
    sha = double.repo.head_sha(fork)
    event = run_event(sha, "main", (), None if deleted else "attacker/octo-repo")
    own = _claiming(honest_results(), pr_number=fork.number, head_sha=sha, head_ref="main")
    claims_victim = _claiming(own, pr_number=victim.number)
    refused(
        double, tmp_path, root, claims_victim, event, _run_says(event, "pr_number", victim.number, f"'{fork.number}'")
    )
    claims_upstream = _claiming(own, head_repo=REPO)
    said = "nothing" if deleted else "'attacker/octo-repo'"
    refused(double, tmp_path, root, claims_upstream, event, _run_says(event, "head_repo", REPO, said))
    # The honest twin: the fork's artifact naming its own run gets the patch on its own PR.
    refs_before = snapshot(double)[0]
    publish(double, tmp_path, root, _claiming(own, head_repo="attacker/octo-repo"), event)
    assert snapshot(double)[0] == refs_before  # no branch pushed or moved
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    assert [c.issue_number for c in double.repo.comments.values()] == [fork.number]
    body = next(iter(double.repo.comments.values())).body
    assert "```diff" in body and "+++ b/kernels/rmsnorm.py" in body


def test_a_run_whose_commit_has_no_open_pull_request_is_refused(double, tmp_path, root):
    fork = double.repo.open_pull_request("main", {"kernels/rmsnorm.py": b"# fork\n"}, fork="attacker/octo-repo")
    fork.state = "closed"
    sha = double.repo.head_sha(fork)
    refused(
        double,
        tmp_path,
        root,
        honest_results(),
        run_event(sha, "main", (), "attacker/octo-repo"),
        f"no open pull request in {REPO} has head commit {sha[:12]} from attacker/octo-repo "
        f"(found: #{fork.number} (closed, head {sha[:12]} from attacker/octo-repo)); nothing is published",
    )


def test_a_missing_pull_request_is_named_as_missing_not_as_a_permission(double, tmp_path, root):
    _, sha = same_repo_pr(double)
    refused(
        double,
        tmp_path,
        root,
        honest_results(),
        run_event(sha, "feature/rmsnorm", (42,)),
        f"pull request #42 named by the workflow run does not exist in {REPO}",
    )


def test_a_nightly_run_from_another_branch_publishes_nothing(double, tmp_path, root):
    _, sha = same_repo_pr(double)
    refused(
        double,
        tmp_path,
        root,
        honest_results(),
        run_event(sha, "feature/rmsnorm", event="workflow_dispatch"),
        f"a workflow_dispatch run on {REPO}:feature/rmsnorm, not on {REPO}'s default branch 'main': "
        "nothing is published",
    )


# -- identity by hand: the run is named, everything else is read from GitHub -------------------


def _nightly(results: dict, **fields) -> dict:
    """An artifact of a nightly sweep (stage 1 records only the kind and repository)."""
    return _claiming(results, kind="schedule", repo=REPO, default_branch="main", **fields)


def _follow_ups(double, base: str | None = None) -> list:
    return [
        p
        for p in double.repo.pulls.values()
        if p.head_ref.startswith("kernel-bot/") and (base is None or p.base_ref == base)
    ]


def test_publish_by_hand_needs_the_run_id(double, tmp_path, root):
    refused(
        double,
        tmp_path,
        root,
        _nightly(honest_results()),
        None,
        "bot publish outside a workflow_run event needs --run-id: the id of the workflow run whose "
        "artifact this is (its trigger, commit and branch are read from GitHub)",
    )


def test_bot_publish_takes_the_run_id_on_its_command_line(double, tmp_path, root):
    from click.testing import CliRunner

    from bot.cli.main import main

    (tmp_path / "art").mkdir()
    (tmp_path / "art" / "results.json").write_text(json.dumps(_nightly(honest_results())))
    env = {"GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": "test-token", "GITHUB_API_URL": double.url}
    env.update(GITHUB_EVENT_NAME=None, GITHUB_EVENT_PATH=None, GITHUB_WORKSPACE=None)
    args = ["publish", "--results", str(tmp_path / "art"), "--repo", str(root)]
    for extra, words in (
        ([], "error: bot publish outside a workflow_run event needs --run-id"),
        (["--run-id", "0"], "Invalid value for '--run-id'"),
        (["--run-id", "4242"], "error: GitHub answered 404 'Not Found' while trying to read workflow run 4242"),
    ):
        result = CliRunner().invoke(main, args + extra, env=env)
        assert result.exit_code == 2 and words in result.stderr, (extra, result.output)
    assert writes(double) == []
    run = double.repo.record_run(
        "schedule", double.repo.branch_sha("main"), "main", path=".github/workflows/nightly.yml"
    )
    result = CliRunner().invoke(main, [*args, "--run-id", str(run.id)], env=env)
    assert result.exit_code == 0 and "kernel-bot: opened" in result.stdout, result.output


def test_a_forks_artifact_claiming_a_nightly_run_publishes_nothing_by_hand(double, tmp_path, root):
    main = double.repo.branch_sha("main")
    nightly = double.repo.record_run("schedule", main, "main", path=".github/workflows/nightly.yml")
    publish(double, tmp_path, root, _nightly(honest_results()), None, nightly.id)  # yesterday's follow-up
    (earlier,) = _follow_ups(double, "main")
    fork = double.repo.open_pull_request(
        "main",
        {"problems/rmsnorm.py": _declaring("kernels/fork_only.py"), "kernels/fork_only.py": KERNEL_SOURCE.encode()},
        fork="attacker/octo-repo",
    )
    fork_sha = double.repo.head_sha(fork)
    fork_run = double.repo.record_run("pull_request", fork_sha, "main", head_repo="attacker/octo-repo")
    forged = _nightly(honest_results(target="kernels/fork_only.py"), head_sha=fork_sha, head_ref="main")
    kind = f"the results' trigger.kind is 'schedule', but GitHub's run {fork_run.id} ({fork_run.path}) says "
    refused(double, tmp_path, root, forged, None, kind + "'pull_request'; nothing is published", fork_run.id)
    refused(
        double,
        tmp_path,
        root,
        forged,
        None,
        f"the results' trigger.head_sha is {fork_sha!r}, but GitHub's run {nightly.id} ({nightly.path}) "
        f"says {main!r}; nothing is published",
        nightly.id,
    )
    refused(  # stating no commit: the nightly's own commit is read, and it declares another TARGET
        double,
        tmp_path,
        root,
        _claiming(forged, head_sha=None),
        None,
        "rmsnorm: the results name target 'kernels/fork_only.py', but problems/rmsnorm.py declares TARGET "
        f"'kernels/rmsnorm.py' at {main[:12]}; nothing is published",
        nightly.id,
    )
    assert _follow_ups(double, "main") == [earlier] and double.repo.branch_sha("kernel-bot/fork_only") is None


def test_publish_by_hand_reads_the_named_run_and_refuses_a_failed_or_mismatched_one(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    failed = double.repo.record_run("pull_request", sha, pr.head_ref, pull_requests=(pr.number,), conclusion="failure")
    results = _claiming(honest_results(), repo=REPO, pr_number=pr.number, head_sha=sha, head_ref=pr.head_ref)
    message = f"run {failed.id} concluded 'failure', not 'success': nothing is published"
    refused(double, tmp_path, root, results, None, message, failed.id)
    event = run_event(sha, pr.head_ref, (pr.number,))
    message = f"--run-id {failed.id} is not the run of this workflow_run event ({event['workflow_run']['id']})"
    refused(double, tmp_path, root, results, event, message, failed.id)
    run = double.repo.record_run("pull_request", sha, pr.head_ref, pull_requests=(pr.number,))
    said = publish(double, tmp_path, root, _claiming(results, head_repo=REPO), None, run.id)
    (follow,) = _follow_ups(double)
    assert said[0] == f"kernel-bot: opened https://github.com/{REPO}/pull/{follow.number}"
    tip = double.git.read_commit(double.repo.branch_sha(follow.head_ref))
    assert tip.parents == (sha,) and f"\n\nKernel-Bot-Run: {run.id}\nKernel-Bot-Measured: {sha}\n" in tip.message


# -- pushes: onto what was measured, never over a commit or pull request the bot did not make --


def _moved(double, branch: str, files: dict[str, bytes | None]) -> tuple[str, str]:
    """(measured tip, new tip) of `branch` after a human pushes `files` onto it."""
    measured = double.repo.branch_sha(branch)
    return measured, double.repo.commit_files(branch, files, "A newer change")


@pytest.mark.parametrize(
    "files,changed",
    [
        ({"kernels/rmsnorm.py": b"# a newer kernel\n"}, "kernels/rmsnorm.py"),
        ({"kernels/rmsnorm.py": None}, "kernels/rmsnorm.py"),  # deleted since
        ({"problems/rmsnorm.py": PROBLEM_SOURCE.encode() + b"# stricter\n"}, "problems/rmsnorm.py"),
    ],
)
def test_a_nightly_whose_base_moved_over_what_it_measured_is_refused(double, tmp_path, root, files, changed):
    measured, tip = _moved(double, "main", files)
    event = run_event(measured, "main", event="schedule")
    refused(
        double,
        tmp_path,
        root,
        _nightly(honest_results()),
        event,
        f"main moved from {measured[:12]} (measured) to {tip[:12]}, and {changed} changed in between: "
        f"the numbers are of {measured[:12]}, so nothing is published (the next run measures {tip[:12]})",
    )


def test_a_nightly_whose_base_moved_elsewhere_is_built_on_the_new_tip_and_says_so(double, tmp_path, root):
    measured, tip = _moved(double, "main", {"README.md": b"# newer\n"})
    said = publish(double, tmp_path, root, _nightly(honest_results()), run_event(measured, "main", event="schedule"))
    note = (
        f"main moved from {measured[:12]} (measured) to {tip[:12]}; kernels/rmsnorm.py, problems/rmsnorm.py "
        f"unchanged in between, so the follow-up is built on {tip[:12]}"
    )
    assert f"kernel-bot: {note}" in said
    (follow,) = _follow_ups(double, "main")
    head = double.repo.branch_sha("kernel-bot/nightly")
    assert double.git.read_commit(head).parents == (tip,) and follow.body.endswith(f"\n\n{note}.")
    assert double.git.git("show", f"{head}:README.md") == b"# newer\n"  # the newer change kept
    assert double.git.git("show", f"{head}:kernels/rmsnorm.py").decode() == FAST_SOURCE


def _moving_client(double, pr, files: dict[str, bytes]):
    """A client for which the contributor pushes `files` after stage 2 read the head, before it writes."""
    client = client_for(double)
    real = client.publish

    def moving(plan, max_open):
        _moved(double, pr.head_ref, files)
        return real(plan, max_open)

    client.publish = moving
    return client


def test_a_pr_head_that_moves_over_the_target_during_publish_is_refused(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    client = _moving_client(double, pr, {"kernels/rmsnorm.py": b"# pushed meanwhile\n"})
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)), client=client)
    tip = double.repo.head_sha(pr)
    assert str(err.value) == (
        f"feature/rmsnorm moved from {sha[:12]} (measured) to {tip[:12]}, and kernels/rmsnorm.py changed "
        f"in between: the numbers are of {sha[:12]}, so nothing is published (the next run measures {tip[:12]})"
    )
    assert writes(double) == [] and not double.repo.comments and not double.repo.check_runs
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") is None


def test_a_pr_head_that_moves_elsewhere_during_publish_gets_the_follow_up_on_its_new_head(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    client = _moving_client(double, pr, {"kernels/helpers.py": b"x = 2\n"})
    said = publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)), client=client)
    tip = double.repo.head_sha(pr)
    moved = f"kernel-bot: feature/rmsnorm moved from {sha[:12]} (measured) to {tip[:12]};"
    assert any(line.startswith(moved) for line in said)
    assert double.git.read_commit(double.repo.branch_sha(f"kernel-bot/pr-{pr.number}")).parents == (tip,)


def _nightly_event(double) -> dict:
    return run_event(double.repo.branch_sha("main"), "main", event="schedule")


def _not_the_bots(branch: str, tip: str, first_line: str) -> str:
    return (
        f"branch {branch} ends in commit {tip[:12]} ({first_line!r}, committed by octocat), which kernel-bot did "
        "not write (no `Kernel-Bot-Run:` trailer from its account): it is not overwritten and nothing is "
        "published; merge or close its pull request and delete the branch to let kernel-bot start it afresh"
    )


@pytest.mark.parametrize("fix_up", ["on top", "amended"])
def test_a_maintainers_fix_up_on_the_nightly_branch_is_not_force_pushed_away(double, tmp_path, root, fix_up):
    publish(double, tmp_path, root, _nightly(honest_results()), _nightly_event(double))
    branch = "kernel-bot/nightly"
    ours = double.git.read_commit(double.repo.branch_sha(branch))
    if fix_up == "on top":
        message = "Fix the kernel's docstring"
        double.repo.commit_files(branch, {"kernels/rmsnorm.py": FAST_SOURCE.encode() + b"# fixed\n"}, message)
    else:  # the bot's message and trailer kept, the maintainer now its committer
        message = ours.message.splitlines()[0]
        amended = double.repo.commit_files(
            branch, {"kernels/rmsnorm.py": b"# fixed\n"}, ours.message, parent=ours.parents[0]
        )
        double.git.update_ref(f"refs/heads/{branch}", amended)
    tip = double.repo.branch_sha(branch)
    refused(
        double,
        tmp_path,
        root,
        _nightly(honest_results()),
        _nightly_event(double),
        _not_the_bots(branch, tip, message),
    )


def test_the_nightly_branch_is_rebuilt_over_the_bots_own_commit(double, tmp_path, root):
    publish(double, tmp_path, root, _nightly(honest_results()), _nightly_event(double))
    first = double.repo.branch_sha("kernel-bot/nightly")
    newer = double.repo.commit_files("main", {"README.md": b"# newer\n"})
    publish(double, tmp_path, root, _nightly(honest_results(speedup_factor=2.5)), _nightly_event(double))
    rebuilt = double.repo.branch_sha("kernel-bot/nightly")
    assert rebuilt != first and double.git.read_commit(rebuilt).parents == (newer,)
    assert len(_follow_ups(double, "main")) == 1


def test_a_human_branch_named_like_the_follow_up_is_never_touched(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    branch = f"kernel-bot/pr-{pr.number}"
    human_tip = double.repo.commit_files(branch, {"notes.md": b"mine\n"}, "My own work", parent=sha)
    event = run_event(sha, pr.head_ref, (pr.number,))
    refused(double, tmp_path, root, honest_results(), event, _not_the_bots(branch, human_tip, "My own work"))
    theirs = double.repo.open_pull_request(branch, {"notes.md": b"mine, v2\n"}, title="Human work", body="Mine")
    message = (
        f"pull request #{theirs.number} from {branch} was not opened by kernel-bot (by octocat, without its "
        "marker): its branch, title and body are left alone and nothing is published"
    )
    refused(double, tmp_path, root, honest_results(), event, message)
    assert (theirs.title, theirs.body) == ("Human work", "Mine")


def test_a_pull_request_from_a_branch_named_like_its_own_follow_up_is_not_rewritten(double, tmp_path, root):
    number = double.repo._next_number  # the next pull request's number
    pr = double.repo.open_pull_request(
        f"kernel-bot/pr-{number}",
        {"kernels/rmsnorm.py": b"# touched\n" + KERNEL_SOURCE.encode()},
        title="Human work",
        body="Mine",
        labels=("kernel-bot",),
    )
    assert pr.number == number
    sha = double.repo.head_sha(pr)
    refused(
        double,
        tmp_path,
        root,
        honest_results(),
        run_event(sha, pr.head_ref, (pr.number,)),
        f"the follow-up branch kernel-bot/pr-{number} is the branch it would merge into (a pull request from a "
        "branch of that name): it is not committed onto and nothing is published",
    )
    assert (pr.title, pr.body) == ("Human work", "Mine")


# -- write scope: the TARGET the problem file declares at the head commit --------------------


def _declaring(target: str) -> bytes:
    return PROBLEM_SOURCE.replace('TARGET = "kernels/rmsnorm.py"', f"TARGET = {target!r}").encode()


@pytest.mark.parametrize(
    "target,extra,why",
    [
        ("problems/rmsnorm.py", {}, "is under problems/, where the problems (the definition of correct) live"),
        (
            "problems/conftest.py",
            {"problems/conftest.py": b"x = 1\n"},
            "is under problems/, where the problems (the definition of correct) live",
        ),
        (
            "kernels/__init__.py",
            {"kernels/__init__.py": b""},
            "is not a kernel module (a .py file other than package and test plumbing)",
        ),
        (
            "kernels/.gitattributes",
            {"kernels/.gitattributes": b"* text\n"},
            "is not a kernel module (a .py file other than package and test plumbing)",
        ),
        (
            "kernels/Makefile",
            {"kernels/Makefile": b"all:\n"},
            "is not a kernel module (a .py file other than package and test plumbing)",
        ),
        (".github/workflows/x.py", {".github/workflows/x.py": b"x = 1\n"}, "is outside the configured kernel paths"),
    ],
)
def test_a_target_outside_the_exact_scope_is_refused(double, tmp_path, root, target, extra, why):
    pr, sha = same_repo_pr(double, {"problems/rmsnorm.py": _declaring(target), **extra})
    results = honest_results(target=target)
    message = f"rmsnorm: TARGET {target!r} {why}; nothing is published"
    if target.startswith(".github"):  # the artifact's own target already fails the allowlist
        message = (
            f"untrusted results rejected: results.problems[0].target: {target!r} is outside the configured kernel paths"
        )
    refused(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)), message)


def test_a_shell_like_target_fails_the_schema(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results(target="kernels/x.py; rm -rf ~ $(id)")
    refused(
        double,
        tmp_path,
        root,
        results,
        run_event(sha, pr.head_ref, (pr.number,)),
        "untrusted results rejected: results.problems[0].target: pattern: 'kernels/x.py; rm -rf ~ $(id)' "
        "has characters or a length this field does not allow",
    )


def test_a_new_file_a_mismatched_target_and_no_target_are_refused(double, tmp_path, root):
    pr, sha = same_repo_pr(double, {"problems/rmsnorm.py": _declaring("kernels/new.py")})
    event = run_event(sha, pr.head_ref, (pr.number,))
    refused(
        double,
        tmp_path,
        root,
        honest_results(target="kernels/new.py"),
        event,
        f"rmsnorm: TARGET 'kernels/new.py' does not exist at {sha[:12]}: a follow-up never adds a file; "
        "nothing is published",
    )
    refused(
        double,
        tmp_path,
        root,
        honest_results(target="kernels/rmsnorm.py"),
        event,
        f"rmsnorm: the results name target 'kernels/rmsnorm.py', but problems/rmsnorm.py declares TARGET "
        f"'kernels/new.py' at {sha[:12]}; nothing is published",
    )
    no_target = PROBLEM_SOURCE.replace('TARGET = "kernels/rmsnorm.py"\n', "").encode()
    pr2 = double.repo.open_pull_request("feature/no-target", {"problems/rmsnorm.py": no_target})
    sha2 = double.repo.head_sha(pr2)
    refused(
        double,
        tmp_path,
        root,
        honest_results(),
        run_event(sha2, pr2.head_ref, (pr2.number,)),
        f"rmsnorm: the results name target 'kernels/rmsnorm.py', but problems/rmsnorm.py declares no TARGET "
        f"at {sha2[:12]}; nothing is published",
    )


def test_a_problem_without_target_gets_no_new_file_only_a_note(double, tmp_path, root):
    no_target = PROBLEM_SOURCE.replace('TARGET = "kernels/rmsnorm.py"\n', "").encode()
    pr, sha = same_repo_pr(double, {"problems/rmsnorm.py": no_target})
    refs = snapshot(double)[0]
    publish(double, tmp_path, root, honest_results(target=None), run_event(sha, pr.head_ref, (pr.number,)))
    assert snapshot(double)[0] == refs
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    (comment,) = double.repo.comments.values()
    assert "the candidate is in the run's artifact instead" in comment.body


def test_content_other_than_the_verified_candidate_is_refused(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    results["problems"][0]["best"]["source"] = "import os\nos.system('id')\n"
    refused(
        double,
        tmp_path,
        root,
        results,
        run_event(sha, pr.head_ref, (pr.number,)),
        "rmsnorm: the best candidate's source does not hash to its recorded SHA-256; nothing is published",
    )


# -- numbers: re-derived from the samples, judged by the trusted min-speedup -------------------


def _forge(results: dict, speedup: float, ci: list[float]) -> dict:
    forged = copy.deepcopy(results)
    p = forged["problems"][0]
    for c in (p["best"], p["attempts"][0]):
        c.update(speedup=speedup, speedup_ci=ci)
        c["shapes"][0].update(speedup=speedup, speedup_ci=ci)
    return forged


def _only_failed_check(double, before, sha: str) -> None:
    assert writes(double) == ["checks/create"]
    (run,) = double.repo.check_runs.values()
    assert (run.conclusion, run.head_sha, run.output["title"]) == (
        "failure",
        sha,
        "the results artifact is inconsistent",
    )
    after = snapshot(double)
    assert after[:3] == before[:3]


def test_forged_speedup_gets_a_failed_check_run_and_nothing_else(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    honest = honest_results()
    derived = honest["problems"][0]["best"]["shapes"][0]["speedup"]
    before = snapshot(double)
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, _forge(honest, 50.0, [0.1, 0.2]), run_event(sha, pr.head_ref, (pr.number,)))
    assert str(err.value) == (
        "nothing published: the results artifact is inconsistent (results.problems[0]"
        f".attempts[0].shapes[0].speedup is 50.0, its samples give {derived!r})"
    )
    _only_failed_check(double, before, sha)


def test_tampered_samples_and_a_narrowed_spread_are_inconsistent(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    shape = results["problems"][0]["attempts"][0]["shapes"][0]
    shape["derivation"]["spread_log_sd"] = 0.0
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert (
        "results.problems[0].attempts[0].shapes[0].derivation: a worker spread narrower than the baseline's own"
        in str(err.value)
    )
    results = honest_results()
    shape = results["problems"][0]["attempts"][0]["shapes"][0]
    shape["measurement"]["samples_us"][0] *= 0.01  # one forged call: the median stays, the interval moves
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert str(err.value).startswith(
        "nothing published: the results artifact is inconsistent (results.problems[0]"
        f".attempts[0].shapes[0].speedup_ci[0] is {shape['speedup_ci'][0]!r}, "
        "its samples give "
    )
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") is None


def test_the_trusted_min_speedup_decides_not_the_artifacts(double, tmp_path, root):
    (root / "pyproject.toml").write_text("[tool.kernel-bot]\nmin-speedup = 3.0\n")
    pr, sha = same_repo_pr(double)
    results = honest_results(min_speedup=1.01)  # a 2x candidate, measured against a bar of 1.01
    publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") is None
    (run,) = double.repo.check_runs.values()
    assert run.conclusion == "neutral"


# -- text: inert wherever it is shown -------------------------------------------------------

INJECTION = "@octocat <img src=x onerror=alert(1)> [click](https://evil.example) <details> Closes #1 www.evil.example"


def test_injected_text_is_inert_in_pr_comment_and_check_run(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    p = results["problems"][0]
    p["attempts"][0]["reasons"] = [INJECTION]
    p["attempts"][0]["reason"] = INJECTION
    p["stopped"] = INJECTION
    p["skipped"] = [{"transformation": INJECTION, "reason": INJECTION}]
    p["baseline"]["name"] = INJECTION
    publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    (follow,) = [x for x in double.repo.pulls.values() if x.head_ref.startswith("kernel-bot/")]
    texts = [
        follow.title,
        follow.body,
        *(c.body for c in double.repo.comments.values()),
        *(r.output.get("summary") or "" for r in double.repo.check_runs.values()),
        *(r.output.get("title") or "" for r in double.repo.check_runs.values()),
    ]
    shown = "\n".join(texts)
    for bad in ("@octocat", "<img", "](https://evil", "https://evil", "Closes #1", "www.evil", "<details> Closes"):
        assert bad not in shown, bad
    assert "octocat" in shown  # the text is still there, only inert


@pytest.mark.parametrize("device_name", ["@octocat", "<img src=x>", "x" * 1047, "GPU\nCloses #1"])
def test_device_names_that_could_inject_fail_the_schema(double, tmp_path, root, device_name):
    pr, sha = same_repo_pr(double)
    results = honest_results(device_name=device_name)
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert str(err.value) == (
        "untrusted results rejected: results.problems[0].environment.device_name: pattern: "
        f"{device_name[:200]!r} has characters or a length this field does not allow"
    )
    assert writes(double) == []
