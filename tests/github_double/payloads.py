"""JSON bodies shaped like GitHub's, field for field (checked against the OpenAPI description).

Only fields the description documents appear here; `test_github_double_schema` rejects
any other, so a typo cannot pass as "realistic".
"""

from __future__ import annotations

from base64 import b64encode
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

WEB = "https://github.com"
DOCS = "https://docs.github.com/rest"


def iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, number: int) -> str:
    return f"{kind}_" + b64encode(f"{kind}:{number}".encode()).decode().rstrip("=")


def error(status: int, message: str, doc: str = DOCS) -> dict[str, Any]:
    return {"message": message, "documentation_url": doc, "status": str(status)}


def validation_error(errors: list[dict[str, Any]], doc: str = DOCS) -> dict[str, Any]:
    return {"message": "Validation Failed", "errors": errors, "documentation_url": doc, "status": "422"}


_NODE_KIND = {"User": "U", "Bot": "BOT", "Organization": "O"}


def user(api: str, login: str, user_id: int, kind: str = "User") -> dict[str, Any]:
    quoted = quote(login)  # "github-actions[bot]" -> "github-actions%5Bbot%5D", a valid URI
    url = f"{api}/users/{quoted}"
    html = f"{WEB}/apps/{login.removesuffix('[bot]')}" if kind == "Bot" else f"{WEB}/{quoted}"
    return {
        "login": login,
        "id": user_id,
        "node_id": node_id(_NODE_KIND.get(kind, "U"), user_id),
        "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id}?v=4",
        "gravatar_id": "",
        "url": url,
        "html_url": html,
        "followers_url": f"{url}/followers",
        "following_url": f"{url}/following{{/other_user}}",
        "gists_url": f"{url}/gists{{/gist_id}}",
        "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{url}/subscriptions",
        "organizations_url": f"{url}/orgs",
        "repos_url": f"{url}/repos",
        "events_url": f"{url}/events{{/privacy}}",
        "received_events_url": f"{url}/received_events",
        "type": kind,
        "user_view_type": "public",
        "site_admin": False,
    }


_REPO_URL_TEMPLATES = {
    "archive_url": "{archive_format}{/ref}",
    "assignees_url": "assignees{/user}",
    "blobs_url": "git/blobs{/sha}",
    "branches_url": "branches{/branch}",
    "collaborators_url": "collaborators{/collaborator}",
    "comments_url": "comments{/number}",
    "commits_url": "commits{/sha}",
    "compare_url": "compare/{base}...{head}",
    "contents_url": "contents/{+path}",
    "contributors_url": "contributors",
    "deployments_url": "deployments",
    "downloads_url": "downloads",
    "events_url": "events",
    "forks_url": "forks",
    "git_commits_url": "git/commits{/sha}",
    "git_refs_url": "git/refs{/sha}",
    "git_tags_url": "git/tags{/sha}",
    "hooks_url": "hooks",
    "issue_comment_url": "issues/comments{/number}",
    "issue_events_url": "issues/events{/number}",
    "issues_url": "issues{/number}",
    "keys_url": "keys{/key_id}",
    "labels_url": "labels{/name}",
    "languages_url": "languages",
    "merges_url": "merges",
    "milestones_url": "milestones{/number}",
    "notifications_url": "notifications{?since,all,participating}",
    "pulls_url": "pulls{/number}",
    "releases_url": "releases{/id}",
    "stargazers_url": "stargazers",
    "statuses_url": "statuses/{sha}",
    "subscribers_url": "subscribers",
    "subscription_url": "subscription",
    "tags_url": "tags",
    "teams_url": "teams",
    "trees_url": "git/trees{/sha}",
}


def repository(
    api: str,
    full_name: str,
    repo_id: int,
    owner: dict[str, Any],
    default_branch: str,
    created: datetime,
    *,
    fork: bool = False,
    full: bool = False,
) -> dict[str, Any]:
    """`repository` (inside pull requests) or, with full=True, `full-repository` (GET /repos)."""
    url = f"{api}/repos/{full_name}"
    stamp = iso(created)
    body: dict[str, Any] = {
        "id": repo_id,
        "node_id": node_id("R", repo_id),
        "name": full_name.split("/")[1],
        "full_name": full_name,
        "owner": owner,
        "private": False,
        "html_url": f"{WEB}/{full_name}",
        "description": "Kernels under test",
        "fork": fork,
        "url": url,
        **{key: f"{url}/{suffix}" for key, suffix in _REPO_URL_TEMPLATES.items()},
        "git_url": f"git://github.com/{full_name}.git",
        "ssh_url": f"git@github.com:{full_name}.git",
        "clone_url": f"{WEB}/{full_name}.git",
        "svn_url": f"{WEB}/{full_name}",
        "homepage": None,
        "mirror_url": None,
        "language": "Python",
        "size": 108,
        "forks": 0,
        "forks_count": 0,
        "stargazers_count": 0,
        "watchers": 0,
        "watchers_count": 0,
        "open_issues": 0,
        "open_issues_count": 0,
        "default_branch": default_branch,
        "has_issues": True,
        "has_projects": True,
        "has_wiki": True,
        "has_pages": False,
        "has_downloads": True,
        "archived": False,
        "disabled": False,
        "visibility": "public",
        "license": None,
        "allow_forking": True,
        "is_template": False,
        "topics": [],
        "pushed_at": stamp,
        "created_at": stamp,
        "updated_at": stamp,
        "permissions": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
    }
    if full:
        body.update({"has_discussions": False, "network_count": 0, "subscribers_count": 1})
    return body


