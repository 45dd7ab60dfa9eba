"""The whole job between a trigger and a results directory: pick the affected problems,
optimise each, write results.json, reports, chart and patch. Shared by `bot dry-run`
(locally, no GitHub) and `bot run` (stage 1 of the Action)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.config import path_allowed
from bot.core.domain import Problem, PullRequestPlan, Trigger
from bot.core.errors import BotError
from bot.core.progress import ProblemDone, ProblemFailed, Progress
from bot.core.results import ProblemResult, Results
from bot.core.settings import Settings
from bot.engine.loop.attempts import OptimizeOptions
from bot.engine.loop.optimize import failed_result, optimize
from bot.engine.loop.outputs import results_document, write_optimize_outputs, write_results
from bot.engine.loop.problem_run import ProblemRun
from bot.engine.workspace.changes import affected_problems
from bot.engine.workspace.problems import find_problems
from bot.report.chart import results_chart
from bot.report.markdown import render_step_summary
from bot.report.plan import plan_pull_request, reproduce_command


@dataclass(frozen=True)
class Job:
    repo_root: Path
    settings: Settings
    trigger: Trigger
    options: OptimizeOptions
    out: Path
    jobs: int | None = None  # problems at once; None: auto (bot.engine.loop.lanes.resolve_jobs)
    gpus: str | None = None  # GPU lanes: "all" or "0,1" (see bot.engine.loop.lanes)


def select_problems(repo_root: Path, settings: Settings, changed: list[str] | None) -> list[Problem]:
    """All problems (nightly, or `changed` None), else those the changed paths touch."""
    problems = find_problems(repo_root / settings.problems_dir, root=repo_root)
    return problems if changed is None else affected_problems(problems, changed)


def raise_if_any_failed(problems: Sequence[ProblemResult]) -> None:
    """One BotError (exit 2) naming the problems that could not be evaluated; the commands
    call it after they have written and printed everything else."""
    failed = [p for p in problems if p.failed]
    if failed:
        raise BotError(
            f"{len(failed)} of {len(problems)} problem(s) failed (the others' results are "
            "complete): " + "; ".join(str(p.error) for p in failed)
        )


def write_reports(out: Path, results: Results, plan: PullRequestPlan | None, chart: bytes | None) -> None:
    """report.md (the PR body, or the summary when there is no PR), junit.xml, chart, patch."""
    # Imported here: `bot optimize` reaches this module on GPU machines that carry only
    # torch, triton and numpy (the worker/verify/bench path), and junit-xml is for reports.
    from bot.report.junit import render_junit

    write_results(out, results)
    (out / "junit.xml").write_text(render_junit(results))
    (out / "summary.md").write_text(render_step_summary(results))
    (out / "report.md").write_text(plan.body if plan else render_step_summary(results))
    if chart:
        (out / "chart.png").write_bytes(chart)
    (out / "patch.diff").write_text(plan.patch if plan else "")


def optimize_all(
    problems: list[Problem],
    options: OptimizeOptions,
    gpus: str | None,
    jobs: int | None,
    out: Path | None,
    progress: Progress,
    trigger: Trigger | None = None,
) -> list[ProblemRun]:
    """Optimise every problem over the GPU lanes; with `out`, results are written after each
    problem, so a sweep that is cancelled keeps what it finished. A problem that cannot be
    evaluated is a result with its error (callers exit 2 after writing everything)."""
    from dataclasses import replace

    from bot.engine.loop.lanes import Lanes, resolve_jobs, run_problems, visible_gpus
    from bot.engine.workspace.candidates import default_baseline
    from bot.engine.workspace.memory_budget import device_budget

    done: dict[str, ProblemRun] = {}
    device = options.evaluation.device
    lanes = Lanes(visible_gpus(gpus, device))
    at_once = resolve_jobs(jobs, device, len(problems), len(lanes.devices))
    # Each lane's memory, shared by the problems on it: admitted by their measured footprints.
    budgets = {gpu: device_budget(device, gpu) for gpu in lanes.devices}
    # Problems optimised at once share the machine's cores (and a lane's GPU memory): each
    # gets its share of the workers that verify in parallel, not all of them.
    parallel = max(2, options.evaluation.parallel // at_once)

    writing = threading.Lock()  # problems finish on several threads; one results.json

    def keep(problem: Problem, run: ProblemRun) -> ProblemRun:
        with writing:
            done[str(problem.path)] = run
            if out is not None:
                write_optimize_outputs(
                    out, [done[str(p.path)] for p in problems if str(p.path) in done], options.min_speedup, trigger
                )
        progress(ProblemDone(problem.name, run.result.outcome))
        return run

    def work(problem: Problem, gpu: int | None, beside_others: bool) -> ProblemRun:
        lane = replace(
            options,
            evaluation=replace(
                options.evaluation, gpu_index=gpu, parallel=parallel, beside_others=beside_others, memory=budgets[gpu]
            ),
        )
        return keep(problem, optimize(problem, default_baseline(problem), lane, progress))

    def failed(problem: Problem, error: BotError) -> ProblemRun:
        progress(ProblemFailed(problem.name, str(error)))
        return keep(
            problem, failed_result(problem, str(error), time_split=error.time_split, thresholds=options.thresholds)
        )

    return run_problems(problems, work, at_once, lanes, progress, on_error=failed)


def run_job(job: Job, problems: list[Problem], progress: Progress) -> tuple[Results, PullRequestPlan | None]:
    """Optimise every problem, then write the results directory; returns (results, plan)."""
    job.out.mkdir(parents=True, exist_ok=True)
    optimized = optimize_all(problems, job.options, job.gpus, job.jobs, job.out, progress, job.trigger)
    results = results_document([r.result for r in optimized], job.trigger, job.options.min_speedup)
    chart = results_chart(results)
    plan = plan_pull_request(
        results,
        job.trigger,
        job.repo_root,
        lambda path: path_allowed(path, job.settings),
        chart,
        reproduce_command(results, job.settings.problems_dir, job.options.min_speedup),
        job.settings.chart_path,
    )
    write_reports(job.out, results, plan, chart)
    return results, plan


def describe_plan(plan: PullRequestPlan | None) -> str:
    """What a dry run shows: the pull request the bot would open."""
    if plan is None:
        return "No pull request: no candidate was significantly faster than the baseline."
    files = "\n".join(f"  {c.path} ({len(c.content)} bytes)" for c in plan.files) or "  (none)"
    return (
        f"Would open a pull request\n  repository: {plan.repo or '(local)'}\n  branch: {plan.branch}\n"
        f"  base: {plan.base}\n  title: {plan.title}\nFiles:\n{files}\n\n{plan.body}"
    )
