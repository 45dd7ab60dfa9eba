"""A scripted OpenAI-compatible chat server for tests: real HTTP, no network beyond 127.0.0.1.

Each request to `POST /v1/chat/completions` takes the next step of the script:
an `Answer` (streamed as SSE when the request asks for it), a `Status` (429/500/503 ...
with headers such as Retry-After), a `Delay` (sleep, so the client times out) or
`Malformed` (a 200 whose body is not valid JSON). Every request is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    text: str
    reasoning: str | None = None  # sent as `reasoning_content`, as DeepSeek-R1 servers do
    send_usage: bool = True  # False: a server that never reports usage
    prompt_tokens: int = 100
    completion_tokens: int = 50


@dataclass(frozen=True)
class Status:
    code: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None  # default: an OpenAI-style error object


@dataclass(frozen=True)
class Delay:
    seconds: float  # longer than the client's timeout; the client hangs up first


@dataclass(frozen=True)
class Malformed:
    body: str = '{"id": "x", "choices": [ {"message": '


Step = Answer | Status | Delay | Malformed


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: Mapping[str, str]  # lower-cased names
    raw_body: str
    body: Any  # parsed JSON, or None when it did not parse


class OpenAIDouble:
    """Start with `with OpenAIDouble([...]) as srv:`; `srv.base_url` ends in /v1."""

    def __init__(self, script: list[Step] | None = None, chunk_chars: int = 7) -> None:
        self.script: deque[Step] = deque(script or [])
        self.requests: list[RecordedRequest] = []
        self.chunk_chars = chunk_chars  # streamed answers are cut into pieces this long
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True  # a Delay step must not block shutdown
        # A short poll so that shutdown() at the end of each test takes ms, not 0.5 s.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def add(self, *steps: Step) -> None:
        with self._lock:
            self.script.extend(steps)

    def _next(self, req: RecordedRequest) -> Step | None:
        with self._lock:
            self.requests.append(req)
            return self.script.popleft() if self.script else None

    def __enter__(self) -> OpenAIDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _completion(answer: Answer, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.reasoning is not None:
        message["reasoning_content"] = answer.reasoning
    out: dict[str, Any] = {
        "id": "chatcmpl-double",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if answer.send_usage:
        out["usage"] = _usage(answer)
    return out


def _usage(answer: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


def _chunks(answer: Answer, model: str, include_usage: bool, size: int) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-double", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    reasoning = answer.reasoning or ""
    out += [chunk({"reasoning_content": reasoning[i : i + size]}) for i in range(0, len(reasoning), size)]
    out += [chunk({"content": answer.text[i : i + size]}) for i in range(0, len(answer.text), size)]
    out.append(chunk({}, "stop"))
    if include_usage and answer.send_usage:
        # OpenAI's shape: a last chunk with no choices and the usage of the whole request.
        out.append({**base, "choices": [], "usage": _usage(answer)})
    return out


def _handler_for(double: OpenAIDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 (stdlib name)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            headers = {k.lower(): v for k, v in self.headers.items()}
            step = double._next(RecordedRequest(self.path, headers, raw, body))
            if self.path != "/v1/chat/completions":
                return self._send(404, json.dumps({"error": {"message": "no such route"}}))
            if step is None:
                return self._send(500, json.dumps({"error": {"message": "script exhausted"}}))
            try:
                self._play(step, body or {})
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout): expected for Delay steps

        def _play(self, step: Step, body: dict[str, Any]) -> None:
            if isinstance(step, Delay):
                time.sleep(step.seconds)
                return self._send(200, json.dumps(_completion(Answer("too late"), "x")))
            if isinstance(step, Status):
                text = (
                    step.body
                    if step.body is not None
                    else json.dumps({"error": {"message": f"scripted {step.code}", "type": "server_error"}})
                )
                return self._send(step.code, text, dict(step.headers))
            if isinstance(step, Malformed):
                return self._send(200, step.body)
            model = str(body.get("model", "double"))
            if not body.get("stream"):
                return self._send(200, json.dumps(_completion(step, model)))
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = [f"data: {json.dumps(c)}\n\n" for c in _chunks(step, model, include_usage, double.chunk_chars)]
            events.append("data: [DONE]\n\n")
            payload = "".join(events).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            # Several writes so the client really reads a stream, not one buffer.
            for i in range(0, len(payload), 256):
                self.wfile.write(payload[i : i + 256])
                self.wfile.flush()

        def _send(self, code: int, text: str, headers: dict[str, str] | None = None) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return Handler
