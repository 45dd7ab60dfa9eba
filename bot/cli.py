"""The `bot` command line: builds dependencies, maps `BotError` to exit code 2."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import click

from bot.core.errors import BotError
from bot.core.measurement import STEADY_REPLICAS
from bot.core.results import ProblemResult
from bot.options import evaluation_options, job_options, optimize_options, resolve_device

DEVICE = click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where candidates run.",
)
SANDBOX = click.option(
    "--sandbox",
    type=click.Choice(["process", "docker"]),
    default="process",
    show_default=True,
    help="How untrusted candidates are isolated.",
)
JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
GPUS = click.option(
    "--gpus",
    default=None,
    help="GPU lanes: 'all' (default) or e.g. 0,1; timing is exclusive per GPU, problems are spread over them.",
)
SHAPES = click.option(
    "--shapes", default=None, metavar="NAME[,NAME]", help="Only these of each problem's shapes (e.g. decode)."
)
TIMING = click.option(
    "--timing",
    type=click.Choice(["latency", "throughput", "graph"]),
    default="latency",
    show_default=True,
    help="GPU: synchronise before each timed call (latency), "
    "time back-to-back calls (throughput: experimental, unreliable on launch-bound shapes), "
    "or time replays of each call captured as a CUDA graph (graph: the GPU's time alone, "
    "as a serving engine's graph-captured decode step pays it). docs/benchmark.md.",
)

# Not a setting of the repository's configuration: a pull request must not be able to turn off
# what keeps one process's offset out of the verdicts.
REPLICAS = click.option(
    "--replicas",
    type=click.IntRange(1, STEADY_REPLICAS),
    default=2,
    show_default=True,
    help="Worker processes per compared contender; the spread between them "
    "widens every interval (1: faster, but one process's offset can pass for a "
    f"speedup; {STEADY_REPLICAS}: a launch-bound shape's median repeats within 1 %). "
    "docs/benchmark.md.",
)


_STARTED = time.monotonic()
_QUIET = False  # -q: no progress at all (set by `main`)


def _progress(message: str) -> None:
    # Seconds since the command started: where a long run spends its time, at a glance.
    if not _QUIET:
        click.echo(f"... [{time.monotonic() - _STARTED:6.1f}s] {message}", err=True)


def _progress_view(problems, device: str):
    """Live bars per problem on a terminal, the plain lines elsewhere, nothing with -q."""
    from bot.progress_view import ProblemPlan, progress_view

    plans = [ProblemPlan(p.name, len(p.shapes_for(device))) for p in problems]
    return progress_view(plans, quiet=_QUIET, started=_STARTED)


def _table(problems: Sequence[ProblemResult]) -> bool:
    """The outcome table, rendered as a table on a terminal (stdout); False where not shown."""
    from bot.progress_view import results_table

    return results_table(problems, sys.stdout)


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
    global _QUIET
    _QUIET = quiet
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@main.command()
@click.argument("problem", type=click.Path(dir_okay=False))
@click.argument("candidate", type=click.Path(dir_okay=False))
@DEVICE
@SANDBOX
@JSON
def verify(problem: str, candidate: str, device: str, sandbox: str, as_json: bool) -> None:
    """Verify CANDIDATE (defines ModelNew) against PROBLEM. Exit 0 accepted, 1 rejected."""
    from bot.engine.candidates import load_candidate
    from bot.engine.evaluate import evaluate
    from bot.engine.problems import load_problem
    from bot.engine.timing import TimingOptions
    from bot.report.tables import verdict_json

    prob = load_problem(problem)
    cand = load_candidate(candidate)
    # A short timed phase: calls made while timing are checked too (caching, streams, floor).
    options = replace(
        evaluation_options(resolve_device(device), sandbox), timing=TimingOptions(time_cap_s=0.3, min_samples=5)
    )
    result = evaluate(prob, [cand], None, options, _progress)
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
@click.option("--time-cap-s", type=float, default=None, help="Timing budget per shape.")
@click.option("--min-speedup", type=float, default=1.05, show_default=True)
@TIMING
@REPLICAS
@SHAPES
@DEVICE
@SANDBOX
@JSON
def bench(
    problem: str,
    candidates: tuple[str, ...],
    baseline: str | None,
    time_cap_s: float | None,
    min_speedup: float,
    device: str,
    sandbox: str,
    as_json: bool,
    timing: str,
    replicas: int,
    shapes: str | None,
) -> None:
    """Verify, then time CANDIDATES against the baseline in one interleaved run."""
    from bot.engine.candidates import default_baseline, load_candidate
    from bot.engine.evaluate import evaluate
    from bot.engine.problems import load_problem, only_shapes
    from bot.report.tables import bench_json, render_table

    dev = resolve_device(device)
    prob = only_shapes(load_problem(problem), _names(shapes), dev)
    base = load_candidate(baseline) if baseline else default_baseline(prob)
    cands = [load_candidate(c) for c in candidates]
    options = evaluation_options(dev, sandbox, time_cap_s, min_speedup, timing_mode=timing, replicas=replicas)
    result = evaluate(prob, cands, base, options, _progress)
    if as_json:
        click.echo(json.dumps(bench_json(result, min_speedup), indent=2))
    else:
        click.echo(render_table(result))


STRATEGY = click.option(
    "--strategy",
    type=click.Choice(["search", "llm", "all"]),
    default="search",
    show_default=True,
    help="search needs no LLM; llm uses an OpenAI-compatible endpoint.",
)
BUDGET = click.option("--budget-s", type=float, default=900.0, show_default=True, help="Wall-clock budget per problem.")


def tuning_options(func):
    """The options `bot optimize`, `bot dry-run` and `bot run` share."""
    for option in reversed(
        [
            STRATEGY,
            click.option("--model", help="LLM model name (llm/all strategies)."),
            click.option(
                "--backend",
                type=click.Choice(["triton", "cuda"]),
                default="triton",
                show_default=True,
                help="What the LLM writes.",
            ),
            click.option("--samples", type=int, default=2, show_default=True, help="LLM samples per round."),
            BUDGET,
            click.option("--max-rounds", type=int, default=5, show_default=True),
            click.option("--max-tokens", type=int, default=None, help="LLM token budget per problem."),
            click.option(
                "--min-speedup",
                type=float,
                default=1.05,
                show_default=True,
                help="Claim only when the 95% interval's lower bound clears this.",
            ),
            click.option(
                "--max-plausible-speedup",
                type=click.FloatRange(1, min_open=True),
                default=100.0,
                show_default=True,
                help="A speedup above this is flagged for a human "
                "('implausible; check the baseline') and never claimed.",
            ),
            click.option("--time-cap-s", type=float, default=None, help="Timing budget per shape."),
            TIMING,
            click.option(
                "--exclude",
                multiple=True,
                metavar="PATTERN",
                help="Leave out search candidates whose name matches (e.g. 'compile-max-autotune*').",
            ),
            DEVICE,
            SANDBOX,
        ]
    ):
        func = option(func)
    return func


@main.command()
@click.argument("problems", nargs=-1, required=True, type=click.Path(dir_okay=False))
@tuning_options
@JSON
@click.option("--out", type=click.Path(file_okay=False), help="Write candidates, transcript, results.json.")
@click.option(
    "--jobs",
    type=int,
    default=1,
    show_default=True,
    help="Problems optimised at once (compilation overlaps, each gets its share of the verification "
    "workers; timing stays exclusive).",
)
@GPUS
@click.option(
    "--cache/--no-cache",
    default=True,
    show_default=True,
    help="Reuse verdicts and timings of candidates judged before on this machine stack.",
)
@SHAPES
@REPLICAS
def optimize(
    problems: tuple[str, ...],
    strategy: str,
    model: str | None,
    backend: str,
    samples: int,
    budget_s: float,
    max_rounds: int,
    max_tokens: int | None,
    min_speedup: float,
    max_plausible_speedup: float,
    time_cap_s: float | None,
    timing: str,
    exclude: tuple[str, ...],
    device: str,
    sandbox: str,
    as_json: bool,
    out: str | None,
    jobs: int,
    gpus: str | None,
    cache: bool,
    shapes: str | None,
    replicas: int,
) -> None:
    """Find a faster, verified ModelNew for each PROBLEM (search and/or LLM)."""
    from bot.engine.outputs import render_optimize
    from bot.engine.pipeline import optimize_all, raise_if_any_failed
    from bot.engine.problems import load_problem, only_shapes

    options = optimize_options(
        device,
        sandbox,
        strategy,
        model,
        backend,
        samples,
        budget_s,
        max_rounds,
        min_speedup,
        time_cap_s,
        max_tokens,
        exclude,
        cache,
        timing,
        replicas,
        max_plausible_speedup,
    )
    loaded = [only_shapes(load_problem(p), _names(shapes), options.evaluation.device) for p in problems]
    with _progress_view(loaded, options.evaluation.device) as progress:
        results = optimize_all(loaded, options, gpus, jobs, Path(out) if out else None, progress)
    typed = [r.to_result(min_speedup) for r in results]
    payload = [p.to_json() for p in typed]
    if as_json:
        click.echo(json.dumps(payload[0] if len(payload) == 1 else {"problems": payload}, indent=2))
    else:
        click.echo(render_optimize(results, min_speedup))
        _table(typed)
    raise_if_any_failed(typed)


def _names(listed: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in listed.split(",") if n.strip()) if listed else ()


def _explicit(ctx: click.Context, **values) -> dict:
    """Options the user actually gave: they override the repository's configuration."""
    from click.core import ParameterSource

    return {k: v for k, v in values.items() if ctx.get_parameter_source(k) not in (ParameterSource.DEFAULT, None)}


