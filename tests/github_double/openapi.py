"""GitHub's official OpenAPI description as a response validator, plus where the npm fixtures live.

OpenAPI 3.0 schemas are not quite JSON Schema: `nullable: true` becomes an explicit "null"
alternative here. Objects are also closed (`additionalProperties: false` where the
description leaves it open) so the double cannot invent fields GitHub does not document.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from jsonschema import Draft4Validator, FormatChecker

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = "run tests/github_double/install_fixtures.sh"
_METHODS = ("get", "post", "patch", "put", "delete")


def npm_dir() -> Path:
    return Path(os.environ.get("KERNEL_BOT_NPM_DIR") or REPO_ROOT / ".cache" / "npm")


def npm_file(package: str, relpath: str) -> Path:
    """Path of a file from a pinned npm package; fails in CI and skips locally when absent."""
    path = npm_dir() / "node_modules" / package / relpath
    if not path.is_file():
        message = f"{path} is missing: {INSTALL_HINT} (installs pinned {package})"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def webhook_examples(event: str) -> list[dict[str, Any]]:
    """Example payloads GitHub sends for `event`, from @octokit/webhooks-examples."""
    index = json.loads(npm_file("@octokit/webhooks-examples", "api.github.com/index.json").read_text())
    return [example for entry in index if entry["name"] == event for example in entry["examples"]]


@dataclass(frozen=True)
class Operation:
    template: str  # "/repos/{owner}/{repo}/pulls/{pull_number}"
    method: str
    operation_id: str
    spec: dict[str, Any]


class OpenAPIDescription:
    """Operations and translated response schemas of one OpenAPI 3.0 description."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._matchers: list[tuple[re.Pattern[str], str]] = []
        for template in document["paths"]:
            # A path parameter is one segment, except a trailing one may hold slashes ({ref}).
            regex = re.sub(r"\\\{[^/]+?\\\}", "([^/]+)", re.escape(template))
            self._matchers.append((re.compile(regex + "$"), template))
            if template.endswith("}"):
                self._matchers.append((re.compile(regex.rsplit("([^/]+)", 1)[0] + "(.+)$"), template))
        # Literal segments win over parameters (/issues/comments/1 is not /issues/{number}/...),
        # and a slash-holding parameter is the last resort, longest literal text first.
        self._matchers.sort(key=_specificity)

    @classmethod
    def load(cls, path: Path) -> OpenAPIDescription:
        return cls(json.loads(path.read_text()))

    def operation(self, method: str, path: str) -> Operation | None:
        for regex, template in self._matchers:
            spec = self.document["paths"][template].get(method.lower())
            if spec and regex.match(path):
                return Operation(template, method.upper(), spec["operationId"], spec)
        return None

    def response_schema(self, op: Operation, status: int) -> dict[str, Any] | None:
        """JSON schema of op's documented `status` response; None when that status is undocumented."""
        response = op.spec["responses"].get(str(status))
        if response is None:
            return None
        if "$ref" in response:
            response = self._resolve(response["$ref"])
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        return {"type": "null"} if schema is None else translate(schema)

    def error_schema(self) -> dict[str, Any]:
        return {"$ref": "#/components/schemas/basic-error"}

    def validator(self, schema: dict[str, Any]) -> Draft4Validator:
        # The translated components sit beside the schema so "#/components/..." refs resolve.
        root = {**schema, "components": {"schemas": self._schemas}}
        return Draft4Validator(root, format_checker=_FORMATS)

    @cached_property
    def _schemas(self) -> dict[str, Any]:
        return {name: translate(s) for name, s in self.document["components"]["schemas"].items()}

    def _resolve(self, ref: str) -> dict[str, Any]:
        node: Any = self.document
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return node


def _specificity(matcher: tuple[re.Pattern[str], str]) -> tuple[int, int]:
    regex, template = matcher
    literal = len(re.sub(r"\{[^}]*\}", "", template))
    if regex.pattern.endswith("(.+)$"):
        return 1, -literal
    return 0, template.count("{")


def translate(schema: Any, in_all_of: bool = False) -> Any:
    """OpenAPI 3.0 schema -> JSON Schema (draft 4): nullable, closed objects."""
    if isinstance(schema, list):
        return [translate(s, in_all_of) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: translate(v, k == "allOf") if k not in ("properties", "enum", "example") else v
        for k, v in schema.items()
        if k not in ("nullable", "discriminator", "xml", "example", "examples", "externalDocs", "deprecated")
    }
    if "properties" in schema:
        out["properties"] = {k: translate(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not in_all_of:
            out["additionalProperties"] = False  # allOf members must stay open to combine
    if schema.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    # GitHub sends UTC timestamps like 2011-01-26T19:01:12Z.
    return not isinstance(value, str) or bool(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value)
        and datetime.fromisoformat(value.replace("Z", "+00:00"))
    )


@_FORMATS.checks("uri")
def _is_uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    return bool(parts.scheme and (parts.netloc or parts.scheme == "mailto")) and " " not in value
