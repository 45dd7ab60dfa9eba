"""Repository contents at a ref, and the pull requests of a commit, as GitHub shows them."""

from __future__ import annotations

import base64
import posixpath
import subprocess
from typing import Any

from . import payloads as P
from .git_store import GitStore
from .records import PullRecord, Request, Response, not_found


class ContentsAPI:
    """`repos/get-content` for files, symlinks and directories; the commit -> pulls list."""

    api: str
    full_name: str
    git: GitStore
    default_branch: str
    pulls: dict[int, PullRecord]

    def head_sha(self, pr: PullRecord) -> str | None:
        raise NotImplementedError

    def pull_json(self, pr: PullRecord, simple: bool = False) -> dict[str, Any]:
        raise NotImplementedError

    def _entry(self, commit: str, path: str) -> tuple[str, str, str] | None:
        """(mode, type, sha) of `path` in `commit`'s tree; None when absent."""
        try:
            out = self.git.git("ls-tree", "-z", commit, "--", path).decode()
        except subprocess.CalledProcessError:
            return None
        for record in out.split("\0"):
            if record:
                meta, name = record.split("\t", 1)
                if name == path:
                    mode, kind, sha = meta.split()
                    return mode, kind, sha
        return None

    def _followed(self, commit: str, link: str, target: str) -> tuple[str, bytes] | None:
        """(blob sha, bytes) of the regular file the symlink at `link` points to; None when it
        points elsewhere (outside the repository, to a folder, another link, nothing)."""
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
        if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            return None
        entry = self._entry(commit, resolved)
        if entry is None or entry[0] not in ("100644", "100755"):
            return None
        return entry[2], self.git.read_blob(entry[2])

    def _item(self, path: str, sha: str, kind: str, size: int, ref: str) -> dict[str, Any]:
        url = f"{self.api}/repos/{self.full_name}/contents/{path}?ref={ref}"
        git_url = f"{self.api}/repos/{self.full_name}/git/{'trees' if kind == 'dir' else 'blobs'}/{sha}"
        html = f"{P.WEB}/{self.full_name}/{'tree' if kind == 'dir' else 'blob'}/{ref}/{path}"
        raw = None if kind == "dir" else f"https://raw.githubusercontent.com/{self.full_name}/{ref}/{path}"
        return {
            "type": kind,
            "size": size,
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": sha,
            "url": url,
            "git_url": git_url,
            "html_url": html,
            "download_url": raw,
            "_links": {"self": url, "git": git_url, "html": html},
        }

    def op_repos_get_content(self, req: Request) -> Response:
        path = req.params[0].strip("/")
        ref = req.query.get("ref") or self.default_branch
        commit = ref if self.git.object_type(ref) == "commit" else self.git.resolve(f"refs/heads/{ref}")
        entry = self._entry(commit, path) if commit else None
        if entry is None:
            return not_found()
        mode, kind, sha = entry
        if kind == "tree":
            listing = [
                self._item(f"{path}/{e.path}", e.sha, "dir" if e.type == "tree" else "file", e.size or 0, ref)
                for e in self.git.ls_tree(sha)
            ]
            return Response(200, listing)
        data = self.git.read_blob(sha)
        if mode == "120000":
            # "If the content is a symlink and the symlink's target is a normal file in the
            # repository, then the API responds with the content of the file" (GitHub's docs).
            pointee = self._followed(commit, path, data.decode())
            if pointee is None:
                return Response(200, {**self._item(path, sha, "symlink", len(data), ref), "target": data.decode()})
            sha, data = pointee
        return Response(
            200,
            {
                **self._item(path, sha, "file", len(data), ref),
                "encoding": "base64",
                "content": base64.b64encode(data).decode(),
            },
        )

    def op_repos_list_pull_requests_associated_with_commit(self, req: Request) -> Response:
        sha = req.params[0]
        found = [p for p in self.pulls.values() if self.head_sha(p) == sha]
        found.sort(key=lambda p: p.number, reverse=True)
        return Response(200, [self.pull_json(p, simple=True) for p in found])
