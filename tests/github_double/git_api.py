"""The Git Data API (blobs, trees, commits, refs) on top of a real bare repository.

Each `op_*` method is one REST operation, named after its OpenAPI operationId.
"""

from __future__ import annotations

import base64
import binascii

from . import payloads as P
from .git_store import GitStore, Signature
from .records import Request, Response, invalid, not_found, now


class GitDataAPI:
    """Blob, tree, commit and ref operations; the objects are real git objects in `self.git`."""

    api: str
    full_name: str
    git: GitStore

    def op_git_create_blob(self, req: Request) -> Response:
        body = req.body if isinstance(req.body, dict) else {}
        content, encoding = body.get("content"), body.get("encoding", "utf-8")
        try:
            if not isinstance(content, str) or encoding not in ("utf-8", "base64"):
                raise ValueError(encoding)
            data = base64.b64decode(content, validate=True) if encoding == "base64" else content.encode()
        except (ValueError, binascii.Error):
            return invalid(
                "https://docs.github.com/rest/git/blobs#create-a-blob",
                {"resource": "Blob", "field": "content", "code": "invalid"},
            )
        sha = self.git.write_blob(data)
        return Response(
            201,
            {"url": f"{self.api}/repos/{self.full_name}/git/blobs/{sha}", "sha": sha},
            {"Location": f"{self.api}/repos/{self.full_name}/git/blobs/{sha}"},
        )

    def op_git_create_tree(self, req: Request) -> Response:
        doc = "https://docs.github.com/rest/git/trees#create-a-tree"
        body = req.body if isinstance(req.body, dict) else {}
        base = body.get("base_tree")
        if base is not None and self.git.object_type(base) != "tree":
            return invalid(doc, {"resource": "Tree", "field": "base_tree", "code": "invalid"})
        changes = []
        for item in body.get("tree") or []:
            sha = item.get("sha")
            if "content" in item:
                sha = self.git.write_blob(str(item["content"]).encode())
            if sha is not None and self.git.object_type(sha) != item.get("type"):
                return invalid(doc, {"resource": "Tree", "field": "tree.sha", "code": "invalid"})
            if item.get("mode") not in ("100644", "100755", "040000", "160000", "120000"):
                return invalid(doc, {"resource": "Tree", "field": "tree.mode", "code": "invalid"})
            changes.append((item["path"], item["mode"], item["type"], sha))
        sha = self.git.build_tree(base, changes)
        return Response(201, P.git_tree(self.api, self.full_name, sha, self.git.ls_tree(sha)))

    def op_git_get_tree(self, req: Request) -> Response:
        sha = req.params[0]
        if self.git.object_type(sha) != "tree":
            return not_found()
        recursive = req.query.get("recursive") not in (None, "", "0", "false")
        return Response(200, P.git_tree(self.api, self.full_name, sha, self.git.ls_tree(sha, recursive)))

    def op_git_create_commit(self, req: Request) -> Response:
        doc = "https://docs.github.com/rest/git/commits#create-a-commit"
        body = req.body if isinstance(req.body, dict) else {}
        tree, parents = body.get("tree", ""), list(body.get("parents") or [])
        if self.git.object_type(tree) != "tree" or any(self.git.object_type(p) != "commit" for p in parents):
            return invalid(doc, {"resource": "Commit", "field": "tree", "code": "invalid"})
        # Like GitHub: author and committer default to the token's identity, dated now.
        me = Signature(
            req.identity.login, f"{req.identity.user_id}+{req.identity.login}@users.noreply.github.com", now()
        )
        sha = self.git.commit_tree(tree, parents, str(body.get("message", "")), me, me)
        return Response(
            201,
            P.git_commit(self.api, self.full_name, self.git.read_commit(sha)),
            {"Location": f"{self.api}/repos/{self.full_name}/git/commits/{sha}"},
        )

    def op_git_get_commit(self, req: Request) -> Response:
        sha = req.params[0]
        if self.git.object_type(sha) != "commit":
            return not_found()
        return Response(200, P.git_commit(self.api, self.full_name, self.git.read_commit(sha)))

    def op_git_get_ref(self, req: Request) -> Response:
        ref = f"refs/{req.params[0]}"
        sha = self.git.resolve(ref) if not ref.startswith("refs/pull/") else None
        return Response(200, P.git_ref(self.api, self.full_name, ref, sha)) if sha else not_found()

    def op_git_create_ref(self, req: Request) -> Response:
        doc = "https://docs.github.com/rest/git/refs#create-a-reference"
        body = req.body if isinstance(req.body, dict) else {}
        ref, sha = str(body.get("ref", "")), str(body.get("sha", ""))
        if not ref.startswith("refs/") or ref.count("/") < 2:
            return invalid(doc, {"resource": "Reference", "field": "ref", "code": "invalid"})
        if self.git.resolve(ref):
            return Response(422, P.error(422, "Reference already exists", doc))
        if self.git.object_type(sha) != "commit":
            return Response(422, P.error(422, "Object does not exist", doc))
        self.git.update_ref(ref, sha)
        return Response(
            201,
            P.git_ref(self.api, self.full_name, ref, sha),
            {"Location": f"{self.api}/repos/{self.full_name}/git/{ref}"},
        )

    def op_git_update_ref(self, req: Request) -> Response:
        doc = "https://docs.github.com/rest/git/refs#update-a-reference"
        ref = f"refs/{req.params[0]}"
        body = req.body if isinstance(req.body, dict) else {}
        old, sha = self.git.resolve(ref), str(body.get("sha", ""))
        if old is None:
            return Response(422, P.error(422, "Reference does not exist", doc))
        if self.git.object_type(sha) != "commit":
            return Response(422, P.error(422, "Object does not exist", doc))
        if not body.get("force") and not self.git.is_ancestor(old, sha):
            return Response(422, P.error(422, "Update is not a fast forward", doc))
        self.git.update_ref(ref, sha)
        return Response(200, P.git_ref(self.api, self.full_name, ref, sha))
