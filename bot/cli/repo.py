"""The commands run on a repository: `dry-run` locally, `run` and `publish` (the Action's two
stages), `plan` and `merge` (the nightly matrix). Their settings are the repository's
configuration with the options the user actually gave on top (bot.cli.options)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from bot.cli.options import GPUS, JOBS, JSON, SHARD, given_overrides, repository_settings, tuning_options
from bot.cli.output import progress, progress_view, table


@click.command("dry-run")
@click.option(
    "--repo",
    "repo_path",
    default=".",
    type=click.Path(file_okay=False, exists=True),
    show_default=True,
    help="The repository to look at.",
)
@click.option("--base", help="Base ref (default: the merge-base with the default branch).")
@click.option("--head", default="HEAD", show_default=True, help="Head ref.")
@click.option("--all", "all_problems", is_flag=True, help="Every problem, changed or not.")
@tuning_options
@click.option("--out", default="kernel-bot-out", show_default=True, type=click.Path(file_okay=False))
@JOBS
@GPUS
@click.pass_context
def dry_run(
    ctx: click.Context, repo_path: str, base: str | None, head: str, all_problems: bool, out: str, **given: Any
) -> None:
    """The whole pipeline locally, then print the pull request it would open. No GitHub, no token.

    On the default branch with nothing changed, it runs every problem (the embedded default)."""
    from bot.cli.engine_options import job_options
    from bot.core.domain import Trigger
    from bot.engine.loop.pipeline import Job, describe_plan, raise_if_any_failed, run_job, select_problems
    from bot.engine.workspace.changes import changed_files_git, default_base

    repo = Path(repo_path).resolve()
    settings = repository_settings(ctx, repo, given)
    changed = None
    if not all_problems:
        changed = changed_files_git(repo, base or default_base(repo), head)
        if base is None and not changed:
            click.echo(
                "On the default branch with nothing changed: running every problem (the embedded default).", err=True
            )
            changed = None
    problems = select_problems(repo, settings, changed)
    if not problems:
        click.echo(
            f"Nothing relevant changed ({len(changed or [])} changed file(s) touch no problem, "
            "its TARGET or WATCH paths)."
        )
        return
    click.echo(f"Optimising {len(problems)} problem(s): {', '.join(p.name for p in problems)}", err=True)
    trigger = Trigger(kind="cli", base_ref=base, head_ref=head)
    job = Job(repo, settings, trigger, job_options(settings), Path(out), given["jobs"], given["gpus"])
    with progress_view(problems) as view:
        results, plan = run_job(job, problems, view)
    click.echo(describe_plan(plan))
    table(results.problems)
    click.echo(f"\nWrote results.json, report.md, junit.xml, patch.diff and candidates to {out}/")
    raise_if_any_failed(results.problems)


@click.command()
@click.option(
    "--results",
    "results_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Where to write the results directory.",
)
@SHARD
@tuning_options
@JOBS
@GPUS
@click.pass_context
def run(
    ctx: click.Context, results_dir: str, shard: str | None, jobs: int | None, gpus: str | None, **given: Any
) -> None:
    """Stage 1 of the Action (GPU runner, read-only token): event -> results directory."""
    from bot.cli.stage_one import StageOneInputs, run_stage_one

    # The workspace is known only from the event's environment: stage one loads the settings
    # there, with the options the user gave on top.
    overrides = given_overrides(ctx, given)
    run_stage_one(StageOneInputs(Path(results_dir), overrides, shard, jobs, gpus), progress, click.echo)


@click.command()
@click.option(
    "--results",
    "results_dir",
    required=True,
    type=click.Path(file_okay=False, exists=True),
    help="Stage 1's results directory (untrusted).",
)
@click.option(
    "--repo",
    "repo_path",
    default=None,
    type=click.Path(file_okay=False, exists=True),
    help="Checkout of the default branch (default: $GITHUB_WORKSPACE or .).",
)
@click.option(
    "--run-id",
    type=click.IntRange(min=1),
    default=None,
    help="The workflow run whose artifact DIR is (required outside a workflow_run event; "
    "its trigger, commit and branch are read from GitHub).",
)
def publish(results_dir: str, repo_path: str | None, run_id: int | None) -> None:
    """Stage 2 of the Action (write token): open or update the follow-up PR, comment, check run."""
    from bot.github.stage_two import publish_stage_two

    publish_stage_two(Path(results_dir), Path(repo_path) if repo_path else None, click.echo, run_id=run_id)


@click.command("plan")
@click.argument("paths", nargs=-1, type=click.Path(exists=True))
@click.option("--shards", type=int, required=True, help="How many runners (or runs) share the sweep.")
@click.option("--repo", "repo_path", default=".", type=click.Path(file_okay=False, exists=True))
@JSON
def plan_cmd(paths: tuple[str, ...], shards: int, repo_path: str, as_json: bool) -> None:
    """Print a GitHub Actions matrix that splits every problem over SHARDS runners: the
    repository's problems, or those of PATHS (problem files and folders of them, e.g. a
    KernelBench level), as `bot optimize PATHS... --shard K/N` runs them."""
    from bot.config import load_settings
    from bot.core.shards import matrix
    from bot.engine.loop.pipeline import select_problems
    from bot.engine.workspace.problems import load_problems

    repo = Path(repo_path).resolve()
    if paths:
        problems, root = load_problems(paths), Path.cwd().resolve()
    else:
        problems, root = select_problems(repo, load_settings(repo), None), repo
    result = matrix(problems, shards, root)
    if as_json:
        click.echo(json.dumps(result, separators=(",", ":")))
    else:
        for entry in result["include"]:
            click.echo(f"shard {entry['shard']} (cost {entry['cost']:g}): {' '.join(entry['problems'])}")


@click.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--repo", "repo_path", default=".", type=click.Path(file_okay=False, exists=True))
def merge(dirs: tuple[str, ...], out: str, repo_path: str) -> None:
    """Combine shard results directories into one results.json, report and PR plan."""
    from bot.cli.stage_one import merge_results

    merge_results([Path(d) for d in dirs], Path(out), Path(repo_path).resolve(), click.echo)
