"""The worker's side of one exchange: a frame parsed into the request it carries and given
to the handler of its op, the handler's reply put as the channel carries it. A frame that is
no request, or a request no handler serves, is answered with a Failure in phase "protocol",
never an exception of the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bot.protocol.batches import Outputs, Quiet, Stage, StageInto, Time
from bot.protocol.messages import Construct, Exit, Fingerprints, Gate, Hello, Judge, Lend, Load, Release, Run
from bot.protocol.typed import Failure, Message, ProtocolError, Request

REQUESTS: dict[str, type[Request]] = {
    r.op: r
    for r in (Hello, Exit, Load, Construct, Run, Fingerprints, Stage, Time, Outputs, Quiet, Gate, Release, Lend, Judge)
}


def parse_request(message: Any) -> Request:
    """The worker's side: the request a frame carries (ProtocolError if it is none)."""
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a request object, got {type(message).__name__}")
    op = message.get("op")
    kind = REQUESTS.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ProtocolError(f"unknown op {op!r}")
    if kind is Stage and "layout" in message:
        kind = StageInto
    return kind.from_wire({k: v for k, v in message.items() if k != "op"})


def to_wire(reply: Message | dict) -> dict[str, Any]:
    """A handler's reply as the channel carries it (handlers may return plain dicts)."""
    return reply.to_wire() if isinstance(reply, Message) else reply


def serve(handlers: Mapping[str, Callable[[Any], Message | dict]], message: Any) -> dict[str, Any]:
    """The worker's side of one exchange: the request parsed and given to the handler of its
    op; the reply as the channel carries it. A request that does not parse, or that no
    handler serves, is answered with a Failure in phase "protocol"."""
    try:
        request = parse_request(message)
    except ProtocolError as exc:
        return Failure("protocol", str(exc)).to_wire()
    handler = handlers.get(request.op)
    if handler is None:
        return Failure("protocol", f"op {request.op!r} is not served here").to_wire()
    return to_wire(handler(request))


__all__ = ["REQUESTS", "parse_request", "serve", "to_wire"]
