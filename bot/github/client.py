"""The GitHub edge: `PullRequestPlan` -> branch, PR, comment, check run (events: bot.github.events).

With bot.github.branches (the follow-up branch's commits), the only modules importing PyGithub.
Every network step goes through `GitHubClient._step`, which retries transient failures and turns
permission errors into one clear `BotError` line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import requests
from github import Auth, Github, GithubException, UnknownObjectException
from github.PullRequest import PullRequest
from github.Repository import Repository

from bot.core.domain import CheckRunPlan, PullRequestPlan
from bot.core.errors import BotError
from bot.core.repo_path import is_plain_relative
from bot.github.branches import FollowUpBranch
from bot.github.client_settings import GitHubPacing, GitHubRetry
from bot.github.events import PULL_REQUEST_ACTIONS, trigger_from_event  # noqa: F401 (re-exported)
from bot.github.identity import PullFacts, RunFacts, run_from_json
from bot.github.ownership import FOLLOW_UP_MARKER, Account, bot_pull, check_plan_branch
from bot.github.trees import tree_modes

log = logging.getLogger(__name__)
T = TypeVar("T")

STICKY_MARKER = "<!-- kernel-bot:sticky -->"
# Who GITHUB_TOKEN posts as: the publish workflow's token. An App or personal token names its
# own login (`sticky_author`).
ACTIONS_LOGIN = "github-actions[bot]"
BOT_BRANCH_PREFIX = "kernel-bot/"
_TRANSIENT_STATUSES = frozenset({502, 503, 504})
_CHECK_SUMMARY_MAX_CHARS = 65_535  # GitHub rejects longer check run summaries with 422
DEFAULT_RETRY, DEFAULT_PACING = GitHubRetry(), GitHubPacing()


@dataclass(frozen=True)
class PublishResult:
    """What `publish` did; `None` where it did not touch that object."""

    pr_number: int | None
    pr_url: str | None
    comment_id: int | None
    check_run_id: int | None
    created: bool  # a new pull request was opened
    updated: bool  # an existing pull request was reused: branch and text brought up to date
    skipped_reason: str | None  # why no pull request was opened or updated
    base_note: str | None = None  # where the base moved since the measurement, what the push built on


class GitHubClient:
    """A narrow, retrying view of one repository's REST API."""

    def __init__(
        self,
        token: str,
        repo: str,
        api_url: str = "https://api.github.com",
        *,
        retry: GitHubRetry = DEFAULT_RETRY,
        pacing: GitHubPacing = DEFAULT_PACING,
        sticky_author: str | None = None,
    ) -> None:
        if not token:
            raise BotError("no GitHub token: set GITHUB_TOKEN (or the action's `token` input)")
        if repo.count("/") != 1:
            raise BotError(f"repository must be 'owner/name', got {repo!r}")
        self.repo_name = repo
        self._retry = retry
        # The login our comments carry: the sticky comment is the one with the marker AND it.
        self._sticky_author = sticky_author or ACTIONS_LOGIN
        self._waited_s = 0.0  # Retry-After and backoff waits so far (GitHubRetry.max_total_wait_s)
        # retry=None: PyGithub's own urllib3 retry waits with time.sleep (60 s on secondary
        # limits) and retries single requests; `_step` retries whole idempotent steps instead,
        # so a create that succeeded before a 502 is found again rather than duplicated.
        # lazy=True: objects fetched by URL (repo, pull, issue, ref) send no GET until a field
        # is read, so publishing costs only the requests it needs.
        self._gh = Github(
            auth=Auth.Token(token),
            base_url=api_url.rstrip("/"),
            retry=None,
            per_page=pacing.per_page,
            seconds_between_requests=pacing.seconds_between_requests,
            seconds_between_writes=pacing.seconds_between_writes,
            lazy=True,
        )
        self._repo: Repository = self._gh.get_repo(repo)  # lazy: no request yet

    # -- reads -------------------------------------------------------------------------

    def pull_request_files(self, number: int) -> list[str]:
        """Paths a pull request changes (all pages; GitHub caps the list at 3000 files)."""
        return self._step(
            f"list the files of pull request #{number}",
            lambda: [f.filename for f in self._repo.get_pull(number).get_files()],
        )

    def pull_request(self, number: int) -> PullFacts | None:
        """The pull request as GitHub has it; None when there is no such pull request."""

        def step() -> PullFacts | None:
            try:
                return _facts(self._repo.get_pull(number))
            except UnknownObjectException:
                return None

        return self._step(f"read pull request #{number}", step)

    def pull_requests_for_commit(self, sha: str) -> list[PullFacts]:
        """Pull requests whose head is commit `sha` (GitHub's commit -> pulls list)."""
        return self._step(
            f"list the pull requests of commit {sha[:12]}",
            lambda: [_facts(p) for p in self._repo.get_commit(sha).get_pulls()],
        )

    def workflow_run(self, run_id: int) -> RunFacts:
        """A workflow run as GitHub records it (GET .../actions/runs/{id}), with the repository's
        default branch: what a publish run by hand learns about the run it names."""

        def step() -> RunFacts:
            return run_from_json(self._repo.get_workflow_run(run_id).raw_data, self._repo.default_branch)

        return self._step(f"read workflow run {run_id}", step)

    def file_at(self, path: str, ref: str) -> bytes | None:
        """A regular file's bytes at commit `ref`; None when no file is there. A directory,
        symlink or submodule at `path` is refused: a follow-up only rewrites regular files."""

        def step() -> bytes | None:
            try:
                found = self._repo.get_contents(path, ref=ref)
            except UnknownObjectException:
                return None
            if isinstance(found, list) or found.type != "file":
                raise BotError(
                    f"{path} at {ref[:12]} is a {'directory' if isinstance(found, list) else found.type}, "
                    "not a regular file"
                )
            return found.decoded_content

        return self._step(f"read {path} at {ref[:12]}", step)

    def tree_modes(self, path: str, ref: str) -> tuple[str, ...] | None:
        """Git modes of `path`'s components at commit `ref` (bot.core.scope.FileReader)."""
        return self._step(f"read the tree of {path} at {ref[:12]}", lambda: tree_modes(self._repo, path, ref))

    def open_bot_pull_requests(self, prefix: str = BOT_BRANCH_PREFIX) -> list[int]:
        """Numbers of open pull requests the bot opened from its branches (`prefix...` in this repo)."""

        def step() -> list[int]:
            return [
                p.number
                for p in self._repo.get_pulls(state="open")
                if p.head.ref.startswith(prefix)
                and p.head.repo is not None
                and p.head.repo.full_name == self.repo_name
                and self._ours(p)
            ]

        return self._step("list open pull requests", step)

    # -- publish -----------------------------------------------------------------------

    def publish(self, plan: PullRequestPlan, max_open: int) -> PublishResult:
        """Push `plan.files`, open or update the follow-up PR, the sticky comment, the check run."""
        if plan.repo != self.repo_name:
            raise BotError(f"plan is for {plan.repo}, but this client writes to {self.repo_name}")
        pr, created, skipped, note = self._publish_pull_request(plan, max_open)
        if skipped:
            log.info("no pull request for %s: %s", plan.branch, skipped)
        comment_id = check_run_id = None
        source_pr, comment, check = plan.source_pr, plan.comment_body, plan.check_run
        if source_pr is not None and comment:
            comment_id = self._step(
                "comment on pull requests",
                lambda: self._upsert_comment(source_pr, comment),
                permission="`pull-requests: write` (or `issues: write`)",
            )
        if check is not None:
            check_run_id = self._step(
                "create check runs", lambda: self._create_check_run(check), permission="`checks: write`"
            )
        return PublishResult(
            pr_number=pr.number if pr else None,
            pr_url=pr.html_url if pr else None,
            comment_id=comment_id,
            check_run_id=check_run_id,
            created=created,
            updated=pr is not None and not created,
            skipped_reason=skipped,
            base_note=note,
        )

    def create_check_run(self, check: CheckRunPlan) -> int:
        """A check run on its own (the failure one when nothing else is published)."""
        return self._step("create check runs", lambda: self._create_check_run(check), permission="`checks: write`")

    def _publish_pull_request(
        self, plan: PullRequestPlan, max_open: int
    ) -> tuple[PullRequest | None, bool, str | None, str | None]:
        """(pull request, created?, reason when skipped, where the base moved): every read and
        check first, so a refusal writes nothing."""
        if plan.fork:
            return None, False, "the pull request comes from a fork: the patch is posted as a comment", None
        if not plan.files:
            return None, False, "no files to publish", None
        for change in plan.files:
            _check_path(change.path)
        check_plan_branch(plan)
        if self._step("list open pull requests", lambda: self._find_pr(plan.branch)) is None:
            open_count = len(self.open_bot_pull_requests())
            if open_count >= max_open:  # checked before pushing: a skipped plan leaves no branch
                return None, False, f"{open_count} open kernel-bot pull requests reach the cap of {max_open}", None
        branch = FollowUpBranch(self._repo, self.repo_name, self._sticky_author)
        # One step: a retry after a 5xx reads the branch again (and finds its own commit there).
        parent = self._step("push commits", lambda: branch.publish(plan), permission="`contents: write`")
        pr, created = self._step(
            "create pull requests", lambda: self._upsert_pr(plan, parent.note), permission="`pull-requests: write`"
        )
        return pr, created, None, parent.note

    def _ours(self, pr: PullRequest) -> bool:
        user = pr.user
        return bot_pull(Account(user.login, user.type) if user else Account(None, None), pr.body, self._sticky_author)

    def _find_pr(self, branch: str) -> PullRequest | None:
        """The bot's open pull request from `branch`; BotError when one from it is someone else's,
        whose title and body are theirs."""
        pulls = list(self._repo.get_pulls(state="open", head=f"{self.repo_name.split('/')[0]}:{branch}"))
        foreign = [p for p in pulls if not self._ours(p)]
        if foreign:
            raise BotError(
                f"pull request #{foreign[0].number} from {branch} was not opened by kernel-bot (by "
                f"{foreign[0].user.login if foreign[0].user else 'unknown'}, without its marker): its "
                "branch, title and body are left alone and nothing is published"
            )
        return pulls[0] if pulls else None

    def _upsert_pr(self, plan: PullRequestPlan, note: str | None) -> tuple[PullRequest, bool]:
        # The marker makes the pull request findable as the bot's; the note says where it was built.
        body = f"{FOLLOW_UP_MARKER}\n{plan.body}" + (f"\n\n{note}." if note else "")
        pr = self._find_pr(plan.branch)
        if pr is None:
            try:
                pr = self._repo.create_pull(base=plan.base, head=plan.branch, title=plan.title, body=body)
                log.info("opened pull request #%d", pr.number)
                return pr, True
            except GithubException as exc:  # an earlier attempt did succeed before a 5xx
                pr = self._find_pr(plan.branch) if exc.status == 422 else None
                if pr is None:
                    raise
        if (pr.title, pr.body) != (plan.title, body):
            pr.edit(title=plan.title, body=body)
        log.info("updated pull request #%d", pr.number)
        return pr, False

    def _upsert_comment(self, number: int, body: str) -> int:
        if STICKY_MARKER not in body:
            body = f"{STICKY_MARKER}\n{body}"
        issue = self._repo.get_issue(number)  # lazy: no GET of the issue itself
        # Anyone can paste the marker (a user quoting us, another app's bot), so it counts only
        # in comments by our own login: editing another's would fail (or overwrite it).
        ours = [
            c
            for c in issue.get_comments()
            if STICKY_MARKER in (c.body or "") and c.user and c.user.login == self._sticky_author
        ]
        if ours:
            if ours[0].body != body:
                ours[0].edit(body)
            return ours[0].id
        return issue.create_comment(body).id

    def _create_check_run(self, check: CheckRunPlan) -> int:
        output = {"title": check.title, "summary": check.summary[:_CHECK_SUMMARY_MAX_CHARS]}
        # A re-run updates the newest run of this name on the commit rather than adding one.
        # Only the app that created a check run may update it: another's refusal means create.
        existing = next(iter(self._repo.get_commit(check.head_sha).get_check_runs(check_name=check.name)), None)
        if existing is not None:
            try:
                existing.edit(status="completed", conclusion=check.conclusion, output=output)
                return existing.id
            except GithubException as exc:
                if exc.status not in (403, 404):
                    raise
        run = self._repo.create_check_run(
            name=check.name, head_sha=check.head_sha, status="completed", conclusion=check.conclusion, output=output
        )
        return run.id

    # -- plumbing ----------------------------------------------------------------------

    def _step(self, what: str, fn: Callable[[], T], permission: str | None = None) -> T:
        """Run one idempotent step; retry it whole on 5xx and secondary rate limits."""
        for attempt in range(1, self._retry.max_attempts + 1):
            try:
                return fn()
            except (GithubException, requests.ConnectionError, requests.Timeout) as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None or attempt == self._retry.max_attempts:
                    raise _as_bot_error(exc, what, permission, attempt) from exc
                too_long = self._retry.too_long(delay, self._waited_s)
                if too_long:
                    raise BotError(f"kernel-bot stopped retrying to {what}: {too_long}") from exc
                log.warning(
                    "%s: %s; attempt %d/%d, retrying in %.1f s",
                    what,
                    _describe(exc),
                    attempt,
                    self._retry.max_attempts,
                    delay,
                )
                self._waited_s += delay
                self._retry.sleep(delay)
        raise AssertionError("unreachable")

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        backoff = self._retry.base_delay_s * 2 ** (attempt - 1)
        if not isinstance(exc, GithubException) or exc.status in _TRANSIENT_STATUSES:
            return backoff
        if exc.status in (403, 429) and "secondary rate limit" in _message(exc).lower():
            headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
            try:
                return max(float(headers.get("retry-after", 0)), backoff)
            except ValueError:
                return backoff
        return None


