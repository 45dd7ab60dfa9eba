"""Workflow runs and commits as the REST API shows them (GET actions/runs/{id}, GET commits/{sha}).

Each `op_*` method is one REST operation, named after its OpenAPI operationId.
"""

from __future__ import annotations

import re
from typing import Any

from . import payloads as P
from .git_store import GitStore
from .records import Identity, PullRecord, Request, Response, RunRecord, not_found, now

# GitHub links a commit to an account by its email: an account's noreply address
# (`<id>+<login>@users.noreply.github.com`) or one of its verified addresses.
_NOREPLY = re.compile(r"^(\d+)\+(.+)@users\.noreply\.github\.com$")


class RunsAPI:
    """`actions/get-workflow-run` and `repos/get-commit`."""

    api: str
    full_name: str
    git: GitStore
    default_branch: str
    pulls: dict[int, PullRecord]
    runs: dict[int, RunRecord]
    emails: dict[str, Identity]  # verified addresses of known accounts

    def repo_json(self, full_name: str | None = None, full: bool = False) -> dict[str, Any]:
        raise NotImplementedError

    def head_sha(self, pr: PullRecord) -> str | None:
        raise NotImplementedError

    def new_id(self) -> int:
        raise NotImplementedError

    def record_run(
        self,
        event: str,
        head_sha: str,
        head_branch: str | None,
        *,
        head_repo: str | None = None,
        path: str = ".github/workflows/optimize-kernel.yml",
        pull_requests: tuple[int, ...] = (),
        conclusion: str | None = "success",
    ) -> RunRecord:
        """A completed run of stage 1 (seeded by tests, as GitHub Actions would record it)."""
        run = RunRecord(
            self.new_id(),
            event,
            head_sha,
            head_branch,
            head_repo or self.full_name,
            path,
            list(pull_requests),
            now(),
            conclusion,
        )
        self.runs[run.id] = run
        return run

    def account(self, email: str) -> Identity | None:
        found = _NOREPLY.match(email)
        if found:
            login = found.group(2)
            return Identity(login, int(found.group(1)), "Bot" if login.endswith("[bot]") else "User")
        return self.emails.get(email)

    def _minimal_repo(self, full_name: str) -> dict[str, Any]:
        keep = P.MINIMAL_REPOSITORY_FIELDS
        return {k: v for k, v in self.repo_json(full_name).items() if k in keep}

    def run_json(self, run: RunRecord) -> dict[str, Any]:
        base = f"{self.api}/repos/{self.full_name}/actions"
        url = f"{base}/runs/{run.id}"
        info = self.git.read_commit(run.head_sha)
        pulls = []
        for number in run.pull_requests:
            pr = self.pulls[number]

            def end(ref: str, sha: str) -> dict[str, Any]:
                return {"ref": ref, "sha": sha, "repo": {"id": 1_296_269, "url": self.api, "name": self.full_name}}

            pulls.append(
                {
                    "id": 10_000_000 + number,
                    "number": number,
                    "url": f"{self.api}/repos/{self.full_name}/pulls/{number}",
                    "head": end(pr.head_ref, self.head_sha(pr) or ""),
                    "base": end(pr.base_ref, self.git.resolve(f"refs/heads/{pr.base_ref}") or ""),
                }
            )
        actor = P.user(self.api, "octocat", 583_231)
        return {
            "id": run.id,
            "name": run.path.rsplit("/", 1)[-1].removesuffix(".yml"),
            "node_id": P.node_id("WFR", run.id),
            "check_suite_id": run.id + 7,
            "check_suite_node_id": P.node_id("CS", run.id + 7),
            "head_branch": run.head_branch,
            "head_sha": run.head_sha,
            "path": run.path,
            "run_number": run.id % 1000,
            "run_attempt": 1,
            "referenced_workflows": [],
            "event": run.event,
            "status": "completed",
            "conclusion": run.conclusion,
            "workflow_id": 161_335,
            "url": url,
            "html_url": f"{P.WEB}/{self.full_name}/actions/runs/{run.id}",
            "pull_requests": pulls,
            "created_at": P.iso(run.created_at),
            "updated_at": P.iso(run.created_at),
            "actor": actor,
            "triggering_actor": actor,
            "run_started_at": P.iso(run.created_at),
            "jobs_url": f"{url}/jobs",
            "logs_url": f"{url}/logs",
            "check_suite_url": f"{self.api}/repos/{self.full_name}/check-suites/{run.id + 7}",
            "artifacts_url": f"{url}/artifacts",
            "cancel_url": f"{url}/cancel",
            "rerun_url": f"{url}/rerun",
            "previous_attempt_url": None,
            "workflow_url": f"{base}/workflows/161335",
            "head_commit": {
                "id": info.sha,
                "tree_id": info.tree,
                "message": info.message,
                "timestamp": P.iso(info.committer.date),
                "author": {"name": info.author.name, "email": info.author.email},
                "committer": {"name": info.committer.name, "email": info.committer.email},
            },
            "repository": self._minimal_repo(self.full_name),
            "head_repository": self._minimal_repo(run.head_repo),
            "head_repository_id": 1_296_269 + (run.head_repo != self.full_name),
            "display_title": info.message.splitlines()[0] if info.message else "",
        }

    def op_actions_get_workflow_run(self, req: Request) -> Response:
        run = self.runs.get(int(req.params[0]))
        return Response(200, self.run_json(run)) if run else not_found()

    def op_repos_get_commit(self, req: Request) -> Response:
        sha = req.params[0]
        if self.git.object_type(sha) != "commit":
            return not_found()
        info = self.git.read_commit(sha)
        git = P.git_commit(self.api, self.full_name, info)
        url = f"{self.api}/repos/{self.full_name}/commits/{sha}"
        files = self.git.diff(info.parents[0], sha) if info.parents else []
        added, deleted = sum(f.additions for f in files), sum(f.deletions for f in files)

        def user(email: str) -> dict[str, Any] | None:
            who = self.account(email)
            return None if who is None else P.user(self.api, who.login, who.user_id, who.kind)

        return Response(
            200,
            {
                "url": url,
                "sha": sha,
                "node_id": git["node_id"],
                "html_url": git["html_url"],
                "comments_url": f"{url}/comments",
                "commit": {
                    "url": git["url"],
                    "author": git["author"],
                    "committer": git["committer"],
                    "message": info.message,
                    "comment_count": 0,
                    "tree": git["tree"],
                    "verification": git["verification"],
                },
                "author": user(info.author.email),
                "committer": user(info.committer.email),
                "parents": [
                    {"sha": p["sha"], "url": p["url"].replace("/git/commits/", "/commits/"), "html_url": p["html_url"]}
                    for p in git["parents"]
                ],
                "stats": {"additions": added, "deletions": deleted, "total": added + deleted},
                "files": [P.diff_entry(self.full_name, self.api, sha, f) for f in files],
            },
        )
