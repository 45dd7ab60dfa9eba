"""The `bot` command line: the group, and the commands given problem files (verify, bench,
optimize). The commands run on a repository are in bot.cli.repo; the options in bot.cli.options.
Each command builds the run's `Settings` once from its options and passes it down; a
`BotError` becomes exit code 2."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from bot.cli.engine_options import evaluation_options, optimize_options, verify_options
from bot.cli.options import (
    CACHE,
    DEVICE,
    GPUS,
    JOBS,
    JSON,
    MIN_SPEEDUP,
    REPLICAS,
    SANDBOX,
    SHAPES,
    SHARD,
    TIME_CAP,
    TIMING,
    TOLERANCE,
    names,
    settings_of,
    tuning_options,
)
from bot.cli.output import progress, progress_view, set_quiet, table
from bot.cli.repo import dry_run, merge, plan_cmd, publish, run
from bot.core.domain import Problem
from bot.core.errors import BotError


class BotGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BotError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=BotGroup)
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output (bars or lines) on stderr.")
def main(verbose: bool, quiet: bool) -> None:
    """kernel-bot: verified, honestly measured faster GPU kernels."""
    set_quiet(quiet)
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@main.command()
@click.argument("problem", type=click.Path(dir_okay=False))
@click.argument("candidate", type=click.Path(dir_okay=False))
@TOLERANCE
@DEVICE
@SANDBOX
@JSON
def verify(problem: str, candidate: str, as_json: bool, **given: Any) -> None:
    """Verify CANDIDATE (defines ModelNew) against PROBLEM. Exit 0 accepted, 1 rejected."""
    from bot.engine.evaluation.evaluate import evaluate
    from bot.engine.workspace.candidates import load_candidate
    from bot.engine.workspace.problems import load_problem
    from bot.report.tables import verdict_json

    prob = load_problem(problem)
    cand = load_candidate(candidate)
    options = verify_options(settings_of(given))
    result = evaluate(prob, [cand], None, options, progress)
    outcome = result.candidates[0]
    if as_json:
        click.echo(json.dumps(verdict_json(result), indent=2))
    else:
        click.echo(f"{cand.name}: {outcome.verdict.status.upper()} on {result.environment.device_name}")
        for check in outcome.verdict.checks:
            mark = "ok  " if check.passed else "FAIL"
            click.echo(f"  {mark} {check.name}{': ' + check.evidence if check.evidence else ''}")
    sys.exit(0 if outcome.verdict.accepted else 1)


@main.command()
@click.argument("problem", type=click.Path(dir_okay=False))
@click.argument("candidates", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="Baseline module (ModelNew); default: the problem's TARGET, else its Model.",
)
@TIME_CAP
@MIN_SPEEDUP
@TIMING
@TOLERANCE
@REPLICAS
@SHAPES
@DEVICE
@SANDBOX
@JSON
def bench(
    problem: str, candidates: tuple[str, ...], baseline: str | None, shapes: str | None, as_json: bool, **given: Any
) -> None:
    """Verify, then time CANDIDATES against the baseline in one interleaved run."""
    from bot.engine.evaluation.evaluate import evaluate
    from bot.engine.workspace.candidates import default_baseline, load_candidate
    from bot.engine.workspace.problems import load_problem, only_shapes
    from bot.report.tables import bench_json, render_table

    options = evaluation_options(settings_of(given, use_cache=False))
    prob = only_shapes(load_problem(problem), names(shapes), options.device)
    base = load_candidate(baseline) if baseline else default_baseline(prob)
    result = evaluate(prob, [load_candidate(c) for c in candidates], base, options, progress)
    if as_json:
        click.echo(json.dumps(bench_json(result, options.min_speedup), indent=2))
    else:
        click.echo(render_table(result))


@main.command()
@click.argument("problems", nargs=-1, required=True, type=click.Path())
@tuning_options
@JSON
@click.option("--out", type=click.Path(file_okay=False), help="Write candidates, transcript, results.json.")
@JOBS
@GPUS
@CACHE
@SHAPES
@SHARD
@REPLICAS
def optimize(
    problems: tuple[str, ...],
    as_json: bool,
    out: str | None,
    jobs: int | None,
    gpus: str | None,
    shapes: str | None,
    shard: str | None,
    **given: Any,
) -> None:
    """Find a faster, verified ModelNew for each PROBLEM (search and/or LLM); a PROBLEM may be a
    folder of problem files (e.g. a KernelBench level)."""
    from bot.engine.loop.outputs import render_optimize, write_optimize_outputs
    from bot.engine.loop.pipeline import optimize_all, raise_if_any_failed
    from bot.engine.workspace.problems import load_problems, only_shapes

    options = optimize_options(settings_of(given))
    chosen = load_problems(problems)
    if shard is not None:
        chosen = in_shard(chosen, shard)
        if not chosen and out:  # an empty shard still leaves a results directory for `bot merge`
            write_optimize_outputs(Path(out), [], options.min_speedup)
    loaded = [only_shapes(p, names(shapes), options.evaluation.device) for p in chosen]
    with progress_view(loaded) as view:
        runs = optimize_all(loaded, options, gpus, jobs, Path(out) if out else None, view)
    typed = [r.result for r in runs]
    payload = [p.to_json() for p in typed]
    if as_json:
        click.echo(json.dumps(payload[0] if len(payload) == 1 else {"problems": payload}, indent=2))
    else:
        click.echo(render_optimize(typed, options.min_speedup))
        table(typed)
    raise_if_any_failed(typed)


def in_shard(problems: list[Problem], shard: str) -> list[Problem]:
    """The problems of shard K/N (bot.core.shards), said on stderr: the whole sweep's plan is
    `bot plan --shards N` over the same paths."""
    from bot.core.shards import parse_shard, shard_problems

    k, n = parse_shard(shard)
    mine = shard_problems(problems, k, n)
    click.echo(f"shard {k}/{n}: {len(mine)} of {len(problems)} problem(s)", err=True)
    return mine


for command in (dry_run, run, publish, plan_cmd, merge):
    main.add_command(command)
