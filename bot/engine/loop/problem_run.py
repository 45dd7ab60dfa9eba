"""One problem's optimisation as the engine hands it on: its result, and what is written beside
results.json but never in it.

The result (bot.core.results.ProblemResult) is the one record of the problem: the terminal, the
reports, results.json and the progress bars all read it. What travels beside it is only what the
document must not hold: every attempt's source (the document keeps the best's alone) and the LLM's
transcript. Nothing here judges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.core.results import ProblemResult


@dataclass(frozen=True)
class ProblemRun:
    result: ProblemResult
    # Each attempt's source by its `source_sha256` (ContenderResult): the files under candidates/.
    sources: Mapping[str, str] = field(default_factory=dict)
    # The LLM's requests and answers, key-free (bot.propose.llm): transcript-<problem>.jsonl.
    transcript: tuple[Mapping[str, Any], ...] = ()
