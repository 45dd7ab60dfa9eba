"""Which pull request a stage-2 run publishes for: from the workflow_run event and GitHub's
API, never from the artifact (stage 1 ran untrusted code that could have written it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from bot.core.domain import Trigger
from bot.core.errors import BotError

_SHA = re.compile(r"^[0-9a-f]{40}$")
DELETED_FORK = "(deleted fork)"  # never equal to a repository name, so Trigger.fork is True


@dataclass(frozen=True)
class PullFacts:
    """A pull request as the API shows it; `head_repo` None once its fork was deleted."""

    number: int
    state: str
    head_sha: str
    head_ref: str
    head_repo: str | None
    base_ref: str


@dataclass(frozen=True)
class RunFacts:
    """The workflow run that made the artifact, as GitHub records it (the `workflow_run` event's
    object, or GET /repos/{o}/{r}/actions/runs/{id}: the same schema)."""

    event: str
    head_sha: str
    head_branch: str | None
    head_repo: str | None  # None: the run's head repository is gone (a deleted fork)
    pr_numbers: tuple[int, ...]  # GitHub lists them for same-repository pull requests only
    default_branch: str | None
    run_id: int | None = None
    path: str | None = None  # the workflow file, e.g. .github/workflows/nightly.yml
    conclusion: str | None = None


class PullReader(Protocol):
    def pull_request(self, number: int) -> PullFacts | None: ...

    def pull_requests_for_commit(self, sha: str) -> list[PullFacts]: ...


def run_from_json(run: Any, default_branch: str | None) -> RunFacts:
    """A workflow run object's fields stage 2 relies on, checked for shape."""
    if not isinstance(run, dict):
        raise BotError("workflow_run event without a workflow_run object")
    sha = run.get("head_sha")
    if not isinstance(sha, str) or not _SHA.match(sha):
        raise BotError(f"workflow run with head_sha {str(sha)[:60]!r}: expected a commit SHA")
    head_repo = (run.get("head_repository") or {}).get("full_name")
    numbers = tuple(p.get("number") for p in run.get("pull_requests") or () if isinstance(p, dict))
    if not all(isinstance(n, int) for n in numbers):
        raise BotError("workflow run lists a pull request without a number")
    run_id, path, conclusion = run.get("id"), run.get("path"), run.get("conclusion")
    return RunFacts(
        str(run.get("event")),
        sha,
        run.get("head_branch"),
        head_repo if isinstance(head_repo, str) else None,
        numbers,
        default_branch,
        run_id if isinstance(run_id, int) else None,
        path if isinstance(path, str) else None,
        conclusion if isinstance(conclusion, str) else None,
    )


def run_facts(payload: dict[str, Any]) -> RunFacts:
    """The run of a `workflow_run` event payload."""
    return run_from_json(payload.get("workflow_run"), (payload.get("repository") or {}).get("default_branch"))


def _matching(pulls: list[PullFacts], run: RunFacts) -> list[PullFacts]:
    return [p for p in pulls if p.state == "open" and p.head_sha == run.head_sha and p.head_repo == run.head_repo]


def pull_request_trigger(run: RunFacts, repo: str, reader: PullReader) -> Trigger:
    """The run's pull request, read through the API: same head commit, same head repository,
    open. A same-repository run names its PR; a fork's run does not, so the PRs whose head is
    the run's commit are listed instead."""
    if run.pr_numbers:
        pulls = []
        for number in run.pr_numbers:
            found = reader.pull_request(number)
            if found is None:
                raise BotError(f"pull request #{number} named by the workflow run does not exist in {repo}")
            pulls.append(found)
    else:
        pulls = reader.pull_requests_for_commit(run.head_sha)
    matching = _matching(pulls, run)
    if not matching:
        seen = (
            ", ".join(
                f"#{p.number} ({p.state}, head {p.head_sha[:12]} from {p.head_repo or DELETED_FORK})" for p in pulls
            )
            or "none"
        )
        raise BotError(
            f"no open pull request in {repo} has head commit {run.head_sha[:12]} from "
            f"{run.head_repo or DELETED_FORK} (found: {seen}); nothing is published"
        )
    if len(matching) > 1:
        raise BotError(
            f"pull requests {', '.join(f'#{p.number}' for p in matching)} all have head commit "
            f"{run.head_sha[:12]}; refusing to pick one"
        )
    pr = matching[0]
    if pr.head_repo == repo and pr.head_ref != run.head_branch:
        raise BotError(
            f"pull request #{pr.number}'s branch {pr.head_ref!r} is not the run's "
            f"{run.head_branch!r}; nothing is published"
        )
    return Trigger(
        kind="pull_request",
        repo=repo,
        pr_number=pr.number,
        head_ref=pr.head_ref,
        head_sha=pr.head_sha,
        head_repo=pr.head_repo or DELETED_FORK,
        base_ref=pr.base_ref,
        default_branch=run.default_branch,
    )


def trusted_trigger(run: RunFacts, repo: str, reader: PullReader) -> Trigger:
    """The trigger of a workflow run as GitHub records it. Nightly and manual runs publish only
    from the default branch of this repository: a run from any other branch ran code nobody
    reviewed."""
    if run.conclusion not in (None, "success"):
        raise BotError(f"run {run.run_id} concluded {run.conclusion!r}, not 'success': nothing is published")
    if run.event == "pull_request":
        return pull_request_trigger(run, repo, reader)
    if run.event not in ("schedule", "workflow_dispatch"):
        raise BotError(f"workflow_run for a {run.event!r} event: nothing to publish")
    if run.head_repo != repo or not run.default_branch or run.head_branch != run.default_branch:
        raise BotError(
            f"a {run.event} run on {run.head_repo or DELETED_FORK}:{run.head_branch}, not on "
            f"{repo}'s default branch {run.default_branch!r}: nothing is published"
        )
    return Trigger(
        kind=run.event, repo=repo, head_ref=run.head_branch, head_sha=run.head_sha, default_branch=run.default_branch
    )


def _disagreement(claimed: Trigger, trigger: Trigger, run: RunFacts) -> tuple[str, object, object] | None:
    """The first field the artifact states (not null) that GitHub's record contradicts."""
    head_repo = trigger.head_repo if trigger.head_repo != DELETED_FORK else None
    for field, stated, actual in (
        ("kind", claimed.kind, run.event),
        ("repo", claimed.repo, trigger.repo),
        ("head_sha", claimed.head_sha, run.head_sha),
        ("head_ref", claimed.head_ref, run.head_branch),
        ("head_repo", claimed.head_repo, head_repo),
        ("pr_number", claimed.pr_number, trigger.pr_number),
    ):
        # A deleted fork's name is gone from GitHub's record; the artifact may still hold it,
        # but it may never claim to be this repository.
        gone = field == "head_repo" and actual is None and stated != trigger.repo
        if stated is not None and stated != actual and not gone:
            return field, stated, actual
    return None


def check_claims(claimed: Trigger | None, trigger: Trigger, run: RunFacts) -> None:
    """Refuse an artifact whose `trigger` disagrees with GitHub's record of the run that made it:
    a fork's artifact handed to a manual publish as a nightly one, or one replayed for another
    pull request. BotError naming the field; None where it agrees (or states nothing)."""
    if claimed is None:
        return
    found = _disagreement(claimed, trigger, run)
    if found is not None:
        field, stated, actual = found
        said = "nothing" if actual is None else repr(str(actual)[:80])
        raise BotError(
            f"the results' trigger.{field} is {str(stated)[:80]!r}, but GitHub's run {run.run_id} "
            f"({run.path or 'workflow'}) says {said}; nothing is published"
        )