@main.command("dry-run")
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
@click.option("--jobs", type=int, default=1, show_default=True)
@GPUS
@click.pass_context
def dry_run(
    ctx: click.Context,
    repo_path: str,
    base: str | None,
    head: str,
    all_problems: bool,
    strategy: str,
    model: str | None,
    backend: str,
    samples: int,
    budget_s: float,
    max_rounds: int,
    max_tokens: int | None,
    min_speedup: float,
    max_plausible_speedup: float,
    time_cap_s: float | None,
    timing: str,
    exclude: tuple[str, ...],
    device: str,
    sandbox: str,
    out: str,
    jobs: int,
    gpus: str | None,
) -> None:
    """The whole pipeline locally, then print the pull request it would open. No GitHub, no token.

    On the default branch with nothing changed, it runs every problem (the embedded default)."""
    from bot.config import load_settings
    from bot.core.domain import Trigger
    from bot.engine.changes import changed_files_git, default_base
    from bot.engine.pipeline import Job, describe_plan, raise_if_any_failed, run_job, select_problems

    repo = Path(repo_path).resolve()
    overrides = _explicit(
        ctx,
        strategy=strategy,
        model=model,
        backend=backend,
        samples=samples,
        budget_s=budget_s,
        max_rounds=max_rounds,
        min_speedup=min_speedup,
        max_plausible_speedup=max_plausible_speedup,
        time_cap_s=time_cap_s,
        timing=timing,
        device=device,
        sandbox=sandbox,
    )
    settings = load_settings(repo, overrides=overrides)
    changed = None
    if not all_problems:
        base_ref = base or default_base(repo)
        changed = changed_files_git(repo, base_ref, head)
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
    job = Job(
        repo, settings, trigger, job_options(settings, max_tokens=max_tokens, exclude=exclude), Path(out), jobs, gpus
    )
    with _progress_view(problems, job.options.evaluation.device) as progress:
        results, plan = run_job(job, problems, progress)
    click.echo(describe_plan(plan))
    _table(results.problems)
    click.echo(f"\nWrote results.json, report.md, junit.xml, patch.diff and candidates to {out}/")
    raise_if_any_failed(results.problems)


