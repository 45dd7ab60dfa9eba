"""Which problems a change touches: changed files (git or the PR files API) -> `Problem`s.

Local git only, never the network: in CI the checkout already holds both commits, and the
PR files API list is fetched by `bot.github.client` and handed in as plain strings.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path, PurePosixPath

from bot.config import path_matches
from bot.core.domain import Problem
from bot.core.errors import BotError

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 60  # a diff of a large monorepo takes seconds; a hung git must not hang the job


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BotError(f"git {args[0]} in {repo} failed: {exc}") from None


def _check_ref(repo: Path, ref: str) -> None:
    # Refs may come from event payloads; one starting with '-' would be read as an option.
    if not ref or ref.startswith("-"):
        raise BotError(f"invalid git ref {ref!r}")
    out = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if out.returncode != 0 and out.stderr.strip():  # e.g. "not a git repository"
        raise BotError(f"git rev-parse {ref} in {repo}: {out.stderr.strip()}")
    if out.returncode != 0:
        raise BotError(f"unknown git ref {ref!r} in {repo} (not fetched? use fetch-depth: 0)")


def changed_files_git(repo: Path, base: str, head: str) -> list[str]:
    """Files changed on `head` since it forked from `base` (`git diff base...head`), in git's order.

    A rename contributes its new path and its old one: moving a watched file away changes
    what the problem watches just as deleting it would.
    """
    for ref in (base, head):
        _check_ref(repo, ref)
    # -z: paths verbatim (no C-quoting of odd names); -M: rename detection even if the user's
    # config turned it off; --no-relative: repository-relative even from a subfolder or with
    # diff.relative set; --no-ext-diff/--no-textconv: no user-configured programs run.
    out = _git(
        repo,
        "diff",
        "--name-status",
        "-z",
        "-M",
        "--no-relative",
        "--no-ext-diff",
        "--no-textconv",
        f"{base}...{head}",
        "--",
    )
    if out.returncode != 0:
        message = out.stderr.strip() or f"exit status {out.returncode}"
        hint = " (shallow clone? fetch with fetch-depth: 0)" if "merge base" in message else ""
        raise BotError(f"git diff {base}...{head} in {repo}: {message}{hint}")
    fields = out.stdout.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i]
        if status[0] in "RC":  # renames and copies carry two paths: old, then new
            old, new = fields[i + 1], fields[i + 2]
            paths += [new, old] if status[0] == "R" else [new]
            i += 3
        else:
            paths.append(fields[i + 1])
            i += 2
    return list(dict.fromkeys(paths))


def default_base(repo: Path) -> str:
    """The merge-base commit of HEAD with the default branch (origin/HEAD, else main, else master)."""
    candidates = []
    origin_head = _git(repo, "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD")
    if origin_head.returncode == 0 and origin_head.stdout.strip():
        candidates.append(origin_head.stdout.strip())
    # actions/checkout creates no local main and often no origin/HEAD, only origin/<branch>.
    candidates += ["main", "origin/main", "master", "origin/master"]
    for branch in candidates:
        if _git(repo, "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}").returncode != 0:
            continue
        out = _git(repo, "merge-base", "HEAD", branch)
        if out.returncode != 0:
            raise BotError(
                f"no merge base of HEAD and {branch} in {repo}: "
                f"{out.stderr.strip() or 'unrelated histories'} "
                "(shallow clone? fetch with fetch-depth: 0)"
            )
        log.debug("default base: merge-base of HEAD and %s = %s", branch, out.stdout.strip())
        return out.stdout.strip()
    raise BotError(
        f"no default branch in {repo}: none of origin/HEAD, main, master exists; pass the base ref explicitly"
    )


def changed_files_from_pr(files: list[str]) -> list[str]:
    """Normalise the PR files API's names: stripped, no empties, first occurrence kept."""
    return list(dict.fromkeys(f.strip() for f in files if f and f.strip()))


def _normalise(path: str) -> str:
    return PurePosixPath(path.strip()).as_posix()


def _own_relpath(problem: Problem) -> str | None:
    try:
        return problem.path.resolve().relative_to(problem.root.resolve()).as_posix()
    except ValueError:  # a problem loaded from outside the repository: only TARGET/WATCH apply
        return None


def affected_problems(problems: list[Problem], changed: list[str]) -> list[Problem]:
    """Problems whose file, TARGET or WATCH globs match a changed repository-relative path.

    Order follows `problems`, so reports and PRs come out the same on every run.
    """
    paths = [_normalise(p) for p in changed if p.strip()]
    affected = []
    for problem in problems:
        exact = {p for p in (_own_relpath(problem), problem.target_relpath) if p is not None}
        exact = {_normalise(p) for p in exact}
        if any(p in exact or any(path_matches(p, g) for g in problem.watch) for p in paths):
            affected.append(problem)
    return affected
