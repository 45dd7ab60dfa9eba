"""A GitHub REST API test double: a real HTTP server backed by a real bare git repository."""

from .records import CheckRunRecord, CommentRecord, Identity, PullRecord
from .server import ROUTES, SECONDARY_RATE_LIMIT, SERVER_ERROR, Exchange, Fault, GitHubDouble

__all__ = [
    "ROUTES",
    "SECONDARY_RATE_LIMIT",
    "SERVER_ERROR",
    "CheckRunRecord",
    "CommentRecord",
    "Exchange",
    "Fault",
    "GitHubDouble",
    "Identity",
    "PullRecord",
]
