"""results.json + Trigger -> PullRequestPlan: which files, which branch, what text. No network.

The only I/O is reading the current content of the files a plan replaces from a checkout, to
build the patch; everything GitHub needs to publish is decided here, so `bot.github.client` only
executes a plan and tests can assert a whole plan.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from urllib.parse import quote

from bot.core.domain import CheckRunPlan, FileChange, PullRequestPlan, Trigger
from bot.core.repo_path import is_plain_relative
from bot.core.results import ProblemResult, Results
from bot.core.safe_text import title
from bot.core.settings import Device
from bot.report import data as rd
from bot.report.markdown import render_comment, render_pr_body, render_step_summary

CHART_PATH = "docs/kernel-bot/speedups.png"
CHECK_NAME = "kernel-bot"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# A file's text on the follow-up's base; None when it does not exist, ValueError when unusable.
CurrentText = Callable[[str], str | None]


def destination(problem: ProblemResult) -> str | None:
    """The file the problem's best candidate replaces: its TARGET; None where it declares none
    (a follow-up never adds a file: bot.core.scope)."""
    return problem.target or None


def _current_text(repo_root: Path, path: str) -> str | None:
    """The file's text today; None when it does not exist. Raises ValueError when unusable."""
    full = repo_root / path
    if full.is_symlink() or (full.exists() and not full.is_file()):
        # A symlinked TARGET could pull any readable file into a public patch.
        raise ValueError("is a symlink or not a regular file")
    if not full.exists():
        return None
    try:
        return full.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None


def unified_patch(path: str, old: str | None, new: str) -> str:
    """A `git apply`-able diff of one file; `old` None means a new file."""
    old_lines = [] if old is None else old.splitlines(keepends=True)
    lines = list(
        difflib.unified_diff(
            old_lines, new.splitlines(keepends=True), "/dev/null" if old is None else f"a/{path}", f"b/{path}"
        )
    )
    if not lines:
        return ""
    header = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
    # difflib leaves a last line without "\n" unterminated; git wants the marker line after it.
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return header + body


def _best_speedup(problem: ProblemResult) -> float:
    return (problem.best.speedup if problem.best else None) or 0.0


def _title(better: list[ProblemResult], results: Results) -> str:
    device = rd.device_label(results)
    if not better:
        names = ", ".join(p.problem for p in rd.problems(results))
        return f"kernel-bot: no significant improvement for {names}"[:200]
    ranked = sorted(better, key=lambda p: -_best_speedup(p))
    top = ranked[0]
    more = f" and {len(ranked) - 1} more" if len(ranked) > 1 else ""
    return (
        f"kernel-bot: {rd.fmt_speedup(top.best.speedup if top.best else None)} faster "
        f"{top.problem}{more} (verified on {device})"
    )


def _changes(
    better: list[ProblemResult], current: Callable[[str], str | None], allowed: Callable[[str], bool]
) -> tuple[list[FileChange], list[str], list[str]]:
    """(file changes, patch per change, notes about what was dropped and why)."""
    changes: list[FileChange] = []
    patches: list[str] = []
    notes: list[str] = []
    claimed: dict[str, str] = {}
    # Fastest first: when two problems name the same TARGET, the faster candidate keeps it.
    for p in sorted(better, key=lambda p: -_best_speedup(p)):
        name, path, source = p.problem, destination(p), p.best.source if p.best else None
        if path is None:
            notes.append(
                f"{rd.cell(name)}: the problem declares no `TARGET`, so there is no file to "
                "replace; the candidate is in the run's artifact instead."
            )
            continue
        if not isinstance(source, str) or not source:
            notes.append(f"{rd.cell(name)}: the best candidate's source is missing; nothing written.")
            continue
        if not is_plain_relative(path) or not allowed(path):
            notes.append(
                f"{rd.cell(name)}: `{rd.cell(path)}` is outside the paths kernel-bot may "
                "write; the candidate is in the run's artifact instead."
            )
            continue
        if path in claimed:
            notes.append(
                f"{rd.cell(name)}: `{rd.cell(path)}` is already replaced by the faster "
                f"{rd.cell(claimed[path])} candidate; not written."
            )
            continue
        try:
            old = current(path)
        except ValueError as exc:
            notes.append(f"{rd.cell(name)}: `{rd.cell(path)}` {exc}; not written.")
            continue
        if old == source:
            notes.append(f"{rd.cell(name)}: `{rd.cell(path)}` already holds the best candidate.")
            continue
        claimed[path] = name
        changes.append(FileChange(path, source.encode("utf-8")))
        patches.append(unified_patch(path, old, source))
    return changes, patches, notes


