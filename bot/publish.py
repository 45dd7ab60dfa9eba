"""Stage 2: untrusted results in, a follow-up PR / sticky comment / check run out.

Runs default-branch code with a write token. Where to publish comes from the trusted
`workflow_run` event whenever there is one; the artifact's own claims are used only to fill
gaps the event leaves (GitHub omits `pull_requests` for fork PRs) and only when they agree
with it (same head commit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from bot.chart import results_chart
from bot.domain import PullRequestPlan, Trigger
from bot.errors import BotError
from bot.plan import CHART_PATH, plan_pull_request


def _from_results(claimed: dict[str, Any]) -> Trigger:
    fields = {k: claimed.get(k) for k in ("kind", "repo", "action", "pr_number", "base_ref", "base_sha",
                                          "head_ref", "head_sha", "head_repo", "label", "default_branch")}
    fields["labels"] = tuple(str(x) for x in claimed.get("labels") or ())
    if fields["kind"] not in ("pull_request", "schedule", "workflow_dispatch", "cli"):
        raise BotError(f"untrusted results rejected: trigger kind {fields['kind']!r}")
    if fields["pr_number"] is not None and not isinstance(fields["pr_number"], int):
        raise BotError("untrusted results rejected: trigger.pr_number is not an integer")
    return Trigger(**fields)


def trusted_trigger(event_name: str | None, payload: dict[str, Any] | None, repo: str,
                    claimed: dict[str, Any]) -> Trigger:
    """The trigger stage 2 acts on: the workflow_run event wins over the artifact."""
    if event_name != "workflow_run" or not payload:
        # Run by hand (e.g. `bot publish` on a downloaded artifact): the operator vouches for it.
        trigger = _from_results(claimed)
        return Trigger(**{**trigger.__dict__, "repo": repo})
    run = payload.get("workflow_run") or {}
    kind = run.get("event")
    head_repo = (run.get("head_repository") or {}).get("full_name")
    default_branch = (payload.get("repository") or {}).get("default_branch")
    if kind in ("schedule", "workflow_dispatch"):
        return Trigger(kind=kind, repo=repo, head_ref=run.get("head_branch"), head_sha=run.get("head_sha"),
                       default_branch=default_branch)
    if kind != "pull_request":
        raise BotError(f"workflow_run for a {kind!r} event: nothing to publish")
    prs = run.get("pull_requests") or []
    number = prs[0].get("number") if prs else None
    if number is None:  # fork PRs: GitHub leaves pull_requests empty
        if claimed.get("head_sha") != run.get("head_sha"):
            raise BotError("the results claim another commit than the workflow run that made them")
        number = claimed.get("pr_number")
        if not isinstance(number, int):
            raise BotError("cannot tell which pull request these results belong to")
    return Trigger(kind="pull_request", repo=repo, pr_number=number, head_ref=run.get("head_branch"),
                   head_sha=run.get("head_sha"), head_repo=head_repo, default_branch=default_branch,
                   base_ref=(prs[0].get("base") or {}).get("ref") if prs else None)


def publish_plan(results: dict[str, Any], trigger: Trigger, repo_root: Path,
                 allowed: Callable[[str], bool], problems_dir: str = "problems",
                 chart_path: str = CHART_PATH) -> PullRequestPlan | None:
    """The plan from validated results; every file it writes, but the chart drawn here, is
    checked against `allowed` again."""
    chart = results_chart(results)
    problems = results.get("problems", [])
    paths = " ".join(f"{problems_dir}/{p['problem']}.py" for p in problems)
    # Untrusted text: only the two known device names reach the command.
    on_cpu = bool(problems) and all((p.get("environment") or {}).get("device") == "cpu" for p in problems)
    plan = plan_pull_request(results, trigger, repo_root, allowed, chart,
                             f"bot optimize {paths} --min-speedup {results.get('min_speedup', 1.05)} "
                             f"--device {'cpu' if on_cpu else 'cuda'}", chart_path)
    for change in plan.files if plan else ():
        drawn_here = bool(chart_path) and change.path == chart_path and change.content == chart
        if not drawn_here and not allowed(change.path):
            raise BotError(f"refusing to write {change.path}: outside the configured kernel paths")
    return plan
