"""Pure: turn an LLM answer into candidate source, or into a reason why there is none.

Reasoning models wrap their chain of thought in `<think>...</think>`; drafts of the
kernel often appear in there, so code is only ever taken from the visible answer.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# `<thinking>` too: some fine-tunes use it. Case-insensitive because templates vary.
_THINK_BLOCK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)
_FENCE_OPEN = re.compile(r"^\s*```+\s*([A-Za-z0-9_+-]*)\s*$")
_FENCE_CLOSE = re.compile(r"^\s*```+\s*$")
_DEFINES_MODEL_NEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_PYTHON_TAGS = {"python", "py", "python3"}


@dataclass(frozen=True)
class ParsedAnswer:
    """What an answer yields: `code` when usable, otherwise `status` and `message` say why."""

    status: str  # "ok" | "empty" | "syntax_error"
    code: str | None  # the extracted module (also set for syntax errors, for feedback)
    message: str  # "" when ok; the evidence otherwise
    thinking: str  # inline reasoning removed from the answer (kept for the transcript)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def split_think(answer: str) -> tuple[str, str]:
    """(visible text, inline reasoning) of an answer with R1-style `<think>` sections."""
    thoughts = [m.group(2) for m in _THINK_BLOCK.finditer(answer)]
    visible = _THINK_BLOCK.sub("", answer)
    opened = _THINK_OPEN.search(visible)
    if opened is not None:
        # Unterminated: the answer was cut off mid-thought (token limit); nothing after
        # the tag is an answer.
        thoughts.append(visible[opened.end() :])
        visible = visible[: opened.start()]
    closed = _THINK_CLOSE.search(visible)
    if closed is not None:
        # Only a closing tag: the chat template put `<think>` into the prompt (DeepSeek-R1
        # distills do), so everything before the tag is reasoning.
        thoughts.insert(0, visible[: closed.start()])
        visible = visible[closed.end() :]
    return visible.strip(), "\n".join(t.strip() for t in thoughts if t.strip())


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Complete fenced blocks as (language tag, body); an unclosed last block is dropped."""
    blocks: list[tuple[str, str]] = []
    tag: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if tag is None:
            m = _FENCE_OPEN.match(line)
            if m is not None:
                tag, body = m.group(1).lower(), []
        elif _FENCE_CLOSE.match(line):
            blocks.append((tag, "\n".join(body)))
            tag = None
        else:
            body.append(line)
    return blocks


def extract_code(answer: str) -> str | None:
    """The last complete python block that defines `class ModelNew`, or None.

    Python-tagged blocks count, and bare blocks when they define ModelNew. A later block
    without ModelNew (a usage snippet, a test) does not displace the module before it.
    """
    visible, _ = split_think(answer)
    for tag, body in reversed(fenced_blocks(visible)):
        if (tag in _PYTHON_TAGS or tag == "") and _DEFINES_MODEL_NEW.search(body):
            return body.strip("\n") + "\n"
    return None


def syntax_error(code: str) -> str | None:
    """None when `code` parses; otherwise the error with its line number and line."""
    try:
        ast.parse(code)
    except SyntaxError as err:
        lineno = err.lineno or 0
        lines = code.splitlines()
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else (err.text or "")
        return f"SyntaxError: {err.msg} at line {lineno}: {line.rstrip()}"
    return None


def parse_answer(answer: str | None) -> ParsedAnswer:
    """Extract and syntax-check the candidate module of one answer."""
    visible, thinking = split_think(answer or "")
    if not visible:
        return ParsedAnswer("empty", None, "the answer was empty (or only reasoning)", thinking)
    code = extract_code(visible)
    if code is None:
        return ParsedAnswer(
            "empty", None, "the answer had no complete ```python block defining `class ModelNew`", thinking
        )
    error = syntax_error(code)
    if error is not None:
        return ParsedAnswer("syntax_error", code, error, thinking)
    return ParsedAnswer("ok", code, "", thinking)
