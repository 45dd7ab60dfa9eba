"""The one rule for a path the bot reads from untrusted or configured text and then writes or
matches inside a repository: a plain repository-relative path.

Every path that names a file of the repository (a problem's TARGET, a follow-up's file, a
configured folder, chart or kernel-paths pattern) is held to it, so that no spelling of a path
climbs out of the checkout, into `.git`, or means one file on one system and another elsewhere.
"""

from __future__ import annotations

from pathlib import PureWindowsPath

# Compared in lower case: on a case-insensitive checkout (macOS, Windows) `.GIT` is `.git`.
_REFUSED_PARTS = frozenset({"", ".", "..", ".git"})


def is_plain_relative(path: str) -> bool:
    """True for `a/b/c` and only its like: not empty, no leading '/', no drive, no backslash, and
    no empty, '.', '..' or '.git' component (so no '//', no trailing '/', nothing to normalise)."""
    if not path or path.startswith("/") or "\\" in path or PureWindowsPath(path).drive:
        return False
    return not any(part.lower() in _REFUSED_PARTS for part in path.split("/"))


PLAIN_RELATIVE = "a plain repository-relative path (no leading '/', no backslash, no empty, '.', '..' or '.git' part)"
"""What `is_plain_relative` asks for, in the words error messages use."""
