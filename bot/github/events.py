"""GitHub Actions events -> `Trigger` (pure; no PyGithub, so stage 1 runs on a bare GPU image)."""

from __future__ import annotations

from typing import Any

from bot.core.domain import Trigger
from bot.core.errors import BotError

PULL_REQUEST_ACTIONS = ("labeled", "synchronize", "opened", "reopened")


def trigger_from_event(event_name: str, payload: dict[str, Any], repo: str) -> Trigger:
    """Turn a GitHub Actions event (name + event.json payload) into a `Trigger`."""
    default_branch = (payload.get("repository") or {}).get("default_branch")
    if event_name in ("schedule", "workflow_dispatch"):
        return Trigger(kind=event_name, repo=repo, default_branch=default_branch)
    if event_name != "pull_request":
        raise BotError(
            f"unsupported event {event_name!r}: kernel-bot runs on pull_request, schedule and workflow_dispatch"
        )
    action = payload.get("action")
    if action not in PULL_REQUEST_ACTIONS:
        raise BotError(f"unsupported pull_request action {action!r}: expected one of {', '.join(PULL_REQUEST_ACTIONS)}")
    try:
        pr = payload["pull_request"]
        head, base = pr["head"], pr["base"]
        # A deleted fork has `head.repo: null`. Its name is unknown, but it is certainly not
        # `repo`: a placeholder keeps `Trigger.fork` True, so nothing is ever pushed for it.
        head_repo = (head.get("repo") or {}).get("full_name") or f"{head['user']['login']}/(deleted fork)"
        return Trigger(
            kind="pull_request",
            repo=repo,
            action=action,
            pr_number=int(pr["number"]),
            base_ref=base["ref"],
            base_sha=base["sha"],
            head_ref=head["ref"],
            head_sha=head["sha"],
            head_repo=head_repo,
            label=(payload.get("label") or {}).get("name") if action == "labeled" else None,
            labels=tuple(label["name"] for label in pr.get("labels") or ()),
            default_branch=default_branch,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BotError(f"malformed pull_request payload: missing or bad field {exc}") from exc
