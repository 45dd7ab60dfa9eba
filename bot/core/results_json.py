"""The JSON conventions shared by results.json's typed objects (bot.core.results and its parts).

Lists in the document are tuples in memory, so the objects stay immutable; a key the schema
(bot.core.results_schema) makes optional but not nullable is left out when it has no value,
never written as null.
"""

from __future__ import annotations

from typing import Any

Interval = tuple[float, float]  # a confidence interval, (low, high); a two-element list in JSON


def read_interval(value: Any) -> Interval | None:
    return (value[0], value[1]) if isinstance(value, (list, tuple)) and len(value) == 2 else None


def as_list(value: tuple[Any, ...] | None) -> list[Any] | None:
    return None if value is None else list(value)


def drop_none(pairs: dict[str, Any], *optional: str) -> dict[str, Any]:
    """`pairs` without the optional (not nullable) keys whose value is None."""
    return {k: v for k, v in pairs.items() if not (v is None and k in optional)}
