"""An LLM proposer over any OpenAI-compatible chat endpoint (the official `openai` client).

`OPENAI_BASE_URL` / `OPENAI_API_KEY` configure it (the client reads them). The key never
enters the transcript or the logs: every string kept or written goes through `redact`."""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import openai

from bot.core.domain import CandidateSource, Origin
from bot.core.errors import BotError
from bot.propose.base import BudgetExhausted, Feedback, ProposalRequest
from bot.propose.llm_settings import LlmEndpoint, LlmGeneration, LlmPricing
from bot.propose.parse import parse_answer
from bot.propose.prompt import build_messages

log = logging.getLogger(__name__)

# OpenAI keys, bearer headers and `api_key=...` assignments, whatever key is in use.
_SECRET_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[^\s\"',]+"),
    re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',]+"),
)
_RETRY_STATUSES = {408, 409, 429}  # plus every 5xx: overload and gateway hiccups pass
_FATAL_STATUSES = {401, 403, 404}  # wrong key, model or URL: every later request fails too
MAX_RETRY_AFTER_S = 600.0  # honour Retry-After, but a broken header must not hang the run
DEFAULT_ENDPOINT, DEFAULT_GENERATION, DEFAULT_PRICING = LlmEndpoint(), LlmGeneration(), LlmPricing()


class LlmError(BotError):
    """The LLM endpoint is misconfigured (no key, wrong key, unknown model or URL)."""


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with the given secrets and anything shaped like an API key masked."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[REDACTED]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[REDACTED]", text)
    return text


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    estimated: bool  # True: the server sent no usage, counted as chars / 4
    cost_usd: float


@dataclass(frozen=True)
class TranscriptEntry:
    """One request of one round: what was sent, what came back, what it cost."""

    round: int
    sample: int
    messages: tuple[Mapping[str, str], ...]
    answer: str | None  # the raw visible answer (inline <think> included)
    reasoning: str | None  # `reasoning_content`: kept for humans, never parsed for code
    usage: Usage | None
    error: str | None  # redacted; None when an answer arrived

    def to_json(self, secrets: Iterable[str | None] = ()) -> dict[str, Any]:
        """A JSON-ready dict with every string redacted."""
        return _redact_tree(asdict(self), tuple(secrets))


def _redact_tree(obj: Any, secrets: tuple[str | None, ...]) -> Any:
    # Field by field, not on the JSON text: a masked escape sequence would corrupt it.
    if isinstance(obj, str):
        return redact(obj, secrets)
    if isinstance(obj, Mapping):
        return {k: _redact_tree(v, secrets) for k, v in obj.items()}
    return [_redact_tree(v, secrets) for v in obj] if isinstance(obj, (list, tuple)) else obj


class _Malformed(Exception):
    """The server answered 200 with a body that is not a chat completion."""


def _estimate_tokens(*texts: str) -> int:
    return (sum(map(len, texts)) + 3) // 4  # ~4 chars per token for English and code


