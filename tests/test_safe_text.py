"""Artifact text is inert in markdown: each construct that could notify, link, embed or close."""

from __future__ import annotations

import unicodedata

import pytest

from bot.core.domain import Environment
from bot.core.results_contenders import BestResult
from bot.core.safe_text import inert, inert_results, title


@pytest.mark.parametrize(
    "text,gone",
    [
        ("ping @octocat", "@octocat"),
        ("<img src=x onerror=alert(1)>", "<img"),
        ("<details><summary>x</summary>", "<details>"),
        ("[click](https://evil.example)", "](https"),
        ("see https://evil.example/x", "https://"),
        ("see www.evil.example", "www.evil"),
        ("Closes #1", "#1"),
        ("fixes GH-12", "fixes GH-12"),
        ("resolved: owner/repo#3", "#3"),
        ("`code` ``` fence", "`"),
        ("a | b", "|"),
        ("&#64;octocat &lt;b&gt;", "&"),
        ("![x](y)", "!["),
        ("zero\u200bwidth @\u200buser", "\u200b"),
    ],
)
def test_each_markdown_construct_is_made_inert(text, gone):
    assert gone not in inert(text)


def test_prose_survives_and_source_is_left_alone():
    assert inert("max_abs_err 0.5 > tolerance 1e-3").startswith("max_abs_err 0.5")
    best = BestResult("<b>@me</b>", "x = '<b>@me'\n", "a" * 64, 2.0, (1.9, 2.1), ())
    out = inert_results(best)
    assert out.source == best.source and out.source_sha256 == best.source_sha256 and "<b>" not in out.name


# Tag characters, the Arabic letter mark, word joiner, BOM, soft hyphen, bidi overrides and
# isolates, LRM/RLM, zero-width space and joiners, line separator.
INVISIBLE = (
    "\U000e0001\U000e0043\U000e007f\u061c\u2060\ufeff\u00ad\u202a\u202e\u2066\u2069\u200e\u200f\u200b\u200d\u2028"
)


def test_invisible_and_bidi_characters_are_removed_and_keywords_stay_visible():
    shown = inert(f"fast{INVISIBLE}-rmsnorm Closes #3")
    assert shown.startswith("fast-rmsnorm ") and "Closes" not in shown and "loses" in shown
    assert not [c for c in shown if unicodedata.category(c) in ("Cf", "Cc", "Zl", "Zp")]
    assert inert(shown) == shown  # applying it twice changes nothing


# Default-ignorable code points outside category Cf, which render as nothing: variation selectors
# (U+FE00-FE0F, U+E0100-E01EF, which can carry a hidden byte each), the combining grapheme joiner,
# Hangul fillers, Mongolian free variation selectors, Khmer inherent vowels.
IGNORABLE = "\ufe0f\ufe00\U000e0100\U000e01ef\u034f\u115f\u1160\u3164\uffa0\u180b\u180f\u17b4\u17b5"


def test_default_ignorable_characters_are_removed_too():
    shown = inert(f"fast{IGNORABLE}-rmsnorm")
    assert shown == "fast-rmsnorm", [f"U+{ord(c):04X}" for c in shown]


def test_map_keys_are_prose_whatever_they_are_called():
    env = Environment(
        "cuda",
        "NVIDIA H100",
        "2.13",
        None,
        None,
        None,
        "3.11",
        {"[x](https://evil.example) Closes #3": "1", "source": "<b>"},
    )
    clocks = inert_results(env).clocks
    assert list(clocks) == ["⟦x⟧(https：//evil.example) Ｃloses ＃3", "source"] and clocks["source"] == "‹b›"


def test_titles_are_one_line_of_at_most_256_characters():
    assert len(title("x" * 1047)) == 256 and title("a\nb  c") == "a b c"
