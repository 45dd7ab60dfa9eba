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


def run_event(
    head_sha: str,
    head_branch: str,
    pr_numbers: tuple[int, ...] = (),
    head_repo: str | None = REPO,
    event: str = "pull_request",
) -> dict:
    return {
        "workflow_run": {
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


def publish(double, tmp_path, root, results: dict, event: dict) -> list[str]:
    name = str(next(_RUNS))
    art = tmp_path / f"artifact-{name}"
    art.mkdir()
    (art / "results.json").write_text(json.dumps(results))
    (tmp_path / f"event-{name}.json").write_text(json.dumps(event))
    environ = {
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": "workflow_run",
        "GITHUB_TOKEN": "test-token",
        "GITHUB_EVENT_PATH": str(tmp_path / f"event-{name}.json"),
        "GITHUB_API_URL": double.url,
    }
    said: list[str] = []
    publish_stage_two(art, root, said.append, environ, client=client_for(double))
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


def writes(double: GitHubDouble) -> list[str]:
    return [e.operation_id or e.path for e in double.exchanges if e.method != "GET"]


def refused(double, tmp_path, root, results, event, message: str) -> None:
    before = snapshot(double)
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, event)
    assert str(err.value) == message
    assert writes(double) == [] and snapshot(double) == before


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


# -- identity: from the API, never from the artifact ---------------------------------------


def _other_contributor_pr(double):
    """PR #n with a follow-up branch of its own: the target of the attacks."""
    victim, _ = same_repo_pr(double)
    double.repo.commit_files(f"kernel-bot/pr-{victim.number}", {"kernels/rmsnorm.py": b"# earlier follow-up\n"})
    return victim


@pytest.mark.parametrize("deleted", [False, True])
def test_fork_claiming_another_pr_gets_only_its_own_comment(double, tmp_path, root, deleted):
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
    results = honest_results()
    results["trigger"].update(pr_number=victim.number, head_sha=sha, head_ref="main", head_repo=REPO)
    refs_before = snapshot(double)[0]
    publish(double, tmp_path, root, results, run_event(sha, "main", (), None if deleted else "attacker/octo-repo"))
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
