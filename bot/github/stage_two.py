"""Stage 2 of the GitHub Action (`bot publish`): results directory (untrusted) -> GitHub writes.

Runs default-branch code in the job holding the write token, where only the `publish` extra is
installed: it imports no torch, nothing of bot.engine, bot.harness, bot.sandbox or bot.propose
(enforced by the import contracts in pyproject.toml).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.config import load_settings, path_allowed
from bot.core.errors import BotError
from bot.github.actions_env import GitHubEnv, github_env, read_event

Echo = Callable[[str], None]


def _run(env: GitHubEnv, run_id: int | None, client: Any) -> Any:
    """The run that made the artifact, as GitHub records it: the `workflow_run` event's object
    in the publish workflow, else the run `--run-id` names, read through the API. Never the
    artifact's word: it was written where untrusted code ran."""
    from bot.github.identity import run_facts

    event = read_event(env) if env.event_name == "workflow_run" and env.event_path else None
    if event is not None:
        run = run_facts(event)
        if run_id is not None and run_id != run.run_id:
            raise BotError(f"--run-id {run_id} is not the run of this workflow_run event ({run.run_id})")
        return run
    if run_id is None:
        raise BotError(
            "bot publish outside a workflow_run event needs --run-id: the id of the workflow run "
            "whose artifact this is (its trigger, commit and branch are read from GitHub)"
        )
    return client.workflow_run(run_id)


def publish_stage_two(
    results_dir: Path,
    repo_root: Path | None,
    echo: Echo,
    environ: Mapping[str, str] | None = None,
    client: Any = None,
    run_id: int | None = None,
) -> None:
    """Validate, re-derive and scope everything, then write: nothing is written to GitHub
    before the whole plan stands (bot.github.publish)."""
    from bot.github.identity import check_claims, trusted_trigger
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
    run = _run(env, run_id, client)
    trigger = trusted_trigger(run, env.repository or "", client)
    check_claims(results.trigger, trigger, run)
    staged = stage_two_plan(results, trigger, client, settings, allowed)
    if staged.reason is not None:
        if staged.failure is not None:
            client.create_check_run(staged.failure)
        raise BotError(f"nothing published: the results artifact is inconsistent ({staged.reason})")
    plan = staged.plan
    if plan is None:
        echo("kernel-bot: nothing to publish (no significant improvement, no pull request to comment on).")
        return
    result = client.publish(replace(plan, run_id=run.run_id), settings.max_open_prs)
    if result.base_note:
        echo(f"kernel-bot: {result.base_note}")
    if result.pr_url:
        echo(f"kernel-bot: {'opened' if result.created else 'updated'} {result.pr_url}")
    if result.skipped_reason:
        echo(f"kernel-bot: no pull request: {result.skipped_reason}")
    if result.comment_id:
        echo(f"kernel-bot: sticky comment {result.comment_id} on #{plan.source_pr}")
