"""Records the double keeps (tests read them directly) and its request/response envelopes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import payloads as P


@dataclass(frozen=True)
class Identity:
    """Who a token authenticates as, and whether it may write (a read-only GITHUB_TOKEN may not)."""

    login: str
    user_id: int
    kind: str = "Bot"
    can_write: bool = True


@dataclass(frozen=True)
class Request:
    identity: Identity
    params: tuple[str, ...]  # path parameters after owner/repo
    query: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class PullRecord:
    number: int
    title: str
    body: str | None
    head_ref: str
    head_repo: str
    base_ref: str
    author: Identity
    created_at: datetime
    updated_at: datetime
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    head_repo_deleted: bool = False  # a fork deleted after the PR was opened


@dataclass
class CommentRecord:
    id: int
    issue_number: int
    body: str
    author: Identity
    created_at: datetime
    updated_at: datetime


@dataclass
class CheckRunRecord:
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    output: dict[str, Any]
    started_at: datetime
    completed_at: datetime | None


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def not_found() -> Response:
    return Response(404, P.error(404, "Not Found"))


def invalid(doc: str, *errors: dict[str, Any]) -> Response:
    return Response(422, P.validation_error(list(errors), doc))


@dataclass
class RunRecord:
    """A workflow run as GitHub records it (stage 1's run, whose artifact stage 2 publishes)."""

    id: int
    event: str
    head_sha: str
    head_branch: str | None
    head_repo: str
    path: str
    pull_requests: list[int]
    created_at: datetime
    conclusion: str | None = "success"
