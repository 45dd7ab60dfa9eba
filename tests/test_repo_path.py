"""The one plain-relative-path rule (bot.core.repo_path), and the places that hold paths to it."""

from __future__ import annotations

import pytest

from bot.core.repo_path import is_plain_relative


@pytest.mark.parametrize(
    "path",
    ["kernels/a.py", "a", "kernels/**", "csrc/a/b/x.cu", "docs/kernel-bot/speedups.png", "a.git/b", "x/.github/y"],
)
def test_plain_paths_pass(path):
    assert is_plain_relative(path)


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/etc/passwd",
        "../x.py",
        "kernels/../../home/x.py",
        "./kernels/a.py",
        "kernels/./a.py",
        "kernels//a.py",
        "kernels/",
        ".git/config",
        "kernels/.git/hooks/pre-commit",
        ".GIT/config",  # one folder on a case-insensitive checkout
        "kernels\\..\\bot\\cli/main.py",
        "C:/Windows/x.py",
        "C:x.py",
    ],
)
def test_other_spellings_are_refused(path):
    assert not is_plain_relative(path)


def test_every_holder_of_repository_paths_uses_the_one_rule():
    # The config file's paths, kernel-paths matching, the plan's files, stage 2's TARGETs and the
    # client's writes: each refuses what the rule refuses (here, a '.git' part in upper case).
    from bot.config import _Bad, _relative_path, path_matches
    from bot.core.errors import BotError
    from bot.core.scope import target_refusal
    from bot.github.client import _check_path

    with pytest.raises(_Bad):
        _relative_path("kernels/.GIT")
    assert not path_matches("kernels/.GIT/x", "kernels/**")
    assert target_refusal("kernels/.GIT/x.py", "problems", "", lambda _: True) == (
        "is not a plain repository-relative path"
    )
    with pytest.raises(BotError):
        _check_path("kernels/.GIT/x.py")
