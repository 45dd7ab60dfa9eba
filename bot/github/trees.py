"""A path's git tree modes at a commit, from the trees API.

The contents API follows a symlink to the file it points at and cannot tell a submodule from a
folder; a tree entry's mode can (120000 symlink, 160000 submodule, 040000 folder, 100644 and
100755 regular files), so stage 2 reads each TARGET's modes here before it trusts the path.
"""

from __future__ import annotations

from github.Repository import Repository


def tree_entry(repo: Repository, path: str, ref: str) -> tuple[tuple[str, ...], str] | None:
    """The mode of each component of `path` in commit `ref`'s tree, down to the first that is
    not a folder, and that component's object SHA; None when a component does not exist. One
    request per folder level."""
    tree, modes, sha = repo.get_git_commit(ref).tree.sha, [], ""
    for part in path.split("/"):
        entry = next((e for e in repo.get_git_tree(tree).tree if e.path == part), None)
        if entry is None:
            return None
        modes.append(entry.mode)
        sha = entry.sha
        if entry.type != "tree":
            break
        tree = entry.sha
    return tuple(modes), sha


def tree_modes(repo: Repository, path: str, ref: str) -> tuple[str, ...] | None:
    """`tree_entry`'s modes."""
    found = tree_entry(repo, path, ref)
    return None if found is None else found[0]
