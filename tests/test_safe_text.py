"""Artifact text is inert in markdown: each construct that could notify, link, embed or close."""

from __future__ import annotations

import pytest

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
    data = {"source": "x = '<b>@me'\n", "reasons": ["<b>@me</b>"], "n": 3}
    out = inert_results(data)
    assert out["source"] == data["source"] and "<b>" not in out["reasons"][0] and out["n"] == 3


def test_titles_are_one_line_of_at_most_256_characters():
    assert len(title("x" * 1047)) == 256 and title("a\nb  c") == "a b c"