def _retry_after_s(err: Exception) -> float | None:
    headers = getattr(getattr(err, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if not value:
            continue
        try:
            return float(value) * scale
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):  # the HTTP-date form
                return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    return None


def _retryable(err: Exception) -> bool:
    status = getattr(err, "status_code", None)  # APITimeoutError is an APIConnectionError
    return isinstance(err, openai.APIConnectionError) or (
        isinstance(err, openai.APIStatusError) and (status in _RETRY_STATUSES or status >= 500)
    )


class LlmProposer:
    """Proposer: `samples` chat completions per round, parsed into `ModelNew` candidates."""

    name = "llm"

    def __init__(
        self,
        model: str,
        *,
        samples: int | None = None,
        max_total_tokens: int | None = None,
        endpoint: LlmEndpoint = DEFAULT_ENDPOINT,
        generation: LlmGeneration = DEFAULT_GENERATION,
        pricing: LlmPricing = DEFAULT_PRICING,
        transcript_path: Path | None = None,
    ) -> None:
        # samples and max_total_tokens stand apart: they are the run's own knobs (OptimizeOptions
        # passes them), where the grouped settings describe the endpoint, the model and prices.
        self.model, self.samples, self.max_total_tokens = model, samples, max_total_tokens
        self.endpoint, self.generation, self.pricing = endpoint, generation, pricing
        self.transcript_path = transcript_path
        self._client = endpoint.client
        self._client_args = {k: v for k, v in (("base_url", endpoint.base_url), ("api_key", endpoint.api_key)) if v}
        self.transcript: list[TranscriptEntry] = []
        self.last_failures: list[Feedback] = []  # unusable answers of the last round
        self.last_errors: list[str] = []  # transport errors of the last round (redacted)
        self.prompt_tokens = self.completion_tokens = 0
        self.cost_usd = 0.0

    @property
    def tokens_used(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def client(self) -> Any:
        # Built lazily: constructing the proposer must not need a key (dry runs, --help).
        if self._client is None:
            try:
                self._client = openai.OpenAI(max_retries=0, timeout=self.endpoint.timeout_s, **self._client_args)
            except openai.OpenAIError as err:
                raise LlmError(f"cannot configure the LLM client: {self.redact(str(err))}") from None
        return self._client

    def redact(self, text: str) -> str:
        """`text` with this proposer's API key (and anything key-shaped) masked."""
        key = getattr(self._client, "api_key", None)  # also the one the client read from env
        return redact(text, (self._client_args.get("api_key"), key if isinstance(key, str) else None))

    def propose(self, request: ProposalRequest) -> list[CandidateSource]:
        """Candidates of one round; unusable answers land in `last_failures`."""
        messages = build_messages(request, self.generation.max_feedback_chars)
        parent = hashlib.sha256(request.current_source.encode()).hexdigest()[:16]
        candidates: list[CandidateSource] = []
        self.last_failures, self.last_errors = [], []
        for i in range(self.samples or request.samples):
            try:
                self._check_budget(messages)
            except BudgetExhausted:
                if i == 0:
                    raise
                log.warning("llm budget spent after %d of the round's samples", i)
                break  # keep what this round already bought; the next round raises
            origin = Origin(strategy="llm", detail=f"sample {i}", model=self.model, round=request.round, parent=parent)
            name = f"{request.problem.name}-llm-r{request.round}-s{i}"
            answer, unreadable = self._sample(request.round, i, messages)
            if unreadable:  # counts as a failed attempt, so the loop sees the round's cost
                self.last_failures.append(
                    Feedback(CandidateSource(name, "", origin), "empty", "the server's response could not be read")
                )
            if answer is None:
                continue
            parsed = parse_answer(answer)
            if not parsed.ok:
                log.info(
                    "llm round %d sample %d: %s (%s)", request.round, i, parsed.status, self.redact(parsed.message)
                )
                self.last_failures.append(
                    Feedback(CandidateSource(name, parsed.code or "", origin), parsed.status, parsed.message)
                )
            elif all(c.source != parsed.code for c in candidates):  # duplicates cost verify time
                candidates.append(CandidateSource(name, parsed.code, origin))
        return candidates

    def _check_budget(self, messages: list[dict[str, str]]) -> None:
        if (
            self.max_total_tokens is not None  # the next prompt must fit too
            and self.tokens_used + _estimate_tokens(*(m["content"] for m in messages)) > self.max_total_tokens
        ):
            raise BudgetExhausted(f"token budget {self.max_total_tokens} spent ({self.tokens_used})")
        ceiling = self.pricing.max_cost_usd
        if ceiling is not None and self.cost_usd >= ceiling:
            raise BudgetExhausted(f"cost budget ${ceiling:.2f} spent (${self.cost_usd:.2f})")

    def _sample(self, round_: int, sample: int, messages: list[dict[str, str]]) -> tuple[str | None, bool]:
        """(answer or None, unreadable) of one request, retried on transient errors, recorded."""
        reply: tuple[str, str, Usage] | None = None  # (answer, reasoning, usage)
        error, unreadable, fatal = None, False, False
        try:
            reply = self._with_retries(messages)
        except _Malformed as err:
            error, unreadable = self.redact(f"malformed response: {err}"), True
        except openai.OpenAIError as err:
            error = self.redact(f"{type(err).__name__}: {err}")
            fatal = getattr(err, "status_code", None) in _FATAL_STATUSES
        self._record(round_, sample, messages, reply, error)
        if reply is None:
            log.warning("llm round %d sample %d failed: %s", round_, sample, error)
            if fatal:
                raise LlmError(f"LLM endpoint refused the request: {error}")
            if not unreadable:
                self.last_errors.append(str(error))
            return None, unreadable
        usage = reply[2]
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cost_usd += usage.cost_usd
        log.info(
            "llm round %d sample %d: %d+%d tokens%s, total %d",
            round_,
            sample,
            usage.prompt_tokens,
            usage.completion_tokens,
            " (estimated)" if usage.estimated else "",
            self.tokens_used,
        )
        return reply[0], False

    def _record(
        self,
        round_: int,
        sample: int,
        messages: list[dict[str, str]],
        reply: tuple[str, str, Usage] | None,
        error: str | None,
    ) -> None:
        # Redacted already in memory: an echoed key must not survive in any copy.
        r = self.redact
        answer, reasoning, usage = reply if reply is not None else (None, None, None)
        entry = TranscriptEntry(
            round_,
            sample,
            tuple({k: r(v) for k, v in m.items()} for m in messages),
            None if answer is None else r(answer),
            r(reasoning) if reasoning else None,
            usage,
            error,
        )
        self.transcript.append(entry)
        if self.transcript_path is not None:
            self.transcript_path.parent.mkdir(parents=True, exist_ok=True)
            with self.transcript_path.open("a", encoding="utf-8") as fh:  # JSONL, one per request
                fh.write(json.dumps(entry.to_json()) + "\n")

    def _with_retries(self, messages: list[dict[str, str]]) -> tuple[str, str, Usage]:
        endpoint = self.endpoint
        for attempt in range(endpoint.max_retries + 1):
            try:
                return self._request(messages)
            except ValueError as err:  # the client's json.loads on a garbled body
                raise _Malformed(str(err)) from None
            except openai.APIError as err:
                if not _retryable(err) or attempt == endpoint.max_retries:
                    raise
                wait = _retry_after_s(err)
                wait = (
                    min(wait, MAX_RETRY_AFTER_S)
                    if wait is not None
                    else min(endpoint.max_backoff_s, endpoint.backoff_s * 2**attempt)
                )
                log.warning(
                    "llm request failed (%s), retry %d/%d in %.1f s",
                    self.redact(f"{type(err).__name__}: {err}"),
                    attempt + 1,
                    endpoint.max_retries,
                    wait,
                )
                endpoint.sleep(wait)
        raise AssertionError("unreachable")

    def _request(self, messages: list[dict[str, str]]) -> tuple[str, str, Usage]:
        """One chat completion: (answer, reasoning, usage), streamed or not."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.generation.temperature,
            "timeout": self.endpoint.timeout_s,
        }
        if self.generation.max_answer_tokens is not None:
            kwargs["max_tokens"] = self.generation.max_answer_tokens
        usage: Any = None
        if self.endpoint.stream:
            parts: list[tuple[str, str]] = []
            for chunk in self.client.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **kwargs
            ):
                usage = getattr(chunk, "usage", None) or usage  # the last chunk, when sent
                parts += [
                    (getattr(c.delta, "content", None) or "", _reasoning_of(c.delta))
                    for c in getattr(chunk, "choices", None) or []
                ]
            answer, reasoning = "".join(a for a, _ in parts), "".join(r for _, r in parts)
        else:
            response = self.client.chat.completions.create(**kwargs)
            usage = response.usage
            message = response.choices[0].message if response.choices else None
            answer = (getattr(message, "content", None) or "") if message else ""
            reasoning = _reasoning_of(message) if message else ""
        return answer, reasoning, self._usage(usage, messages, answer, reasoning)

    def _usage(self, usage: Any, messages: list[dict[str, str]], *out: str) -> Usage:
        if usage is not None and getattr(usage, "prompt_tokens", None) is not None:
            p, c, estimated = int(usage.prompt_tokens), int(usage.completion_tokens or 0), False
        else:  # servers without usage reporting still spend the budget
            p = _estimate_tokens(*(m["content"] for m in messages))
            c, estimated = _estimate_tokens(*out), True
        return Usage(p, c, estimated, (p * self.pricing.price_per_mtok_in + c * self.pricing.price_per_mtok_out) / 1e6)


def _reasoning_of(obj: Any) -> str:
    # DeepSeek and SGLang say `reasoning_content`; vLLM's newer parsers say `reasoning`.
    value = getattr(obj, "reasoning_content", None) or getattr(obj, "reasoning", None)
    return value if isinstance(value, str) else ""
