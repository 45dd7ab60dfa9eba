"""A bare git repository driven through git plumbing: the object store behind the double.

Blobs, trees, commits and refs are real git objects, so SHAs are the ones GitHub would
compute and `git -C bare show branch:path` sees exactly what the Git Data API wrote.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    type: str  # "blob" | "tree" | "commit"
    sha: str
    size: int | None
    path: str


@dataclass(frozen=True)
class Signature:
    name: str
    email: str
    date: datetime


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: Signature
    committer: Signature
    message: str


@dataclass(frozen=True)
class FileDiff:
    status: str  # "added" | "modified" | "removed"
    path: str
    sha: str | None  # blob at head; None when removed
    additions: int
    deletions: int
    patch: str


_STATUS = {"A": "added", "M": "modified", "D": "removed", "T": "changed"}
_ZERO_SHA = "0" * 40


class GitStore:
    """Plumbing on one bare repository (`git --git-dir=path ...`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def init_bare(cls, path: Path, default_branch: str) -> GitStore:
        subprocess.run(
            ["git", "init", "--quiet", "--bare", f"--initial-branch={default_branch}", str(path)], check=True
        )
        return cls(path)

    def git(self, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
        # A clean environment: the host's git config must not change hashes (e.g. signing).
        full_env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.path),
            "GIT_CONFIG_NOSYSTEM": "1",
            "LC_ALL": "C",
            **(env or {}),
        }
        return subprocess.run(
            ["git", f"--git-dir={self.path}", *args], input=stdin, env=full_env, check=True, capture_output=True
        ).stdout

    def object_type(self, sha: str) -> str | None:
        try:
            return self.git("cat-file", "-t", sha).decode().strip()
        except subprocess.CalledProcessError:
            return None

    def write_blob(self, data: bytes) -> str:
        return self.git("hash-object", "-w", "--stdin", stdin=data).decode().strip()

    def read_blob(self, sha: str) -> bytes:
        return self.git("cat-file", "blob", sha)

    def ls_tree(self, tree: str, recursive: bool = False) -> list[TreeEntry]:
        out = self.git("ls-tree", "-l", "-z", *(["-r", "-t"] if recursive else []), tree)
        entries = []
        for record in out.decode().split("\0"):
            if record:
                meta, path = record.split("\t", 1)
                mode, kind, sha, size = meta.split()
                entries.append(TreeEntry(mode, kind, sha, None if size == "-" else int(size), path))
        return entries

    def build_tree(self, base_tree: str | None, changes: list[tuple[str, str, str, str | None]]) -> str:
        """Apply (path, mode, type, sha-or-None-to-delete) to base_tree, as POST /git/trees does."""
        flat = (
            {}
            if base_tree is None
            else {e.path: (e.mode, e.type, e.sha) for e in self.ls_tree(base_tree, recursive=True) if e.type != "tree"}
        )
        for path, mode, kind, sha in changes:
            for existing in [p for p in flat if p == path or p.startswith(path + "/")]:
                del flat[existing]
            parts = path.split("/")
            for i in range(1, len(parts)):  # a file where a directory must now be
                flat.pop("/".join(parts[:i]), None)
            if sha is not None:
                flat[path] = (mode, kind, sha)
        root: dict = {}
        for path, entry in flat.items():
            node = root
            *dirs, name = path.split("/")
            for d in dirs:
                node = node.setdefault(d, {})
            node[name] = entry
        return self._write_tree(root)

    def _write_tree(self, node: dict) -> str:
        lines = []
        for name, value in node.items():
            mode, kind, sha = ("040000", "tree", self._write_tree(value)) if isinstance(value, dict) else value
            lines.append(f"{mode} {kind} {sha}\t{name}\0")
        return self.git("mktree", "-z", stdin="".join(lines).encode()).decode().strip()

    def commit_tree(self, tree: str, parents: list[str], message: str, author: Signature, committer: Signature) -> str:
        env = {
            "GIT_AUTHOR_NAME": author.name,
            "GIT_AUTHOR_EMAIL": author.email,
            "GIT_AUTHOR_DATE": _git_date(author.date),
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            "GIT_COMMITTER_DATE": _git_date(committer.date),
        }
        args = ["commit-tree", tree, *[a for p in parents for a in ("-p", p)], "-F", "-"]
        return self.git(*args, stdin=message.encode(), env=env).decode().strip()

    def read_commit(self, sha: str) -> CommitInfo:
        raw = self.git("cat-file", "commit", sha).decode()
        header, _, message = raw.partition("\n\n")
        tree, parents, people = "", [], {}
        for line in header.splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                tree = value
            elif key == "parent":
                parents.append(value)
            elif key in ("author", "committer"):
                name, _, rest = value.partition(" <")
                email, _, stamp = rest.partition("> ")
                seconds = int(stamp.split()[0])
                people[key] = Signature(name, email, datetime.fromtimestamp(seconds, UTC))
        return CommitInfo(sha, tree, tuple(parents), people["author"], people["committer"], message)

    def resolve(self, ref: str) -> str | None:
        """SHA a full ref name (`refs/heads/main`) points to, or None."""
        try:
            return self.git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
        except subprocess.CalledProcessError:
            return None

    def update_ref(self, ref: str, sha: str) -> None:
        self.git("update-ref", ref, sha)

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        try:
            self.git("merge-base", "--is-ancestor", ancestor, descendant)
            return True
        except subprocess.CalledProcessError:
            return False

    def merge_base(self, a: str, b: str) -> str:
        return self.git("merge-base", a, b).decode().strip()

    def count_commits(self, base: str, head: str) -> int:
        return int(self.git("rev-list", "--count", f"{base}..{head}").decode())

    def diff(self, base: str, head: str) -> list[FileDiff]:
        """Files changed from base to head, like GitHub's three-dot compare (from the merge base)."""
        start = self.merge_base(base, head)
        raw = self.git("diff", "--raw", "--no-abbrev", "--no-renames", "-z", start, head).decode()
        records = raw.split("\0")[:-1]  # ":meta\0path\0" pairs, then a final empty string
        numstat = self.git("diff", "--numstat", "--no-renames", "-z", start, head).decode().split("\0")
        counts: dict[str, tuple[int, int]] = {}
        for record in numstat:
            if record:
                added, deleted, path = record.split("\t", 2)
                counts[path] = (0 if added == "-" else int(added), 0 if deleted == "-" else int(deleted))
        files = []
        for meta, path in zip(records[0::2], records[1::2], strict=True):
            _, _, _, new_sha, status = meta.lstrip(":").split()
            patch = self.git("diff", "--no-renames", start, head, "--", path).decode(errors="replace")
            n_added, n_deleted = counts.get(path, (0, 0))
            files.append(
                FileDiff(
                    _STATUS.get(status[0], "modified"),
                    path,
                    None if new_sha == _ZERO_SHA else new_sha,
                    n_added,
                    n_deleted,
                    patch[patch.find("@@") :] if "@@" in patch else "",
                )
            )
        return files


def _git_date(when: datetime) -> str:
    return f"{int(when.timestamp())} +0000"