# `minimal-repository` (a workflow run's repositories): the fields of `repository` it documents.
MINIMAL_REPOSITORY_FIELDS = frozenset(
    {"id", "node_id", "name", "full_name", "owner", "private", "html_url", "description", "fork", "url"}
    | {f"{k}" for k in _REPO_URL_TEMPLATES}
    | {"git_url", "ssh_url", "clone_url", "svn_url", "mirror_url", "homepage", "language", "size"}
    | {"forks_count", "stargazers_count", "watchers_count", "default_branch", "open_issues_count"}
    | {"is_template", "topics", "has_issues", "has_projects", "has_wiki", "has_pages", "has_downloads"}
    | {"archived", "disabled", "visibility", "pushed_at", "created_at", "updated_at", "permissions"}
    | {"forks", "open_issues", "watchers", "allow_forking", "license"}
)


def label(api: str, full_name: str, name: str, label_id: int) -> dict[str, Any]:
    return {
        "id": label_id,
        "node_id": node_id("LA", label_id),
        "url": f"{api}/repos/{full_name}/labels/{quote(name)}",
        "name": name,
        "description": f"Label {name}",
        "color": "ededed",
        "default": False,
    }


def git_ref(api: str, full_name: str, ref: str, sha: str) -> dict[str, Any]:
    return {
        "ref": ref,
        "node_id": node_id("REF", int(sha[:8], 16)),
        "url": f"{api}/repos/{full_name}/git/{quote(ref)}",  # "git/refs/heads/x"
        "object": {"type": "commit", "sha": sha, "url": f"{api}/repos/{full_name}/git/commits/{sha}"},
    }


def git_commit(api: str, full_name: str, info: Any) -> dict[str, Any]:
    """`git-commit` from a `git_store.CommitInfo`."""
    base = f"{api}/repos/{full_name}/git"

    def person(sig: Any) -> dict[str, Any]:
        return {"name": sig.name, "email": sig.email, "date": iso(sig.date)}

    return {
        "sha": info.sha,
        "node_id": node_id("C", int(info.sha[:8], 16)),
        "url": f"{base}/commits/{info.sha}",
        "html_url": f"{WEB}/{full_name}/commit/{info.sha}",
        "author": person(info.author),
        "committer": person(info.committer),
        "tree": {"sha": info.tree, "url": f"{base}/trees/{info.tree}"},
        "message": info.message,
        "parents": [
            {"sha": p, "url": f"{base}/commits/{p}", "html_url": f"{WEB}/{full_name}/commit/{p}"} for p in info.parents
        ],
        "verification": {
            "verified": False,
            "reason": "unsigned",
            "signature": None,
            "payload": None,
            "verified_at": None,
        },
    }


def git_tree(api: str, full_name: str, sha: str, entries: list[Any]) -> dict[str, Any]:
    """`git-tree` from `git_store.TreeEntry`s."""
    base = f"{api}/repos/{full_name}/git"
    items = []
    for e in entries:
        item: dict[str, Any] = {"path": e.path, "mode": e.mode, "type": e.type, "sha": e.sha}
        if e.type == "blob":
            item.update(size=e.size, url=f"{base}/blobs/{e.sha}")
        elif e.type == "tree":
            item["url"] = f"{base}/trees/{e.sha}"
        items.append(item)
    return {"sha": sha, "url": f"{base}/trees/{sha}", "tree": items, "truncated": False}


def diff_entry(full_name: str, api: str, head_sha: str, f: Any) -> dict[str, Any]:
    """`diff-entry` from a `git_store.FileDiff`."""
    path = quote(f.path)
    body = {
        "sha": f.sha,
        "filename": f.path,
        "status": f.status,
        "additions": f.additions,
        "deletions": f.deletions,
        "changes": f.additions + f.deletions,
        "blob_url": f"{WEB}/{full_name}/blob/{head_sha}/{path}",
        "raw_url": f"{WEB}/{full_name}/raw/{head_sha}/{path}",
        "contents_url": f"{api}/repos/{full_name}/contents/{path}?ref={head_sha}",
    }
    if f.patch:
        body["patch"] = f.patch
    return body


def github_actions_app(api: str) -> dict[str, Any]:
    """The app GitHub credits for check runs made with GITHUB_TOKEN."""
    created = "2018-07-30T09:30:17Z"
    return {
        "id": 15368,
        "slug": "github-actions",
        "client_id": "Iv1.05c79e9ad1f6bdfa",
        "node_id": "MDM6QXBwMTUzNjg=",
        "owner": user(api, "github", 9919, "Organization"),
        "name": "GitHub Actions",
        "description": "Automate your workflow from idea to production",
        "external_url": "https://help.github.com/en/actions",
        "html_url": f"{WEB}/apps/github-actions",
        "created_at": created,
        "updated_at": "2024-04-10T20:33:16Z",
        "permissions": {
            "actions": "write",
            "checks": "write",
            "contents": "write",
            "issues": "write",
            "metadata": "read",
            "pull_requests": "write",
        },
        "events": ["check_run", "check_suite", "pull_request", "push", "workflow_run"],
    }
