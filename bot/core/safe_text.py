"""Artifact text made inert before it reaches markdown: no mentions, HTML, links, closing
keywords, code-span breaks or invisible characters, whatever renderer later shows it.

Stage 2 applies `inert_results` once, to the whole validated document, before anything reads
it (bot.github.publish.stage_two_plan): every string, map keys included, except the fields that
are data (the candidate's source, which only travels as a file or inside a fence longer than
any backtick run; hashes; the problem name and TARGET, which the schema limits to
[A-Za-z0-9._/-]). The replacements are look-alike characters, so the text stays readable and a
later `html.escape` has nothing left to escape twice.
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

# Fields of the typed document that are data, not prose: file content, hashes, and the names the
# schema already limits to [A-Za-z0-9._/-] (stage 2 reads files by them). Judged by the field's
# name in the typed document only: a key of a free-form map (clocks, check details) is prose.
VERBATIM_KEYS = frozenset({"source", "source_sha256", "source_hash", "parent", "problem", "target"})

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
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Removed outright: controls, format characters (Cf: zero-width joiners and spaces, U+00AD soft
# hyphen, U+2060 word joiner, U+FEFF, the bidi marks and overrides U+061C, U+200E/F,
# U+202A-202E, U+2066-2069, the tag characters U+E0000-E007F), line and paragraph separators,
# surrogates, private-use and unassigned code points, and the default-ignorable marks and letters
# below: nothing a reader can see, so nothing a reader can check.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Unicode's other default-ignorable code points (DerivedCoreProperties.txt), which render as
# nothing though their category is a mark or a letter: the combining grapheme joiner, Hangul
# fillers, Khmer inherent vowels, Mongolian free variation selectors, the variation selectors
# (one of the 256 can hide a byte after any character).
_IGNORABLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]")
_KEYWORD = re.compile(r"(?i)\b(close[sd]?|fix(e[sd])?|resolve[sd]?)(\s*:?\s+)(?=\S*\d)")


def first_hidden(text: str) -> tuple[int, str] | None:
    """(line number, character) of the first character `visible` would remove, carriage returns
    and form feeds aside (source code has those); None when there is none."""
    plain = text.replace("\r", "").replace("\f", "")
    if visible(plain) == plain:
        return None
    for number, line in enumerate(text.split("\n"), 1):
        for char in line:
            if char not in "\r\f" and not visible(char):
                return number, char
    return None


def visible(text: str) -> str:
    """`text` without invisible characters (tabs and newlines kept)."""
    if text.isascii():
        return _ASCII_CONTROL.sub("", text)
    text = _IGNORABLE.sub("", text)
    return "".join(c for c in text if c in "\t\n" or unicodedata.category(c) not in _HIDDEN)


def _fullwidth(letter: str) -> str:
    return chr(ord(letter) + 0xFEE0)  # "F" -> "\uff26": the same letter, not ASCII


def inert(text: str) -> str:
    """`text` with every markdown-active construct replaced by a look-alike, invisible
    characters removed."""
    text = visible(text).translate(_CHARS)
    text = _URL.sub(lambda m: (m.group(1) or m.group(3)) + "\u2024" if m.group(4) else m.group(1) + "\uff1a", text)
    # "fixes GH-12", "closes owner/repo-12": GitHub reads closing keywords in ASCII only, so a
    # fullwidth first letter breaks the keyword and stays visible.
    return _KEYWORD.sub(lambda m: _fullwidth(m.group(1)[0]) + m.group(1)[1:] + m.group(3), text)


def inert_results(value: Any, key: str | None = None) -> Any:
    """A copy of the typed results document with `inert` applied to every prose string; a
    dataclass field is judged by its name (VERBATIM_KEYS), while a map's keys and values are
    all prose, whatever the keys say."""
    if isinstance(value, str):
        return value if key in VERBATIM_KEYS else inert(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{f.name: inert_results(getattr(value, f.name), f.name) for f in dataclasses.fields(value) if f.init},
        )
    if isinstance(value, Mapping):
        return {inert(str(k)): inert_results(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(inert_results(v, key) for v in value)
    return value


def title(text: str, limit: int = 256) -> str:
    """One line of at most `limit` characters (GitHub refuses longer pull request titles)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"
