"""Stage 2: untrusted results in, a follow-up PR / sticky comment / check run out.

Runs default-branch code with a write token and trusts nothing in the artifact: where to
publish comes from the `workflow_run` event and the API (bot.github.identity), which file each
problem may change from the problem file at the measured commit (bot.core.scope), every number
from the raw samples (bot.github.rederive), and all text is made inert (bot.core.safe_text).
The whole plan is built and checked before the first write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bot.core.domain import CheckRunPlan, PullRequestPlan, Trigger
from bot.core.errors import BotError
from bot.core.results import Results
from bot.core.safe_text import inert, inert_results
from bot.core.scope import FileReader, scoped_changes
from bot.core.settings import DEFAULTS, Settings
from bot.github.rederive import InconsistentArtifact, rederive
from bot.report import data as rd
from bot.report.chart import results_chart
from bot.report.plan import CHART_PATH, CHECK_NAME, plan_pull_request, reproduce_command


@dataclass(frozen=True)
class StagePlan:
    """What stage 2 will write: the plan, or (for an inconsistent artifact) one failed check run."""

    plan: PullRequestPlan | None
    failure: CheckRunPlan | None = None
    reason: str | None = None  # why the artifact is inconsistent (for the error line)


def inconsistent_check(trigger: Trigger, exc: InconsistentArtifact) -> CheckRunPlan | None:
    """The failed check run that says why nothing was published."""
    if not trigger.head_sha:
        return None
    return CheckRunPlan(
        CHECK_NAME,
        trigger.head_sha,
        "failure",
        "the results artifact is inconsistent",
        "kernel-bot published nothing: a number in the results artifact does not follow "
        f"from its own raw samples.\n\n{inert(str(exc))}",
    )


def stage_two_plan(
    results: Results, trigger: Trigger, reader: FileReader, settings: Settings, allowed: Callable[[str], bool]
) -> StagePlan:
    """Validated results + trusted trigger -> the complete plan; BotError when something is out
    of scope, a failure check run when the numbers do not follow from the samples."""
    # Made inert once, here, before anything reads it: every string below (names, reasons,
    # map keys, error messages that quote them) reaches the renderers and GitHub already inert.
    results = inert_results(results)
    try:
        derived = rederive(results, settings.min_speedup, settings.max_plausible_speedup)
    except InconsistentArtifact as exc:
        return StagePlan(None, inconsistent_check(trigger, exc), str(exc))
    for problem in rd.improved(derived):
        # What counts as correct is stage 2's policy too, as the bars above are; stage 2 cannot
        # verify again, but it claims nothing judged by a looser (or unstated) rule.
        if problem.tolerance != settings.tolerance:
            raise BotError(
                f"{problem.problem}: its candidates were verified under the {problem.tolerance or 'unstated'} "
                f"tolerance policy, not stage 2's {settings.tolerance} one; nothing is published"
            )
    if not trigger.head_sha:
        raise BotError("no head commit for this run: cannot tell which problem files to trust")
    changes = {
        c.path: c
        for c in scoped_changes(
            rd.improved(derived), trigger.head_sha, reader, settings.problems_dir, settings.chart_path, allowed
        )
    }
    shown = derived
    chart = results_chart(shown)

    def current(path: str) -> str | None:
        if path not in changes:  # every written path was scoped above: anything else is a bug
            raise BotError(f"refusing to write {path}: not a scoped TARGET")
        return changes[path].current

    # No local checkout is read: `current` serves every file's text from the API at head_sha.
    plan = plan_pull_request(
        shown,
        trigger,
        current,
        lambda path: path in changes,
        chart,
        reproduce_command(shown, settings.problems_dir, settings.min_speedup),
        settings.chart_path,
    )
    for change in plan.files if plan else ():
        scoped = changes.get(change.path)
        drawn_here = bool(settings.chart_path) and change.path == settings.chart_path and change.content == chart
        if not drawn_here and (scoped is None or change.content != scoped.source.encode()):
            raise BotError(f"refusing to write {change.path}: not the verified candidate for a scoped TARGET")
    if plan is None:
        return StagePlan(None)
    # What the numbers rest on: each TARGET and the problem file that defines it correct.
    problems = {f"{settings.problems_dir.strip('/')}/{c.problem}.py" for c in changes.values()}
    return StagePlan(replace(plan, measured_sha=trigger.head_sha, measured_paths=tuple(sorted({*changes, *problems}))))


def publish_plan(
    results: Results,
    trigger: Trigger,
    repo_root: Path,
    allowed: Callable[[str], bool],
    problems_dir: str = "problems",
    chart_path: str = CHART_PATH,
) -> PullRequestPlan | None:
    """The plan of a merged shard run on the runner itself (reports only; nothing is written
    to GitHub from it): files come from `repo_root`, checked against `allowed`."""
    chart = results_chart(results)
    plan = plan_pull_request(
        results,
        trigger,
        repo_root,
        allowed,
        chart,
        reproduce_command(
            results, problems_dir, DEFAULTS.min_speedup if results.min_speedup is None else results.min_speedup
        ),
        chart_path,
    )
    for change in plan.files if plan else ():
        drawn_here = bool(chart_path) and change.path == chart_path and change.content == chart
        if not drawn_here and not allowed(change.path):
            raise BotError(f"refusing to write {change.path}: outside the configured kernel paths")
    return plan
