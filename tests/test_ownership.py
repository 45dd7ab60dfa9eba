"""The rules that keep stage 2 on the bot's own commits and pull requests and on the measured
commit (bot.github.ownership), as pure functions of what GitHub shows."""

from __future__ import annotations

import pytest

from bot.core.domain import PullRequestPlan
from bot.core.errors import BotError
from bot.github.ownership import (
    FOLLOW_UP_MARKER,
    Account,
    TipCommit,
    bot_commit,
    bot_pull,
    check_plan_branch,
    choose_parent,
    commit_message,
)

MEASURED, TIP = "a" * 40, "b" * 40
BOT, HUMAN, ME = Account("github-actions[bot]", "Bot"), Account("octocat", "User"), Account("kb-user", "User")


def _plan(**fields) -> PullRequestPlan:
    base = dict(
        repo="o/r",
        branch="kernel-bot/nightly",
        base="main",
        title="kernel-bot: 2.00x faster rmsnorm",
        body="numbers",
        files=(),
        patch="",
        source_pr=None,
        comment_body=None,
        fork=False,
        measured_sha=MEASURED,
        run_id=9001,
    )
    return PullRequestPlan(**{**base, **fields})


def _tip(message: str, committer: Account) -> TipCommit:
    return TipCommit(TIP, message, committer, "c" * 40, (MEASURED,))


def test_the_bots_commit_message_carries_the_run_and_the_measured_commit():
    message = commit_message(_plan())
    assert message == f"kernel-bot: 2.00x faster rmsnorm\n\nKernel-Bot-Run: 9001\nKernel-Bot-Measured: {MEASURED}\n"
    assert bot_commit(_tip(message, BOT), None)


@pytest.mark.parametrize(
    "message,committer,sticky,ours",
    [
        (commit_message(_plan()), HUMAN, None, False),  # amended by a maintainer: trailer kept
        ("Fix the docstring", BOT, None, False),  # another bot's commit, no trailer
        ("Fix\n\nKernel-Bot-Run: 9001\n\nSigned-off-by: x", BOT, None, False),  # not in the last paragraph
        ("Fix\n\nKernel-Bot-Run: latest", BOT, None, False),  # not a run id
        (commit_message(_plan()), ME, "kb-user", True),  # a personal token: its login
        (commit_message(_plan()), BOT, "kb-user", False),  # a login given: any bot is not enough
        (commit_message(_plan()), Account(None, None), None, False),  # an email GitHub links to no account
    ],
)
def test_only_the_bots_own_commit_counts_as_its_own(message, committer, sticky, ours):
    assert bot_commit(_tip(message, committer), sticky) is ours


def test_a_pull_request_is_the_bots_by_author_and_marker():
    assert bot_pull(BOT, f"{FOLLOW_UP_MARKER}\nbody", None)
    assert not bot_pull(HUMAN, f"{FOLLOW_UP_MARKER}\npasted by a human", None)
    assert not bot_pull(BOT, "opened by the bot before it had a marker", None)
    assert not bot_pull(BOT, None, None)


def test_the_parent_is_the_measured_commit_or_a_tip_with_the_same_measured_files():
    paths = {"kernels/rmsnorm.py": ("file:1", "file:1"), "problems/rmsnorm.py": ("file:2", "file:2")}
    assert choose_parent(_plan(), MEASURED, {}).sha == MEASURED
    rebased = choose_parent(_plan(), TIP, paths)
    assert rebased.sha == TIP and rebased.note == (
        f"main moved from {MEASURED[:12]} (measured) to {TIP[:12]}; kernels/rmsnorm.py, problems/rmsnorm.py "
        f"unchanged in between, so the follow-up is built on {TIP[:12]}"
    )
    for changed in (("file:1", "file:3"), ("file:1", None), ("file:1", "symlink:1")):
        with pytest.raises(BotError, match=r"and kernels/rmsnorm.py changed in between"):
            choose_parent(_plan(), TIP, {**paths, "kernels/rmsnorm.py": changed})


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"base": "kernel-bot/nightly"}, "is the branch it would merge into"),
        ({"measured_sha": None}, "names no measured commit or run"),
        ({"run_id": None}, "names no measured commit or run"),
    ],
)
def test_a_plan_that_cannot_be_pushed_safely_is_refused(fields, words):
    with pytest.raises(BotError, match=words):
        check_plan_branch(_plan(**fields))
