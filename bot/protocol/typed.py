"""What typed messages are made of (bot.protocol.messages, bot.protocol.batches): the checks
of a field's value, and the base classes that turn a frozen dataclass into a message with
`to_wire()` and a checked `from_wire()`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import torch

Check = Callable[[Any, str], Any]


class ProtocolError(ValueError):
    """A message that is not what the protocol says: a missing field, a wrong type or length."""


# --- field checks: each returns the value or raises ProtocolError naming `where` ----------
def _fail(where: str, want: str, value: Any) -> ProtocolError:
    shown = repr(value)
    return ProtocolError(f"{where}: expected {want}, got {shown[:80] + '...' if len(shown) > 80 else shown}")


def int_(v: Any, where: str) -> int:
    if type(v) is not int:  # bool is not an int here
        raise _fail(where, "an integer", v)
    return v


def num(v: Any, where: str) -> float:
    if type(v) not in (int, float):
        raise _fail(where, "a number", v)
    return v


def finite(v: Any, where: str) -> float:
    if not math.isfinite(num(v, where)):
        raise _fail(where, "a finite number", v)
    return v


def duration(v: Any, where: str) -> float:
    """A time: finite and not negative (NaN would pass every comparison a check makes)."""
    if finite(v, where) < 0:
        raise _fail(where, "a time of 0 or more", v)
    return v


def str_(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, "a string", v)
    return v


def bool_(v: Any, where: str) -> bool:
    if not isinstance(v, bool):
        raise _fail(where, "true or false", v)
    return v


def dict_(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise _fail(where, "an object", v)
    return v


def tensor(v: Any, where: str) -> torch.Tensor:
    if not isinstance(v, torch.Tensor):
        raise _fail(where, "a tensor", v)
    return v


def list_of(check: Check) -> Check:
    def checked(v: Any, where: str) -> list:
        if not isinstance(v, list):
            raise _fail(where, "a list", v)
        for i, item in enumerate(v):
            check(item, f"{where}[{i}]")
        return v

    return checked


def optional(check: Check) -> Check:
    return lambda v, where: None if v is None else check(v, where)


def one_of(*allowed: Any) -> Check:
    def checked(v: Any, where: str) -> Any:
        if v not in allowed:
            raise _fail(where, " or ".join(map(repr, allowed)), v)
        return v

    return checked


def output_meta(v: Any, where: str) -> dict:
    """{"type": name} or, for a tensor, {"type": "Tensor", "dtype", "shape", "device"}."""
    str_(dict_(v, where).get("type"), f"{where}.type")
    if v["type"] == "Tensor":
        str_(v.get("dtype"), f"{where}.dtype")
        list_of(int_)(v.get("shape"), f"{where}.shape")
        str_(v.get("device"), f"{where}.device")
    return v


def commitment(v: Any, where: str) -> Any:
    """One output's commitment: its digest (CPU) or its fingerprint (CUDA: 3 numbers)."""
    if isinstance(v, str):
        return v
    list_of(finite)(v, where)  # a NaN would match any reference in every comparison
    if len(v) != 3:
        raise _fail(where, "a digest or a fingerprint of 3 numbers", v)
    return v


def region(v: Any, where: str) -> list:
    list_of(int_)(v, where)
    if len(v) != 2:
        raise _fail(where, "[address, bytes]", v)
    return v


strs, ints, durations = list_of(str_), list_of(int_), list_of(duration)
tensors = list_of(tensor)
prints = list_of(commitment)  # one call's commitments, one per output
regions = list_of(list_of(region))  # per call, per tensor input: [address, bytes]


def wire(check: Check, default: Any = MISSING, **kw: Any) -> Any:
    """A message field and its check (`default` makes it optional on the wire)."""
    if default is MISSING and "default_factory" not in kw:
        return field(metadata={"check": check}, **kw)
    return field(default=default, metadata={"check": check}, **kw)


def local(default: Any = None) -> Any:
    """A field the parent keeps with its request to check the reply; it never travels."""
    return field(default=default, metadata={"local": True}, compare=False)


# --- messages --------------------------------------------------------------------------
@dataclass(frozen=True)
class Message:
    def to_wire(self) -> dict[str, Any]:
        """The fields that travel; an optional field left at None is left out."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not f.metadata.get("local") and not (getattr(self, f.name) is None and f.default is None)
        }

    @classmethod
    def from_wire(cls, message: Any) -> Any:
        if not isinstance(message, dict):
            raise ProtocolError(f"{cls.__name__}: expected an object, got {type(message).__name__}")
        values = {}
        for f in fields(cls):
            if f.metadata.get("local"):
                continue
            if f.name not in message:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise ProtocolError(f"{cls.__name__}: missing field {f.name!r}")
                continue
            values[f.name] = f.metadata["check"](message[f.name], f"{cls.__name__}.{f.name}")
        made = cls(**values)
        made.validate()
        return made

    def validate(self) -> None:
        """Checks across fields, after each field's own."""


@dataclass(frozen=True)
class Reply(Message):
    def to_wire(self) -> dict[str, Any]:
        return {"ok": True, **super().to_wire()}


@dataclass(frozen=True)
class Request(Message):
    op: ClassVar[str]
    Reply: ClassVar[type[Reply]]

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, **super().to_wire()}

    def parse_reply(self, message: Any) -> Any:
        """The reply to this request, checked field by field and against the request."""
        try:
            reply = self.Reply.from_wire(message)
            self.check_reply(reply)
        except ProtocolError as exc:
            raise ProtocolError(f"malformed reply to op {self.op!r}: {exc}") from None
        return reply

    def check_reply(self, reply: Any) -> None:
        """What the reply must hold given what was asked."""


@dataclass(frozen=True)
class Failure(Message):
    """A worker's reply that the op failed, in `phase` ("problem", "import", "call", ...)."""

    phase: str = wire(str_)
    error: str = wire(str_)
    traceback: str = wire(str_, "")

    def to_wire(self) -> dict[str, Any]:
        return {"ok": False, **super().to_wire()}


@dataclass(frozen=True)
class Done(Reply):
    """The reply of an op that reports nothing but its success."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ProtocolError(message)


def count(name: str, values: list | None, n: int) -> None:
    expect(
        values is not None and len(values) == n,
        f"{name}: expected {n} entries, got {'none' if values is None else len(values)}",
    )
