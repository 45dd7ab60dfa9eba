"""Secrets out of everything a worker says: one function at the parent's boundary.

A worker cannot read the bot's secrets (its environment is an allowlist, its /proc shows only
its own namespace); this is the second line: every string that comes from a worker (replies,
errors, tracebacks, log tails, type names) has the values of the bot's secret-looking
environment variables replaced before it can reach results.json, logs, JUnit or reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from bot.sandbox.base import _SECRET

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") would redact ordinary words


def secret_values(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The values of secret-looking variables, longest first (a token may contain another)."""
    source = os.environ if environ is None else environ
    values = {v for k, v in source.items() if _SECRET.search(k) and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(values, key=len, reverse=True))


def scrub(value: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """`value` with every secret value in its strings (dict keys included) redacted."""
    found = secret_values() if secrets is None else secrets
    if not found:
        return value
    return _scrub(value, found)


def _scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub(v, secrets) for v in value)
    return value
