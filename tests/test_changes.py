"""Changed files (real git repositories, PR file lists) -> affected problems."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from bot.core.errors import BotError
from bot.engine.workspace.changes import affected_problems, changed_files_from_pr, changed_files_git, default_base
from bot.engine.workspace.problems import find_problems

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
"""
# A hermetic git: no user or system config (no hooks, no signing, no renames=false surprises).
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


@pytest.fixture(autouse=True)
def hermetic_git(monkeypatch):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def write(repo: Path, relpath: str, text: str) -> None:
    path = repo / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path) -> Path:
    """main: three problems and their kernels; feature: forked from it, then main moves on."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(
        root,
        "problems/alpha.py",
        PROBLEM + 'TARGET = "kernels/alpha_impl.py"\nWATCH = ["kernels/alpha*", "csrc/**/alpha*.cu"]\n',
    )
    write(root, "problems/beta.py", PROBLEM)
    write(root, "problems/gamma.py", PROBLEM + 'WATCH = ["shared/**"]\n')
    write(root, "kernels/alpha_impl.py", "# alpha v1\n")
    write(root, "kernels/old_name.py", "# a file that the feature branch renames\n" * 5)
    write(root, "README.md", "hello\n")
    commit(root, "base")
    git(root, "checkout", "-q", "-b", "feature")
    write(root, "kernels/alpha_impl.py", "# alpha v2\n")
    git(root, "mv", "kernels/old_name.py", "kernels/new_name.py")
    write(root, "docs/notes.md", "notes\n")
    commit(root, "feature work")
    git(root, "checkout", "-q", "main")
    write(root, "problems/beta.py", PROBLEM + "# edited on main after the fork\n")
    commit(root, "main moves on")
    git(root, "checkout", "-q", "feature")
    return root


def problems_of(root: Path):
    return find_problems(root / "problems", root=root)


def names(problems) -> list[str]:
    return [p.name for p in problems]


# --- changed_files_git ----------------------------------------------------------------------


def test_diff_since_merge_base_excludes_later_main_commits(repo):
    changed = changed_files_git(repo, "main", "feature")
    # problems/beta.py changed on main after the fork: the three-dot form leaves it out.
    assert changed == ["docs/notes.md", "kernels/alpha_impl.py", "kernels/new_name.py", "kernels/old_name.py"]


def test_rename_reports_new_then_old_path(repo):
    changed = changed_files_git(repo, "main", "HEAD")
    assert changed.index("kernels/new_name.py") + 1 == changed.index("kernels/old_name.py")


def test_result_does_not_depend_on_the_users_diff_config(repo):
    expected = changed_files_git(repo, "main", "feature")
    git(repo, "config", "diff.renames", "false")
    git(repo, "config", "diff.external", "false")  # an external diff program must not run
    git(repo, "config", "diff.relative", "true")
    assert changed_files_git(repo / "kernels", "main", "feature") == expected


def test_accepts_commit_shas(repo):
    base = git(repo, "merge-base", "main", "feature")
    assert changed_files_git(repo, base, git(repo, "rev-parse", "feature")) == changed_files_git(
        repo, "main", "feature"
    )


def test_no_changes_gives_empty_list(repo):
    assert changed_files_git(repo, "feature", "feature") == []


def test_paths_with_spaces_and_unicode_come_out_verbatim(repo):
    write(repo, "kernels/a b/naïve.py", "x\n")
    commit(repo, "odd names")
    assert "kernels/a b/naïve.py" in changed_files_git(repo, "main", "HEAD")


def test_unknown_ref_is_a_bot_error(repo):
    with pytest.raises(BotError) as exc:
        changed_files_git(repo, "no-such-branch", "HEAD")
    assert str(exc.value) == (f"unknown git ref 'no-such-branch' in {repo} (not fetched? use fetch-depth: 0)")


def test_ref_that_looks_like_an_option_is_refused(repo):
    with pytest.raises(BotError) as exc:
        changed_files_git(repo, "--output=/tmp/pwned", "HEAD")
    assert str(exc.value) == "invalid git ref '--output=/tmp/pwned'"


def test_unrelated_histories_report_gits_message(repo):
    git(repo, "checkout", "-q", "--orphan", "orphan")
    write(repo, "other.txt", "x\n")
    commit(repo, "unrelated root")
    with pytest.raises(BotError) as exc:
        changed_files_git(repo, "main", "orphan")
    assert str(exc.value) == (
        f"git diff main...orphan in {repo}: fatal: main...orphan: "
        "no merge base (shallow clone? fetch with fetch-depth: 0)"
    )


def test_not_a_repository_reports_gits_message(tmp_path):
    with pytest.raises(BotError, match=r"^git rev-parse main in .*: fatal: not a git repository"):
        changed_files_git(tmp_path, "main", "HEAD")


# --- default_base ---------------------------------------------------------------------------


def test_default_base_is_merge_base_with_main(repo):
    fork_point = git(repo, "rev-parse", "main~1")
    assert default_base(repo) == fork_point
    assert changed_files_git(repo, default_base(repo), "HEAD")[0] == "docs/notes.md"


def test_default_base_falls_back_to_master(repo):
    git(repo, "branch", "-m", "main", "master")
    assert default_base(repo) == git(repo, "rev-parse", "master~1")


def test_default_base_prefers_origin_head(tmp_path, repo):
    # The clone's origin/HEAD names `trunk`; a local `main` that diverged must not win.
    git(repo, "checkout", "-q", "-b", "trunk", "main")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/trunk")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    assert git(clone, "symbolic-ref", "--short", "refs/remotes/origin/HEAD") == "origin/trunk"
    git(clone, "checkout", "-q", "-b", "work")
    write(clone, "kernels/alpha_impl.py", "# alpha v3\n")
    commit(clone, "work")
    git(clone, "branch", "main", "HEAD")  # a local main at the tip: merge-base would be HEAD
    assert default_base(clone) == git(clone, "rev-parse", "origin/trunk")


def test_no_default_branch_is_a_bot_error(repo):
    git(repo, "branch", "-m", "main", "trunk")
    with pytest.raises(BotError) as exc:
        default_base(repo)
    assert str(exc.value) == (
        f"no default branch in {repo}: none of origin/HEAD, main, master exists; pass the base ref explicitly"
    )


# --- affected_problems ----------------------------------------------------------------------


def test_target_change_selects_the_problem(repo):
    assert names(affected_problems(problems_of(repo), ["kernels/alpha_impl.py"])) == ["alpha"]


def test_problem_file_change_selects_the_problem(repo):
    assert names(affected_problems(problems_of(repo), ["problems/beta.py"])) == ["beta"]


@pytest.mark.parametrize(
    "path, expected",
    [
        ("kernels/alpha_fast.py", ["alpha"]),  # kernels/alpha*
        ("csrc/alpha.cu", ["alpha"]),  # csrc/**/alpha*.cu, `**` = zero segments
        ("csrc/ops/fused/alpha_bwd.cu", ["alpha"]),
        ("csrc/ops/beta.cu", []),
        ("kernels/alpha/sub.py", []),  # `*` does not cross a folder
        ("shared/util/helpers.py", ["gamma"]),  # shared/**
        ("shared", []),
    ],
)
def test_watch_globs(repo, path, expected):
    assert names(affected_problems(problems_of(repo), [path])) == expected


def test_nothing_relevant_gives_empty_list(repo):
    assert affected_problems(problems_of(repo), ["README.md", "docs/notes.md", "bot/cli/main.py"]) == []
    assert affected_problems(problems_of(repo), []) == []


def test_order_follows_the_problem_list_not_the_changes(repo):
    problems = problems_of(repo)
    changed = ["shared/x.py", "problems/beta.py", "kernels/alpha_impl.py"]
    assert names(affected_problems(problems, changed)) == ["alpha", "beta", "gamma"]
    assert names(affected_problems(problems[::-1], changed)) == ["gamma", "beta", "alpha"]


def test_dot_slash_paths_are_normalised(repo):
    assert names(affected_problems(problems_of(repo), ["./kernels/alpha_impl.py"])) == ["alpha"]


def test_renamed_away_file_still_counts(repo):
    write(repo, "problems/delta.py", PROBLEM + 'WATCH = ["kernels/old_*"]\n')
    commit(repo, "delta watches the old name")
    # delta is not in the diff itself, but the rename moved a file it watches away.
    changed = changed_files_git(repo, "main", "HEAD~1")
    assert "delta" in names(affected_problems(problems_of(repo), changed))


def test_git_diff_to_problems_end_to_end(repo):
    changed = changed_files_git(repo, default_base(repo), "HEAD")
    assert names(affected_problems(problems_of(repo), changed)) == ["alpha"]


def test_bundled_problems_map_their_kernels():
    problems = find_problems(ROOT / "problems", root=ROOT)
    assert names(affected_problems(problems, ["kernels/rmsnorm_triton.py"])) == ["rmsnorm"]
    assert names(affected_problems(problems, ["kernels/swiglu_torch.py"])) == ["swiglu"]
    assert names(affected_problems(problems, ["problems/gelu.py"])) == ["gelu"]
    assert affected_problems(problems, ["problems/README.md", "bot/cli/main.py"]) == []


# --- changed_files_from_pr ------------------------------------------------------------------


def test_pr_file_list_is_stripped_and_deduplicated_in_order():
    files = ["kernels/b.py", " kernels/a.py ", "", "kernels/b.py", "  ", "docs/x.md"]
    assert changed_files_from_pr(files) == ["kernels/b.py", "kernels/a.py", "docs/x.md"]
