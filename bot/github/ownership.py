"""Which branches, commits and pull requests are kernel-bot's own, and which commit a follow-up
builds on (pure: the facts are read by bot.github.branches and bot.github.client).

A follow-up branch is rebuilt on every run, so the bot force-updates it; that is safe only
over a commit the bot wrote. Its commits carry a `Kernel-Bot-Run: <run id>` trailer and are
committed by the bot's account; its pull requests are opened by that account and carry a
hidden marker. A human branch or pull request of the same name has neither, and is left
alone. The follow-up commit's parent is the commit the run measured; when the base moved
since, it is built on the new tip only where every file the measurement rests on is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bot.core.domain import PullRequestPlan
from bot.core.errors import BotError

RUN_TRAILER = "Kernel-Bot-Run"
MEASURED_TRAILER = "Kernel-Bot-Measured"
FOLLOW_UP_MARKER = "<!-- kernel-bot:follow-up -->"
_RUN_LINE = re.compile(rf"^{RUN_TRAILER}: [0-9]+$", re.MULTILINE)


@dataclass(frozen=True)
class Account:
    """Who GitHub says made a commit or opened a pull request; login None when GitHub links no account."""

    login: str | None
    kind: str | None  # "Bot" | "User" | "Organization"


@dataclass(frozen=True)
class TipCommit:
    """A branch's tip as GET /repos/{o}/{r}/commits/{sha} shows it."""

    sha: str
    message: str
    committer: Account
    tree_sha: str
    parents: tuple[str, ...]


def by_bot(account: Account, sticky_author: str | None) -> bool:
    """The bot's own account: the given login (personal tokens act as users), else any bot
    (GITHUB_TOKEN and App tokens act as bots), as for the sticky comment."""
    if sticky_author:
        return account.login == sticky_author
    return account.kind == "Bot"


def commit_message(plan: PullRequestPlan) -> str:
    """The follow-up commit's message: the title, then the trailers that mark it as the bot's."""
    return f"{plan.title}\n\n{RUN_TRAILER}: {plan.run_id}\n{MEASURED_TRAILER}: {plan.measured_sha}\n"


def last_paragraph(message: str) -> str:
    return message.strip().rsplit("\n\n", 1)[-1]


def bot_commit(tip: TipCommit, sticky_author: str | None) -> bool:
    """Written by the bot: its trailer in the last paragraph, committed by its account (a
    maintainer who amends the bot's commit keeps the trailer but becomes its committer)."""
    return bool(_RUN_LINE.search(last_paragraph(tip.message))) and by_bot(tip.committer, sticky_author)


def check_branch_is_ours(branch: str, tip: TipCommit, sticky_author: str | None) -> None:
    """BotError, before anything is written, when `branch` ends in a commit the bot did not write."""
    if bot_commit(tip, sticky_author):
        return
    who = tip.committer.login or "an account GitHub does not know"
    first = tip.message.strip().splitlines()[0][:80] if tip.message.strip() else ""
    raise BotError(
        f"branch {branch} ends in commit {tip.sha[:12]} ({first!r}, committed by {who}), which "
        f"kernel-bot did not write (no `{RUN_TRAILER}:` trailer from its account): it is not "
        "overwritten and nothing is published; merge or close its pull request and delete the "
        "branch to let kernel-bot start it afresh"
    )


def bot_pull(author: Account, body: str | None, sticky_author: str | None) -> bool:
    """A pull request the bot opened: its account, and the marker it puts in every body."""
    return by_bot(author, sticky_author) and FOLLOW_UP_MARKER in (body or "")


def check_plan_branch(plan: PullRequestPlan) -> None:
    """A push needs the measured commit and the run's id, and never lands on its own base."""
    if plan.branch == plan.base:
        raise BotError(
            f"the follow-up branch {plan.branch} is the branch it would merge into (a pull request "
            "from a branch of that name): it is not committed onto and nothing is published"
        )
    if not plan.measured_sha or plan.run_id is None:
        raise BotError("the plan names no measured commit or run: a follow-up commit needs both")


@dataclass(frozen=True)
class Parent:
    """The follow-up commit's parent, and what to say when it is not the measured commit."""

    sha: str
    note: str | None = None


def choose_parent(plan: PullRequestPlan, tip: str, blobs: Mapping[str, tuple[str | None, str | None]]) -> Parent:
    """The measured commit when `plan.base` still points there; else the base's new `tip`, if
    every measured path has the same git tree entry at both (`blobs`: path -> (measured, tip),
    None where absent); else BotError: building there would revert or re-add what changed,
    under old numbers."""
    measured = plan.measured_sha or ""
    if tip == measured:
        return Parent(measured)
    moved = f"{plan.base} moved from {measured[:12]} (measured) to {tip[:12]}"
    changed = sorted(path for path, (then, now) in blobs.items() if then != now)
    if changed:
        raise BotError(
            f"{moved}, and {', '.join(changed)} changed in between: the numbers are of "
            f"{measured[:12]}, so nothing is published (the next run measures {tip[:12]})"
        )
    return Parent(
        tip,
        f"{moved}; {', '.join(sorted(blobs)) or 'no measured file'} unchanged in between, "
        f"so the follow-up is built on {tip[:12]}",
    )
