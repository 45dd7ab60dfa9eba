"""One fake repository: the REST operations plus helpers that seed it from tests."""

from __future__ import annotations

from . import payloads as P
from .contents_api import ContentsAPI
from .git_api import GitDataAPI
from .git_store import GitStore, Signature
from .pulls_api import PullsAPI
from .records import CheckRunRecord, CommentRecord, Identity, PullRecord, RunRecord, now
from .runs_api import RunsAPI

CONTRIBUTOR = Identity("octocat", 583_231, kind="User")


class FakeRepository(PullsAPI, GitDataAPI, ContentsAPI, RunsAPI):
    """`full_name` served from `git`; a fork exists only as a pull request head (refs/pull/N/head)."""

    def __init__(self, api_url: str, full_name: str, git: GitStore, default_branch: str) -> None:
        self.api, self.full_name, self.git, self.default_branch = api_url, full_name, git, default_branch
        self.created_at = now()
        self.owner = P.user(api_url, full_name.split("/")[0], 9_000_001, "Organization")
        self.pulls: dict[int, PullRecord] = {}
        self.comments: dict[int, CommentRecord] = {}
        self.check_runs: dict[int, CheckRunRecord] = {}
        self.runs: dict[int, RunRecord] = {}
        self.emails: dict[str, Identity] = {"octocat@github.com": CONTRIBUTOR}
        self._next_number, self._next_id = 1, 1_000_000_000
        self.commit_files(default_branch, {"README.md": b"# octo-repo\n"}, "Initial commit")

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def new_number(self) -> int:  # issues and pull requests share one sequence, as on GitHub
        self._next_number += 1
        return self._next_number - 1

    # -- seeding (tests call these directly; they bypass HTTP) ---------------------------

    def commit_files(
        self,
        branch: str,
        files: dict[str, bytes | None],
        message: str = "Update files",
        ref: str | None = None,
        parent: str | None = None,
    ) -> str:
        """Commit `files` (None: delete the file) on top of `parent` (default: the ref's tip, else the
        default branch's), as the contributor octocat."""
        ref = ref or f"refs/heads/{branch}"
        parent = parent or self.git.resolve(ref) or self.git.resolve(f"refs/heads/{self.default_branch}")
        base_tree = self.git.read_commit(parent).tree if parent else None
        tree = self.git.build_tree(
            base_tree,
            [
                (path, "100644", "blob", data if data is None else self.git.write_blob(data))
                for path, data in files.items()
            ],
        )
        me = Signature(CONTRIBUTOR.login, "octocat@github.com", now())
        sha = self.git.commit_tree(tree, [parent] if parent else [], message, me, me)
        self.git.update_ref(ref, sha)
        return sha

    def open_pull_request(
        self,
        head: str,
        files: dict[str, bytes],
        title: str = "Faster softmax",
        body: str = "",
        base: str | None = None,
        labels: tuple[str, ...] = (),
        fork: str | None = None,
    ) -> PullRecord:
        """A contributor's pull request; `fork="someone/octo-repo"` keeps its branch out of this repo."""
        base = base or self.default_branch
        number = self.new_number()
        ref = f"refs/pull/{number}/head" if fork else f"refs/heads/{head}"
        self.commit_files(
            head, files, title, ref=ref, parent=self.git.resolve(ref) or self.git.resolve(f"refs/heads/{base}")
        )
        stamp = now()
        pr = PullRecord(
            number, title, body, head, fork or self.full_name, base, CONTRIBUTOR, stamp, stamp, list(labels)
        )
        self.pulls[number] = pr
        return pr

    def delete_fork(self, pr: PullRecord) -> None:
        """The contributor deleted the fork: GitHub then shows the PR's `head.repo` as null
        (the OpenAPI description says otherwise; real responses do this)."""
        pr.head_repo_deleted = True

    def branch_sha(self, branch: str) -> str | None:
        return self.git.resolve(f"refs/heads/{branch}")

    def open_pulls(self) -> list[PullRecord]:
        return [p for p in self.pulls.values() if p.state == "open"]