def reproduce_command(results: Results, problems_dir: str, min_speedup: float) -> str:
    """The command a reader runs to measure `results` again, as the PR body shows it. Both
    stages build it from the document alone, so the dry run shows what stage 2 publishes."""
    paths = " ".join(f"{problems_dir}/{p.problem}.py" for p in rd.problems(results))
    # Untrusted text: only the two known device names reach the command.
    on_cpu = bool(rd.problems(results)) and all(
        p.environment is not None and p.environment.device == Device.CPU for p in rd.problems(results)
    )
    return f"bot optimize {paths} --min-speedup {min_speedup} --device {'cpu' if on_cpu else 'cuda'}"


def plan_pull_request(
    results: Results,
    trigger: Trigger,
    base_files: Path | CurrentText,
    allowed: Callable[[str], bool],
    chart_png: bytes | None,
    reproduce_command: str,
    chart_path: str = CHART_PATH,
) -> PullRequestPlan | None:
    """The follow-up PR (and sticky comment, check run) for `results`; None when there is
    nothing to publish: no improvement and no pull request to comment on. `base_files` gives
    the text of files on the follow-up's base: a checkout's root, whose files are read as they
    are, or a reader (stage two serves them from the API, with no checkout to read)."""
    better = rd.improved(results)
    is_pr = trigger.kind == "pull_request" and trigger.pr_number is not None
    if not better and not is_pr:
        return None
    repo = trigger.repo or ""
    if is_pr:
        # The follow-up merges into the triggering PR's branch, so it lands together with that PR.
        branch = f"kernel-bot/pr-{trigger.pr_number}"
        base, source_pr = trigger.head_ref or "", trigger.pr_number
    else:
        # Nightly and manual runs target the default branch; the payload may omit its name.
        nightly = trigger.kind in ("schedule", "workflow_dispatch")
        branch = "kernel-bot/nightly" if nightly else "kernel-bot/local"
        base, source_pr = trigger.default_branch or trigger.base_ref or "main", None
    # No candidate may land on the chart's path: that file is the chart's alone.
    changes, patches, notes = _changes(
        better,
        base_files if callable(base_files) else partial(_current_text, base_files),
        lambda path: allowed(path) and path != chart_path,
    )
    chart_url = None
    # A fork's patch travels in a comment: a PNG cannot ride in it and no branch would host it.
    if chart_png and changes and not trigger.fork and chart_path:
        changes.append(FileChange(chart_path, chart_png))
        chart_url = f"https://github.com/{repo}/raw/{quote(branch)}/{chart_path}" if repo else chart_path
    listing = (
        [
            (
                "Files: "
                + ", ".join(f"`{rd.cell(c.path)}`" for c in changes)
                + (" (the chart is binary and not part of the text patch)." if chart_url else ".")
            )
        ]
        if changes
        else []
    )
    patch = "".join(patches)
    body = render_pr_body(results, reproduce_command, chart_url, listing + notes)
    comment = None
    if is_pr:
        pr_url = (
            f"https://github.com/{repo}/pulls?q={quote('is:pr head:' + branch)}"
            if changes and repo and not trigger.fork
            else None
        )
        comment = render_comment(results, patch if trigger.fork and patch else None, pr_url, notes)
    sha = trigger.head_sha or trigger.base_sha
    check = None
    if sha:
        check_title = "no significant improvement"
        if better:
            top = max(better, key=_best_speedup)
            check_title = (
                f"{len(better)} of {len(rd.problems(results))} operators improved, "
                f"best {rd.fmt_speedup(*rd.best_speedup(top))}"
            )
        check = CheckRunPlan(
            CHECK_NAME, sha, "success" if better else "neutral", title(check_title), render_step_summary(results)
        )
    return PullRequestPlan(
        repo=repo,
        branch=branch,
        base=base,
        title=title(_title(better, results)),
        body=body,
        files=tuple(changes),
        patch=patch,
        source_pr=source_pr,
        comment_body=comment,
        fork=trigger.fork,
        check_run=check,
    )
