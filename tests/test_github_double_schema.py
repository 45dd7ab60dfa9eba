"""The GitHub double answers like GitHub: every response it gave in a scripted session is
validated against GitHub's official OpenAPI description (@octokit/openapi, pinned)."""

from __future__ import annotations

import pytest
from github_double import ROUTES, GitHubDouble
from github_double.openapi import OpenAPIDescription, npm_file
from github_double.session import scripted_session


@pytest.fixture(scope="module")
def description() -> OpenAPIDescription:
    return OpenAPIDescription.load(npm_file("@octokit/openapi", "generated/api.github.com.json"))


@pytest.fixture(scope="module")
def session_exchanges(tmp_path_factory):
    with GitHubDouble(tmp_path_factory.mktemp("double")) as double:
        scripted_session(double)
        assert double.pending_faults == 0
        return list(double.exchanges)


def test_every_route_matches_its_openapi_operation(description):
    for route in ROUTES:
        path = "/repos/octo-org/octo-repo" + route.pattern.replace(r"(\d+)", "7").replace(
            "([0-9a-f]{40})", "a" * 40
        ).replace("(.+)", "heads/kernel-bot/pr-7")
        op = description.operation(route.method, path)
        assert op is not None and op.operation_id == route.operation_id, (route, op)


def test_session_exercised_every_route(session_exchanges):
    served = {(e.method, e.operation_id) for e in session_exchanges if e.fault is None and e.status < 300}
    missing = [r.operation_id for r in ROUTES if (r.method, r.operation_id) not in served]
    assert not missing, f"routes never answered successfully: {missing}"
    unrouted = [(e.method, e.path) for e in session_exchanges if e.operation_id is None]
    assert not unrouted, f"requests the double does not implement: {unrouted}"


def test_session_covered_failures(session_exchanges):
    statuses = {(e.status, e.fault) for e in session_exchanges}
    assert (502, "bad gateway") in statuses
    assert (403, "secondary rate limit") in statuses
    assert (401, None) in statuses  # unknown token
    assert (403, None) in statuses  # read-only token writing
    assert (404, None) in statuses  # branch not there yet


def test_every_response_matches_the_openapi_description(description, session_exchanges):
    problems = []
    for exchange in session_exchanges:
        op = description.operation(exchange.method, exchange.path)
        assert op is not None, f"{exchange.method} {exchange.path} is not a GitHub operation"
        assert exchange.operation_id in (None, op.operation_id)
        schema = description.response_schema(op, exchange.status)
        if schema is None:
            # Undocumented statuses are only injected faults and auth failures; GitHub
            # sends those as basic errors ({"message", "documentation_url"}).
            assert exchange.fault or exchange.status in (401, 403), exchange
            schema = description.error_schema()
        for error in description.validator(schema).iter_errors(exchange.body):
            where = "/".join(str(p) for p in error.absolute_path)
            problems.append(
                f"{exchange.method} {exchange.path} -> {exchange.status} "
                f"({op.operation_id}) at {where or '<root>'}: {error.message[:300]}"
            )
    assert not problems, f"{len(problems)} schema violations:\n" + "\n".join(problems[:40])


def test_validator_has_teeth(description):
    """The checks above would catch an invented field, a missing one, a bad date or a wrong null."""
    op = description.operation("POST", "/repos/octo-org/octo-repo/git/refs")
    validator = description.validator(description.response_schema(op, 201))
    good = {
        "ref": "refs/heads/x",
        "node_id": "REF_1",
        "url": "https://api.github.com/repos/o/r/git/refs/heads/x",
        "object": {"type": "commit", "sha": "a" * 40, "url": "https://api.github.com/repos/o/r/git/commits/a"},
    }
    assert list(validator.iter_errors(good)) == []
    assert list(validator.iter_errors({**good, "invented": 1}))
    assert list(validator.iter_errors({k: v for k, v in good.items() if k != "node_id"}))
    assert list(validator.iter_errors({**good, "url": "not a uri"}))
    comment_op = description.operation("PATCH", "/repos/octo-org/octo-repo/issues/comments/1")
    comment = description.validator(description.response_schema(comment_op, 200))
    assert any("date-time" in e.message for e in comment.iter_errors({"created_at": "yesterday"}))
    assert any("None is not" in e.message for e in comment.iter_errors({"id": None}))
