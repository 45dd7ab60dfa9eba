"""The HTTP face of the double: routing, authentication, pagination, fault injection, recording.

A real `ThreadingHTTPServer` on 127.0.0.1 (random port), so PyGithub, requests and urllib3
run unmodified against it via `base_url`.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from . import payloads as P
from .git_store import GitStore
from .records import Identity, Request, Response
from .repository import FakeRepository

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str  # regex for the path after /repos/{owner}/{repo}
    operation_id: str  # the OpenAPI operationId this route implements
    paginated: bool = False


# Exactly the operations bot/github/client.py uses.
ROUTES = (
    Route("GET", "", "repos/get"),
    Route("GET", "/pulls", "pulls/list", paginated=True),
    Route("POST", "/pulls", "pulls/create"),
    Route("GET", r"/pulls/(\d+)", "pulls/get"),
    Route("PATCH", r"/pulls/(\d+)", "pulls/update"),
    Route("GET", r"/pulls/(\d+)/files", "pulls/list-files", paginated=True),
    Route("GET", r"/issues/(\d+)/comments", "issues/list-comments", paginated=True),
    Route("POST", r"/issues/(\d+)/comments", "issues/create-comment"),
    Route("PATCH", r"/issues/comments/(\d+)", "issues/update-comment"),
    Route("GET", r"/git/ref/(.+)", "git/get-ref"),
    Route("POST", "/git/refs", "git/create-ref"),
    Route("PATCH", r"/git/refs/(.+)", "git/update-ref"),
    Route("GET", r"/git/commits/([0-9a-f]{40})", "git/get-commit"),
    Route("POST", "/git/commits", "git/create-commit"),
    Route("GET", r"/git/trees/([0-9a-f]{40})", "git/get-tree"),
    Route("POST", "/git/trees", "git/create-tree"),
    Route("POST", "/git/blobs", "git/create-blob"),
    Route("POST", "/check-runs", "checks/create"),
    Route("GET", r"/commits/([0-9a-f]{40})/pulls", "repos/list-pull-requests-associated-with-commit", paginated=True),
    Route("GET", r"/contents/(.+)", "repos/get-content"),
    Route("GET", r"/commits/([0-9a-f]{40})/check-runs", "checks/list-for-ref"),
    Route("PATCH", r"/check-runs/(\d+)", "checks/update"),
    Route("GET", r"/commits/([0-9a-f]{40})", "repos/get-commit"),
    Route("GET", r"/actions/runs/(\d+)", "actions/get-workflow-run"),
)


@dataclass(frozen=True)
class Fault:
    """A canned failure answered instead of the real one."""

    name: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    carried_out: bool = False  # the request is carried out first, only its answer is lost (a 502 after a write)


SERVER_ERROR = Fault("bad gateway", 502, {"message": "Server Error"})
SECONDARY_RATE_LIMIT = Fault(
    "secondary rate limit",
    403,
    P.error(
        403,
        "You have exceeded a secondary rate limit. Please wait a few minutes before you "
        "try again. If you reach out to GitHub Support for help, please include the "
        "request ID 0000:1111:2222:3333:4444.",
        "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
    ),
    {"Retry-After": "1"},
)


@dataclass(frozen=True)
class Exchange:
    """One request and the response the double gave (kept for the OpenAPI check)."""

    method: str
    path: str
    query: dict[str, str]
    operation_id: str | None
    status: int
    body: Any
    fault: str | None


class GitHubDouble:
    """A fake api.github.com for one repository, backed by a bare git repository."""

    def __init__(self, root: Path, repo: str = "octo-org/octo-repo", default_branch: str = "main") -> None:
        self.repo_name = repo
        self.git = GitStore.init_bare(root / "remote.git", default_branch)
        self.tokens: dict[str, Identity] = {
            "test-token": Identity("github-actions[bot]", 41_898_282),
            "read-only-token": Identity("github-actions[bot]", 41_898_282, can_write=False),
        }
        self.exchanges: list[Exchange] = []
        self._faults: list[tuple[Fault, tuple[str, ...] | None, str | None]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.repo = FakeRepository(self.url, repo, self.git, default_branch)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="github-double", daemon=True
        )  # 50 ms: quick shutdown

    def __enter__(self) -> GitHubDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail_next(
        self, fault: Fault, times: int = 1, methods: tuple[str, ...] | None = None, operation: str | None = None
    ) -> None:
        """Answer the next `times` requests (of `methods`, default any; of `operation`, an
        operationId, default any) with `fault`."""
        self._faults.extend([(fault, methods, operation)] * times)

    @property
    def pending_faults(self) -> int:
        return len(self._faults)

    def dispatch(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> Response:
        with self._lock:
            url = urlsplit(target)
            query = dict(parse_qsl(url.query))
            route, params = self._route(method, url.path)
            response, fault = self._answer(method, route, params, query, headers, raw)
            if route is not None and route.paginated and response.status == 200:
                response = self._paginate(url.path, query, response)
            self.exchanges.append(
                Exchange(
                    method,
                    url.path,
                    query,
                    route.operation_id if route else None,
                    response.status,
                    response.body,
                    fault,
                )
            )
            return response

    def _answer(
        self,
        method: str,
        route: Route | None,
        params: tuple[str, ...],
        query: dict[str, str],
        headers: dict[str, str],
        raw: bytes,
    ) -> tuple[Response, str | None]:
        for i, (fault, methods, operation) in enumerate(self._faults):
            if (methods is None or method in methods) and operation in (None, route and route.operation_id):
                del self._faults[i]
                if fault.carried_out:
                    self._answer(method, route, params, query, headers, raw)
                return Response(fault.status, fault.body, dict(fault.headers)), fault.name
        scheme, _, token = headers.get("authorization", "").partition(" ")
        identity = self.tokens.get(token) if scheme.lower() in ("token", "bearer") else None
        if identity is None:
            return Response(401, P.error(401, "Bad credentials")), None
        if route is None:
            log.warning("github double: no route for %s %s", method, params)
            return Response(404, P.error(404, "Not Found")), None
        if method != "GET" and not identity.can_write:
            return Response(403, P.error(403, "Resource not accessible by integration")), None
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return Response(400, P.error(400, "Problems parsing JSON")), None
        handler = getattr(self.repo, "op_" + re.sub(r"[/-]", "_", route.operation_id))
        return handler(Request(identity, params, query, body)), None

    def _route(self, method: str, path: str) -> tuple[Route | None, tuple[str, ...]]:
        prefix = f"/repos/{self.repo_name}"
        if not (path == prefix or path.startswith(prefix + "/")):
            return None, (path,)
        rest = path[len(prefix) :]
        for route in ROUTES:
            match = re.fullmatch(route.pattern, rest)
            if route.method == method and match:
                return route, tuple(unquote(g) for g in match.groups())
        return None, (rest,)

    def _paginate(self, path: str, query: dict[str, str], response: Response) -> Response:
        per_page = max(1, min(int(query.get("per_page", 30)), 100))
        page = max(1, int(query.get("page", 1)))
        items = response.body
        last = max(1, -(-len(items) // per_page))

        def link(n: int) -> str:
            return f"{self.url}{path}?{urlencode({**query, 'per_page': per_page, 'page': n})}"

        rels = ([("prev", page - 1), ("first", 1)] if page > 1 else []) + (
            [("next", page + 1), ("last", last)] if page < last else []
        )
        headers = dict(response.headers)
        if rels:
            headers["Link"] = ", ".join(f'<{link(n)}>; rel="{rel}"' for rel, n in rels)
        return Response(200, items[(page - 1) * per_page : page * per_page], headers)


def _handler_for(double: GitHubDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as requests' connection pool expects

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes; without NODELAY, Nagle's algorithm and
            # delayed ACKs add ~40 ms to every request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _serve(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            response = double.dispatch(self.command, self.path, headers, raw)
            data = b"" if response.body is None else json.dumps(response.body).encode()
            self.send_response(response.status)
            for name, value in {**_standard_headers(), **response.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("github double: " + format, *args)

    return Handler


def _standard_headers() -> dict[str, str]:
    return {
        "Content-Type": "application/json; charset=utf-8",
        "X-GitHub-Media-Type": "github.v3; format=json",
        "X-GitHub-Api-Version-Selected": "2022-11-28",
        "X-RateLimit-Limit": "5000",
        "X-RateLimit-Remaining": "4999",
        "X-RateLimit-Reset": "4102444800",
        "X-RateLimit-Used": "1",
        "X-RateLimit-Resource": "core",
        "X-GitHub-Request-Id": "0000:1111:2222:3333:4444",
    }
