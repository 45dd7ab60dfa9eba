"""Stage 2 of the GitHub Action (`bot publish`): results directory (untrusted) -> GitHub writes.

Runs default-branch code in the job holding the write token, where only the `publish` extra is
installed: it imports no torch, nothing of bot.engine, bot.harness, bot.sandbox or bot.propose
(enforced by the import contracts in pyproject.toml).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bot.config import github_env, load_settings, path_allowed, read_event
from bot.core.errors import BotError

Echo = Callable[[str], None]


def publish_stage_two(
    results_dir: Path, repo_root: Path | None, echo: Echo, environ: Mapping[str, str] | None = None, client: Any = None
) -> None:
    """Validate, re-derive and scope everything, then write: nothing is written to GitHub
    before the whole plan stands (bot.github.publish)."""
    from bot.github.identity import operator_trigger, trusted_trigger
    from bot.github.publish import stage_two_plan
    from bot.github.untrusted import load_results

    env = github_env(environ, required=("GITHUB_REPOSITORY",))
    root = (repo_root or env.workspace or Path.cwd()).resolve()
    settings = load_settings(root, environ if environ is not None else os.environ)  # the default branch's
    allowed = lambda path: path_allowed(path, settings)  # noqa: E731 (the trusted allowlist)
    results = load_results(results_dir, allowed)
    if client is None:
        from bot.github.client import GitHubClient

        client = GitHubClient(env.token or "", env.repository or "", env.api_url)
    event = read_event(env) if env.event_path else None
    if env.event_name == "workflow_run" and event:
        trigger = trusted_trigger(event, env.repository or "", client)
    else:  # run by hand on a downloaded artifact: the operator vouches for which run it is
        trigger = operator_trigger(results.trigger, env.repository or "", client)
    staged = stage_two_plan(results, trigger, client, settings, allowed)
    if staged.reason is not None:
        if staged.failure is not None:
            client.create_check_run(staged.failure)
        raise BotError(f"nothing published: the results artifact is inconsistent ({staged.reason})")
    plan = staged.plan
    if plan is None:
        echo("kernel-bot: nothing to publish (no significant improvement, no pull request to comment on).")
        return
    result = client.publish(plan, settings.max_open_prs)
    if result.pr_url:
        echo(f"kernel-bot: {'opened' if result.created else 'updated'} {result.pr_url}")
    if result.skipped_reason:
        echo(f"kernel-bot: no pull request: {result.skipped_reason}")
    if result.comment_id:
        echo(f"kernel-bot: sticky comment {result.comment_id} on #{plan.source_pr}")
