"""Pull requests, issue comments, check runs and the repository itself, as GitHub shows them.

Each `op_*` method is one REST operation, named after its OpenAPI operationId.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import payloads as P
from .git_store import GitStore
from .records import CheckRunRecord, CommentRecord, PullRecord, Request, Response, invalid, not_found, now


class PullsAPI:
    """Repository, pull request, issue comment and check run operations."""

    api: str
    full_name: str
    git: GitStore
    default_branch: str
    created_at: datetime
    owner: dict[str, Any]
    pulls: dict[int, PullRecord]
    comments: dict[int, CommentRecord]
    check_runs: dict[int, CheckRunRecord]

    def new_id(self) -> int:
        raise NotImplementedError

    def new_number(self) -> int:
        raise NotImplementedError

    # -- representations -----------------------------------------------------------------

    def repo_json(self, full_name: str | None = None, full: bool = False) -> dict[str, Any]:
        name = full_name or self.full_name
        fork = name != self.full_name
        owner = self.owner if not fork else P.user(self.api, name.split("/")[0], 9_000_002)
        return P.repository(
            self.api, name, 1_296_269 + fork, owner, self.default_branch, self.created_at, fork=fork, full=full
        )

    def head_sha(self, pr: PullRecord) -> str | None:
        # GitHub keeps every PR head at refs/pull/N/head; a fork's branch exists nowhere else here.
        if pr.head_repo == self.full_name:
            return self.git.resolve(f"refs/heads/{pr.head_ref}")
        return self.git.resolve(f"refs/pull/{pr.number}/head")

    def pull_json(self, pr: PullRecord, simple: bool = False) -> dict[str, Any]:
        url = f"{self.api}/repos/{self.full_name}/pulls/{pr.number}"
        issue = f"{self.api}/repos/{self.full_name}/issues/{pr.number}"
        html = f"{P.WEB}/{self.full_name}/pull/{pr.number}"
        head_sha, base_sha = self.head_sha(pr) or "", self.git.resolve(f"refs/heads/{pr.base_ref}") or ""
        author = P.user(self.api, pr.author.login, pr.author.user_id, pr.author.kind)
        head_owner = P.user(
            self.api, pr.head_repo.split("/")[0], 9_000_002 if pr.head_repo != self.full_name else 9_000_001
        )

        def end(ref: str, sha: str, repo: str, owner: dict[str, Any]) -> dict[str, Any]:
            return {
                "label": f"{repo.split('/')[0]}:{ref}",
                "ref": ref,
                "sha": sha,
                "user": owner,
                "repo": self.repo_json(repo),
            }

        links = {
            "self": url,
            "html": html,
            "issue": issue,
            "comments": f"{issue}/comments",
            "review_comments": f"{url}/comments",
            "review_comment": f"{self.api}/repos/{self.full_name}/pulls/comments{{/number}}",
            "commits": f"{url}/commits",
            "statuses": f"{self.api}/repos/{self.full_name}/statuses/{head_sha}",
        }
        body: dict[str, Any] = {
            "url": url,
            "id": 10_000_000 + pr.number,
            "node_id": P.node_id("PR", pr.number),
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue,
            "commits_url": links["commits"],
            "review_comments_url": links["review_comments"],
            "review_comment_url": links["review_comment"],
            "comments_url": links["comments"],
            "statuses_url": links["statuses"],
            "number": pr.number,
            "state": pr.state,
            "locked": False,
            "title": pr.title,
            "user": author,
            "body": pr.body,
            "labels": [P.label(self.api, self.full_name, n, 5_000_000 + i) for i, n in enumerate(pr.labels)],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": P.iso(pr.created_at),
            "updated_at": P.iso(pr.updated_at),
            "closed_at": None,
            "merged_at": None,
            "merge_commit_sha": None,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": {
                **end(pr.head_ref, head_sha, pr.head_repo, head_owner),
                **({"repo": None} if pr.head_repo_deleted else {}),
            },
            "base": end(pr.base_ref, base_sha, self.full_name, self.owner),
            "_links": {k: {"href": v} for k, v in links.items()},
            "author_association": "NONE" if pr.author.kind == "Bot" else "CONTRIBUTOR",
            "auto_merge": None,
            "draft": False,
        }
        if simple:
            return body
        files = self.git.diff(base_sha, head_sha) if head_sha and base_sha else []
        body.update(
            {
                "merged": False,
                "mergeable": None,
                "rebaseable": None,
                "mergeable_state": "unknown",
                "merged_by": None,
                "comments": sum(c.issue_number == pr.number for c in self.comments.values()),
                "review_comments": 0,
                "maintainer_can_modify": False,
                "commits": self.git.count_commits(base_sha, head_sha) if files else 0,
                "additions": sum(f.additions for f in files),
                "deletions": sum(f.deletions for f in files),
                "changed_files": len(files),
            }
        )
        return body

    def comment_json(self, c: CommentRecord) -> dict[str, Any]:
        base = f"{self.api}/repos/{self.full_name}/issues"
        return {
            "id": c.id,
            "node_id": P.node_id("IC", c.id),
            "url": f"{base}/comments/{c.id}",
            "html_url": f"{P.WEB}/{self.full_name}/pull/{c.issue_number}#issuecomment-{c.id}",
            "body": c.body,
            "user": P.user(self.api, c.author.login, c.author.user_id, c.author.kind),
            "created_at": P.iso(c.created_at),
            "updated_at": P.iso(c.updated_at),
            "issue_url": f"{base}/{c.issue_number}",
            "author_association": "NONE",
        }

    def check_run_json(self, run: CheckRunRecord) -> dict[str, Any]:
        url = f"{self.api}/repos/{self.full_name}/check-runs/{run.id}"
        output = {
            "title": None,
            "summary": None,
            "text": None,
            **run.output,
            "annotations_count": 0,
            "annotations_url": f"{url}/annotations",
        }
        return {
            "id": run.id,
            "head_sha": run.head_sha,
            "node_id": P.node_id("CR", run.id),
            "external_id": "",
            "url": url,
            "html_url": f"{P.WEB}/{self.full_name}/runs/{run.id}",
            "details_url": f"{P.WEB}/{self.full_name}/runs/{run.id}",
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": P.iso(run.started_at),
            "completed_at": P.iso(run.completed_at),
            "output": output,
            "name": run.name,
            "check_suite": {"id": run.id + 7},
            "app": P.github_actions_app(self.api),
            "pull_requests": [],
        }

    # -- pull requests and comments ------------------------------------------------------

    def op_repos_get(self, req: Request) -> Response:
        return Response(200, self.repo_json(full=True))

    def op_pulls_list(self, req: Request) -> Response:
        state, head, base = req.query.get("state", "open"), req.query.get("head"), req.query.get("base")
        found = [
            p
            for p in self.pulls.values()
            if state in ("all", p.state)
            and (head is None or f"{p.head_repo.split('/')[0]}:{p.head_ref}" == head)
            and (base is None or p.base_ref == base)
        ]
        found.sort(key=lambda p: p.number, reverse=True)  # GitHub's default: newest first
        return Response(200, [self.pull_json(p, simple=True) for p in found])

    def op_pulls_get(self, req: Request) -> Response:
        pr = self.pulls.get(int(req.params[0]))
        return Response(200, self.pull_json(pr)) if pr else not_found()

    def op_pulls_create(self, req: Request) -> Response:
        doc = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
        body = req.body if isinstance(req.body, dict) else {}
        owner, _, head_ref = str(body.get("head", "")).rpartition(":")
        head_repo = self.full_name if owner in ("", self.full_name.split("/")[0]) else None
        base_sha = self.git.resolve(f"refs/heads/{body.get('base', '')}")
        head_sha = self.git.resolve(f"refs/heads/{head_ref}") if head_repo else None
        if not body.get("title"):
            return invalid(doc, {"resource": "PullRequest", "field": "title", "code": "missing_field"})
        if base_sha is None:
            return invalid(doc, {"resource": "PullRequest", "field": "base", "code": "invalid"})
        if head_sha is None:
            return invalid(doc, {"resource": "PullRequest", "field": "head", "code": "invalid"})
        if any(
            p.state == "open" and p.head_ref == head_ref and p.head_repo == head_repo and p.base_ref == body["base"]
            for p in self.pulls.values()
        ):
            return invalid(
                doc,
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for {body['head']}.",
                },
            )
        if self.git.is_ancestor(head_sha, base_sha):
            return invalid(
                doc,
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"No commits between {body['base']} and {head_ref}",
                },
            )
        stamp = now()
        pr = PullRecord(
            self.new_number(),
            body["title"],
            body.get("body"),
            head_ref,
            self.full_name,
            body["base"],
            req.identity,
            stamp,
            stamp,
        )
        self.pulls[pr.number] = pr
        return Response(201, self.pull_json(pr))

    def op_pulls_update(self, req: Request) -> Response:
        pr = self.pulls.get(int(req.params[0]))
        if pr is None:
            return not_found()
        body = req.body if isinstance(req.body, dict) else {}
        pr.title = body.get("title", pr.title)
        pr.body = body.get("body", pr.body)
        pr.state = body.get("state", pr.state)
        pr.updated_at = now()
        return Response(200, self.pull_json(pr))

    def op_pulls_list_files(self, req: Request) -> Response:
        pr = self.pulls.get(int(req.params[0]))
        if pr is None:
            return not_found()
        head, base = self.head_sha(pr), self.git.resolve(f"refs/heads/{pr.base_ref}")
        files = self.git.diff(base, head) if head and base else []
        return Response(200, [P.diff_entry(self.full_name, self.api, head or "", f) for f in files])

    def op_issues_list_comments(self, req: Request) -> Response:
        number = int(req.params[0])
        if number not in self.pulls:
            return not_found()
        return Response(200, [self.comment_json(c) for c in self.comments.values() if c.issue_number == number])

    def op_issues_create_comment(self, req: Request) -> Response:
        number = int(req.params[0])
        if number not in self.pulls:
            return not_found()
        body = req.body.get("body") if isinstance(req.body, dict) else None
        if not isinstance(body, str) or not body:
            return invalid(
                "https://docs.github.com/rest/issues/comments#create-an-issue-comment",
                {"resource": "IssueComment", "field": "body", "code": "missing_field"},
            )
        stamp = now()
        comment = CommentRecord(self.new_id(), number, body, req.identity, stamp, stamp)
        self.comments[comment.id] = comment
        return Response(201, self.comment_json(comment))

    def op_issues_update_comment(self, req: Request) -> Response:
        comment = self.comments.get(int(req.params[0]))
        if comment is None:
            return not_found()
        body = req.body.get("body") if isinstance(req.body, dict) else None
        if not isinstance(body, str) or not body:
            return invalid(
                "https://docs.github.com/rest/issues/comments#update-an-issue-comment",
                {"resource": "IssueComment", "field": "body", "code": "missing_field"},
            )
        comment.body, comment.updated_at = body, now()
        return Response(200, self.comment_json(comment))

    def op_checks_create(self, req: Request) -> Response:
        doc = "https://docs.github.com/rest/checks/runs#create-a-check-run"
        body = req.body if isinstance(req.body, dict) else {}
        sha = str(body.get("head_sha", ""))
        if self.git.object_type(sha) != "commit" or len(sha) != 40:
            return invalid(doc, {"resource": "CheckRun", "field": "head_sha", "code": "invalid"})
        status, conclusion = body.get("status", "queued"), body.get("conclusion")
        if (status == "completed") != (conclusion is not None):
            return invalid(doc, {"resource": "CheckRun", "field": "conclusion", "code": "missing_field"})
        output = {k: v for k, v in (body.get("output") or {}).items() if k in ("title", "summary", "text")}
        stamp = now()
        run = CheckRunRecord(
            self.new_id(),
            str(body.get("name")),
            sha,
            status,
            conclusion,
            output,
            stamp,
            stamp if status == "completed" else None,
        )
        self.check_runs[run.id] = run
        return Response(201, self.check_run_json(run))

    def op_checks_list_for_ref(self, req: Request) -> Response:
        name = req.query.get("check_name")
        runs = sorted(
            (r for r in self.check_runs.values() if r.head_sha == req.params[0] and (name is None or r.name == name)),
            key=lambda r: r.id,
            reverse=True,
        )
        return Response(200, {"total_count": len(runs), "check_runs": [self.check_run_json(r) for r in runs]})

    def op_checks_update(self, req: Request) -> Response:
        run = self.check_runs.get(int(req.params[0]))
        if run is None:
            return not_found()
        body = req.body if isinstance(req.body, dict) else {}
        run.status = body.get("status", run.status)
        run.conclusion = body.get("conclusion", run.conclusion)
        run.output = {k: v for k, v in (body.get("output") or run.output).items() if k in ("title", "summary", "text")}
        run.completed_at = now() if run.status == "completed" else None
        return Response(200, self.check_run_json(run))