@main.command()
@click.option(
    "--results",
    "results_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Where to write the results directory.",
)
@click.option("--shard", help="K/N: only the K-th of N shards of the problems (nightly matrix).")
@tuning_options
@click.option("--jobs", type=int, default=1, show_default=True)
@GPUS
@click.pass_context
def run(
    ctx: click.Context,
    results_dir: str,
    shard: str | None,
    strategy: str,
    model: str | None,
    backend: str,
    samples: int,
    budget_s: float,
    max_rounds: int,
    max_tokens: int | None,
    min_speedup: float,
    max_plausible_speedup: float,
    time_cap_s: float | None,
    timing: str,
    exclude: tuple[str, ...],
    device: str,
    sandbox: str,
    jobs: int,
    gpus: str | None,
) -> None:
    """Stage 1 of the Action (GPU runner, read-only token): event -> results directory."""
    from bot.stage_one import run_stage_one

    overrides = _explicit(
        ctx,
        strategy=strategy,
        model=model,
        backend=backend,
        samples=samples,
        budget_s=budget_s,
        max_rounds=max_rounds,
        min_speedup=min_speedup,
        max_plausible_speedup=max_plausible_speedup,
        time_cap_s=time_cap_s,
        timing=timing,
        device=device,
        sandbox=sandbox,
    )
    run_stage_one(Path(results_dir), overrides, shard, jobs, max_tokens, exclude, _progress, click.echo, gpus=gpus)


@main.command()
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
def publish(results_dir: str, repo_path: str | None) -> None:
    """Stage 2 of the Action (write token): open or update the follow-up PR, comment, check run."""
    from bot.github.stage_two import publish_stage_two

    publish_stage_two(Path(results_dir), Path(repo_path) if repo_path else None, click.echo)


@main.command("plan")
@click.option("--shards", type=int, required=True, help="How many runners share the sweep.")
@click.option("--repo", "repo_path", default=".", type=click.Path(file_okay=False, exists=True))
@JSON
def plan_cmd(shards: int, repo_path: str, as_json: bool) -> None:
    """Print a GitHub Actions matrix that splits every problem over SHARDS runners."""
    from bot.config import load_settings
    from bot.core.shards import matrix
    from bot.engine.pipeline import select_problems

    repo = Path(repo_path).resolve()
    problems = select_problems(repo, load_settings(repo), None)
    result = matrix(problems, shards, repo)
    if as_json:
        click.echo(json.dumps(result, separators=(",", ":")))
    else:
        for entry in result["include"]:
            click.echo(f"shard {entry['shard']} (cost {entry['cost']:g}): {' '.join(entry['problems'])}")


@main.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--repo", "repo_path", default=".", type=click.Path(file_okay=False, exists=True))
def merge(dirs: tuple[str, ...], out: str, repo_path: str) -> None:
    """Combine shard results directories into one results.json, report and PR plan."""
    from bot.stage_one import merge_results

    merge_results([Path(d) for d in dirs], Path(out), Path(repo_path).resolve(), click.echo)