def _facts(pr: PullRequest) -> PullFacts:
    head_repo = pr.head.repo  # None once the fork is deleted
    return PullFacts(
        number=pr.number,
        state=pr.state,
        head_sha=pr.head.sha,
        head_ref=pr.head.ref,
        head_repo=head_repo.full_name if head_repo is not None else None,
        base_ref=pr.base.ref,
    )


def _check_path(path: str) -> None:
    if not is_plain_relative(path):
        raise BotError(f"refusing to write {path!r}: not a plain repository-relative path")


def _message(exc: GithubException) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    return str(data.get("message") or exc.message or "")


def _describe(exc: Exception) -> str:
    if isinstance(exc, GithubException):
        return f"GitHub answered {exc.status} {_message(exc)!r}"
    return f"{type(exc).__name__}: {exc}"


def _as_bot_error(exc: Exception, what: str, permission: str | None, attempts: int) -> BotError:
    if not isinstance(exc, GithubException):
        return BotError(f"cannot reach GitHub to {what} after {attempts} attempts: {_describe(exc)}")
    message = _message(exc)
    if exc.status == 401:
        return BotError(f"GitHub rejected the token (bad credentials) while trying to {what}")
    if permission and exc.status == 403 and "resource not accessible" in message.lower():
        return BotError(
            f"the token cannot {what}: grant {permission} to the workflow job "
            f"(or the GitHub App); GitHub answered {exc.status} {message!r}"
        )
    if exc.status == 404 and permission:  # a missing object, or a fine-grained token without the grant
        return BotError(
            f"GitHub answered 404 {message!r} while trying to {what}: it does not exist, or the "
            f"token lacks {permission} (fine-grained tokens get 404, not 403, for a missing grant)"
        )
    if exc.status == 404:  # a read: the object is missing (or hidden from this token)
        return BotError(
            f"GitHub answered 404 {message!r} while trying to {what}: it does not exist, or this token cannot see it"
        )
    if exc.status == 403 and message.lower().startswith("api rate limit exceeded"):
        return BotError(f"GitHub API rate limit exhausted while trying to {what}: {message}")
    if attempts > 1:
        return BotError(f"GitHub kept failing to {what} after {attempts} attempts: {_describe(exc)}")
    return BotError(f"GitHub refused to {what}: {_describe(exc)}")
