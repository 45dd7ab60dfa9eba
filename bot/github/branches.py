"""The follow-up branch through the Git Data API: read what is there, then one commit on the
measured commit (the rules in bot.github.ownership). Called by bot.github.client inside its
retrying steps; the reads all happen before the first write."""

from __future__ import annotations

import logging
from base64 import b64encode

from github import InputGitTreeElement, UnknownObjectException
from github.Commit import Commit
from github.GitRef import GitRef
from github.Repository import Repository

from bot.core.domain import FileChange, PullRequestPlan
from bot.core.errors import BotError
from bot.github.ownership import Account, Parent, TipCommit, check_branch_is_ours, choose_parent, commit_message
from bot.github.trees import tree_entry

log = logging.getLogger(__name__)


def ref_or_none(repo: Repository, branch: str) -> GitRef | None:
    ref = repo.get_git_ref(f"heads/{branch}")  # lazy: `.object` sends the GET
    try:
        ref.object  # noqa: B018 - completing also sets the `/git/refs/...` url edit() PATCHes
    except UnknownObjectException:
        return None
    return ref


def _blob_sha(repo: Repository, path: str, ref: str) -> str | None:
    """What `path` is at `ref`, from the git tree (modes on the way and the object): the
    contents API serves a symlink's file as if it were the file."""
    found = tree_entry(repo, path, ref)
    return None if found is None else f"{'/'.join(found[0])}:{found[1]}"


def _tip(commit: Commit) -> TipCommit:
    user = commit.committer  # None when GitHub links the committer's email to no account
    return TipCommit(
        commit.sha,
        commit.commit.message,
        Account(user.login, user.type) if user is not None else Account(None, None),
        commit.commit.tree.sha,
        tuple(p.sha for p in commit.parents),
    )


class FollowUpBranch:
    """Reads (`prepare`) and then writes (`push`) one plan's branch in `repo`."""

    def __init__(self, repo: Repository, repo_name: str, sticky_author: str | None) -> None:
        self._repo, self._repo_name, self._sticky_author = repo, repo_name, sticky_author

    def prepare(self, plan: PullRequestPlan) -> tuple[Parent, TipCommit | None]:
        """The parent to build on and the branch's current tip (None: no branch yet); BotError
        when the base moved over a measured file or the branch ends in a commit not the bot's."""
        base_ref = ref_or_none(self._repo, plan.base)
        if base_ref is None:
            raise BotError(f"base branch {plan.base!r} does not exist in {self._repo_name}")
        tip, measured = base_ref.object.sha, plan.measured_sha or ""
        paths = plan.measured_paths or tuple(c.path for c in plan.files)
        blobs = {}
        if tip != measured:  # only then: each file's tree entry at both
            blobs = {p: (_blob_sha(self._repo, p, measured), _blob_sha(self._repo, p, tip)) for p in paths}
        parent = choose_parent(plan, tip, blobs)
        current = ref_or_none(self._repo, plan.branch)
        if current is None:
            return parent, None
        branch_tip = _tip(self._repo.get_commit(current.object.sha))
        check_branch_is_ours(plan.branch, branch_tip, self._sticky_author)
        return parent, branch_tip

    def publish(self, plan: PullRequestPlan) -> Parent:
        """`prepare`, then `push`: the parent the follow-up commit was built on."""
        parent, branch_tip = self.prepare(plan)
        self.push(plan, parent, branch_tip)
        return parent

    def push(self, plan: PullRequestPlan, parent: Parent, branch_tip: TipCommit | None) -> str:
        """One commit with `plan.files` on `parent`, at `plan.branch` (checked by `prepare`)."""
        repo = self._repo
        base_commit = repo.get_git_commit(parent.sha)
        elements = [InputGitTreeElement(change.path, "100644", "blob", sha=self._blob(change)) for change in plan.files]
        tree = repo.create_git_tree(elements, base_tree=base_commit.tree)
        # Same tree on the same parent: a new commit would only retrigger the PR's CI.
        if branch_tip is not None and branch_tip.tree_sha == tree.sha and branch_tip.parents == (parent.sha,):
            log.info("branch %s is already up to date at %s", plan.branch, branch_tip.sha[:12])
            return branch_tip.sha
        commit = repo.create_git_commit(commit_message(plan), tree, [base_commit])
        if branch_tip is None:
            repo.create_git_ref(f"refs/heads/{plan.branch}", commit.sha)
        else:
            # Over the bot's own commit only (`prepare`): the branch is rebuilt on each measurement.
            # Read again just before: a push since `prepare` is not overwritten either.
            current = ref_or_none(repo, plan.branch)
            if current is None or current.object.sha != branch_tip.sha:
                raise BotError(f"branch {plan.branch} moved while kernel-bot published; not overwritten")
            current.edit(commit.sha, force=True)
        log.info("pushed %s to %s on %s (%d files)", commit.sha[:12], plan.branch, parent.sha[:12], len(plan.files))
        return commit.sha

    def _blob(self, change: FileChange) -> str:
        try:
            return self._repo.create_git_blob(change.content.decode("utf-8"), "utf-8").sha
        except UnicodeDecodeError:  # binary (a PNG plot): JSON carries it as base64
            return self._repo.create_git_blob(b64encode(change.content).decode("ascii"), "base64").sha
