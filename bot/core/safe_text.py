"""Artifact text made inert before it reaches markdown: no mentions, HTML, links, closing
keywords or code-span breaks, whatever renderer later shows it.

Applied by stage 2 to every string of the validated artifact except the candidate's source
(which only travels as a file, or as a patch inside a fence longer than any backtick run).
The replacements are look-alike characters, so the text stays readable and a later
`html.escape` has nothing left to escape twice.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

# Strings that are data, not prose: file content and hashes.
VERBATIM_KEYS = frozenset({"source", "source_sha256", "source_hash", "parent"})

_CHARS = str.maketrans(
    {
        "@": "\uff20",  # fullwidth @: GitHub notifies nobody
        "#": "\uff03",  # fullwidth #: no issue reference, so no "Closes #1"
        "<": "\u2039",
        ">": "\u203a",  # single angle quotes: no HTML element, no autolink
        "&": "\uff06",  # no character reference that a renderer would turn back into "<" or "@"
        "[": "\u27e6",
        "]": "\u27e7",  # no link or image syntax
        "`": "\u02cb",  # no code span that swallows the rest of a line
        "|": "\u00a6",  # no table cell break
        "\\": "\u29f5",  # no escape of the replacements above
        "!": "\u01c3",
        "*": "\u2217",
        "~": "\u223c",
    }
)
_URL = re.compile(r"(?i)(https?|ftp|file|mailto|javascript|data)(:)|(www)(\.)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
_KEYWORD = re.compile(r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?)(\s*:?\s+)(?=\S*\d)")


def inert(text: str) -> str:
    """`text` with every markdown-active construct replaced by a look-alike."""
    text = _CONTROL.sub("", text).translate(_CHARS)
    text = _URL.sub(lambda m: (m.group(1) or m.group(3)) + "\u2024" if m.group(4) else m.group(1) + "\uff1a", text)
    # "fixes GH-12", "closes owner/repo-12": the keyword itself is broken up too.
    return _KEYWORD.sub(lambda m: m.group(1)[0] + "\u200c" + m.group(1)[1:] + m.group(3), text)


def inert_results(value: Any, key: str | None = None) -> Any:
    """A copy of an artifact (the typed results document, or any JSON value) with `inert`
    applied to every prose string; a field is judged by its name, as a JSON key is."""
    if isinstance(value, str):
        return value if key in VERBATIM_KEYS else inert(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{f.name: inert_results(getattr(value, f.name), f.name) for f in dataclasses.fields(value) if f.init},
        )
    if isinstance(value, Mapping):
        return {k: inert_results(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(inert_results(v, key) for v in value)
    return value


def title(text: str, limit: int = 256) -> str:
    """One line of at most `limit` characters (GitHub refuses longer pull request titles)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"
