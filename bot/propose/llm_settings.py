"""The settings of `LlmProposer`, one frozen dataclass per concern, each default stated once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.propose.prompt import MAX_FEEDBACK_CHARS


@dataclass(frozen=True)
class LlmEndpoint:
    """Where requests go and how transient failures are ridden out."""

    base_url: str | None = None  # None: the openai client reads OPENAI_BASE_URL
    api_key: str | None = None  # None: the openai client reads OPENAI_API_KEY
    # A ready client instead of one built from base_url / api_key (a custom transport, a double).
    client: Any = None
    stream: bool = False
    timeout_s: float = 600.0
    max_retries: int = 4  # retries after the first attempt, not attempts
    backoff_s: float = 2.0  # doubled per retry, when the server sends no Retry-After
    max_backoff_s: float = 60.0
    # The wait between retries: tests pass a recorder so no run sleeps for real.
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class LlmGeneration:
    """What each request asks of the model."""

    temperature: float = 0.7
    max_answer_tokens: int | None = None  # None: the server's own limit
    max_feedback_chars: int = MAX_FEEDBACK_CHARS  # earlier attempts' feedback kept in the prompt


@dataclass(frozen=True)
class LlmPricing:
    """What tokens cost, and the spend that stops the run. The cost ceiling lives beside the
    prices because it means nothing without them; the token ceiling does not need them."""

    price_per_mtok_in: float = 0.0
    price_per_mtok_out: float = 0.0
    max_cost_usd: float | None = None
