"""Stage 1 of the GitHub Action, reading the standard Actions environment.

`bot run`: event -> affected problems -> results directory, on the GPU runner with a read-only
token; `bot merge`: shard results -> one results directory. Stage 2 (`bot publish`: results
directory, untrusted -> GitHub writes) is bot.github.stage_two and imports nothing of this.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bot.config import load_settings, path_allowed
from bot.core.domain import Trigger
from bot.core.errors import BotError
from bot.core.progress import Progress
from bot.core.results import Results
from bot.core.settings import Settings
from bot.github.actions_env import GitHubEnv, github_env, read_event

Echo = Callable[[str], None]


def _append(path: Path | None, text: str) -> None:
    if path is not None:
        with open(path, "a") as fh:
            fh.write(text)


def wants_run(trigger: Trigger, settings: Settings) -> str | None:
    """None when this event should run the bot, else the reason it should not."""
    if trigger.kind != "pull_request":
        return None
    if trigger.action == "labeled" and trigger.label != settings.label:
        return f"label {trigger.label!r} is not {settings.label!r}"
    if settings.label not in trigger.labels:
        return f"the pull request is not labeled {settings.label!r}"
    return None


def _changed_files(trigger: Trigger, env: GitHubEnv, workspace: Path, echo: Echo) -> list[str]:
    """From the PR files API (read-only token), else from git in the workspace."""
    from bot.engine.workspace.changes import changed_files_from_pr, changed_files_git

    if env.token and trigger.pr_number is not None:
        from bot.github.client import GitHubClient

        try:
            client = GitHubClient(env.token, env.repository or "", env.api_url)
            return changed_files_from_pr(client.pull_request_files(trigger.pr_number))
        except BotError as exc:
            echo(f"warning: PR files API failed ({exc}); falling back to git diff")
    if not (trigger.base_sha and trigger.head_sha):
        raise BotError("cannot tell what changed: no token for the PR files API and no base/head sha")
    return changed_files_git(workspace, trigger.base_sha, trigger.head_sha)


@dataclass(frozen=True)
class StageOneInputs:
    """What `bot run` asks of stage one, as its command line gave it."""

    results_dir: Path
    # Settings the command line gave, over the repository's (bot.config.load_settings); the
    # token budget and the search's exclusions among them.
    overrides: Mapping[str, Any]
    shard: str | None  # "K/N": only the K-th of N shards of the problems
    jobs: int | None  # problems optimised at once; None: auto (bot.engine.loop.lanes.resolve_jobs)
    gpus: str | None = None  # GPU lanes: "all" or "0,1" (bot.engine.loop.lanes); None: all


def run_stage_one(
    inputs: StageOneInputs,
    progress: Progress,
    echo: Echo,
    environ: Mapping[str, str] | None = None,
) -> Results | None:
    from bot.cli.engine_options import job_options
    from bot.core.shards import parse_shard, shard_problems
    from bot.engine.loop.pipeline import Job, raise_if_any_failed, run_job, select_problems
    from bot.github.events import trigger_from_event

    results_dir = inputs.results_dir
    env = github_env(environ)
    workspace = env.workspace or Path.cwd()
    settings = load_settings(workspace, environ if environ is not None else os.environ, inputs.overrides)
    trigger = trigger_from_event(env.event_name or "", read_event(env), env.repository or "")
    skip = wants_run(trigger, settings)
    if skip:
        echo(f"kernel-bot: nothing to do ({skip}).")
        _append(env.output, f"results-dir={results_dir}\nbest-speedup=\n")
        return None
    changed = _changed_files(trigger, env, workspace, echo) if trigger.kind == "pull_request" else None
    problems = select_problems(workspace, settings, changed)
    if inputs.shard:
        problems = shard_problems(problems, *parse_shard(inputs.shard))
    if not problems:
        echo("kernel-bot: no problem is affected by this change.")
    job = Job(
        workspace,
        settings,
        trigger,
        job_options(settings),
        results_dir,
        inputs.jobs,
        inputs.gpus,
    )
    results, plan = run_job(job, problems, progress)
    summary = (results_dir / "summary.md").read_text()
    _append(env.step_summary, summary + "\n")
    best = results.best_speedup
    _append(env.output, f"results-dir={results_dir}\nbest-speedup={'' if best is None else f'{best:.3f}'}\n")
    echo(
        f"kernel-bot: {len(results.improved)} of {len(results.problems)} problem(s) improved; results in {results_dir}"
    )
    raise_if_any_failed(results.problems)  # after the results directory, summary and outputs
    return results


def merge_results(dirs: list[Path], out: Path, repo_root: Path, echo: Echo) -> Results:
    """Shard results -> one results directory (the publish stage then treats it as one run)."""
    from bot.engine.loop.pipeline import write_reports
    from bot.github.publish import publish_plan
    from bot.github.untrusted import load_results

    settings = load_settings(repo_root)
    allowed = lambda path: path_allowed(path, settings)  # noqa: E731
    parts = [load_results(d, allowed) for d in dirs]
    seen: set[str] = set()
    problems = []
    for part in parts:
        for problem in part.problems:
            if problem.problem in seen:
                raise BotError(f"problem {problem.problem!r} appears in more than one shard")
            seen.add(problem.problem)
            problems.append(problem)
    merged = replace(parts[0], problems=tuple(sorted(problems, key=lambda p: p.problem)), shards=len(parts))
    out.mkdir(parents=True, exist_ok=True)
    trigger = merged.trigger or Trigger(kind="schedule")
    plan = publish_plan(merged, trigger, repo_root, allowed, settings.problems_dir, settings.chart_path)
    write_reports(out, merged, plan, None)
    echo(f"merged {len(parts)} shard(s), {len(problems)} problem(s) into {out}")
    return merged
