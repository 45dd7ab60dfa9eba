"""The frozen dataclasses that cross module boundaries (timing samples and speedups:
bot.core.measurement).

Units live in field names (`median_us`, `max_rel_err`); `None` means absent.
Only the standard library is imported here so that the GPU-side path stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.core.settings import Device


def source_hash(text: str) -> str:
    """Identity of a piece of source code (candidates, bases, caches)."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def source_sha256(text: str) -> str:
    """The full SHA-256 of source code: what the publishing stage checks a written file against."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Shape:
    """One input set of a problem: module globals to override before get_inputs()."""

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """A KernelBench-format problem file plus its optional metadata (read statically)."""

    path: Path
    name: str
    source: str
    root: Path  # repository root: TARGET and WATCH are relative to it
    target_relpath: str | None
    gpu_shapes: tuple[Shape, ...]
    cpu_shapes: tuple[Shape, ...]
    tolerance: Mapping[str, float]  # overrides: norm_rel, elem_rtol, elem_atol_rel
    distributions: tuple[str, ...]
    reference_precision: str  # "float64" | "float32" | "native"
    watch: tuple[str, ...]
    # distribution -> the reason the problem states for leaving it out (bot/core/distributions.py)
    skipped_distributions: Mapping[str, str] = field(default_factory=dict)

    @property
    def target(self) -> Path | None:
        return None if self.target_relpath is None else self.root / self.target_relpath

    def shapes_for(self, device: str) -> tuple[Shape, ...]:
        return self.cpu_shapes if device == Device.CPU else self.gpu_shapes


@dataclass(frozen=True)
class Origin:
    """Where a candidate came from (shown in reports and used for refinement)."""

    strategy: str  # "file" | "reference" | "target" | "search" | "llm"
    detail: str = ""  # e.g. "torch.compile(mode='max-autotune')"
    model: str | None = None
    round: int | None = None
    parent: str | None = None  # source hash of the candidate this one was derived from

    def to_json(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "detail": self.detail,
            "model": self.model,
            "round": self.round,
            "parent": self.parent,
        }


@dataclass(frozen=True)
class CandidateSource:
    """A self-contained candidate module: a drop-in replacement defining `ModelNew`."""

    name: str
    source: str
    origin: Origin
    path: Path | None = None  # where it lives on disk, when it came from a file
    class_name: str = "ModelNew"

    @property
    def source_hash(self) -> str:
        return source_hash(self.source)


@dataclass(frozen=True)
class CheckResult:
    """One verifier check: its name, outcome and human-readable evidence."""

    name: str
    passed: bool
    evidence: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "evidence": self.evidence, "details": dict(self.details)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckResult:
        """The check `to_json` wrote."""
        return cls(d["name"], d["passed"], d.get("evidence", ""), dict(d.get("details") or {}))


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgement on one candidate."""

    status: str  # "accepted" | "rejected"
    checks: tuple[CheckResult, ...]

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f"{c.name}: {c.evidence}" for c in self.checks if not c.passed)

    def to_json(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "status": self.status,
            "reasons": list(self.reasons),
            "checks": [c.to_json() for c in self.checks],
        }


@dataclass(frozen=True)
class Environment:
    """Where numbers were measured: enough to reproduce or to distrust them."""

    device: str  # "cpu" | "cuda"
    device_name: str
    torch: str
    triton: str | None
    cuda: str | None
    driver: str | None
    python: str
    clocks: Mapping[str, Any] = field(default_factory=dict)
    host: str = ""
    containment: str = ""  # what kept the workers in, e.g. "cgroup+pidns+netns+uid", "none: not root"

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_name": self.device_name,
            "torch": self.torch,
            "triton": self.triton,
            "cuda": self.cuda,
            "driver": self.driver,
            "python": self.python,
            "clocks": dict(self.clocks),  # never the host: it names the runner
            "containment": self.containment,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Environment:
        """From results.json's `environment` or a worker's description of its machine
        (bot.harness.env, which adds the host that results.json never holds)."""
        return cls(
            d.get("device", ""),
            d.get("device_name", ""),
            d.get("torch", ""),
            d.get("triton"),
            d.get("cuda"),
            d.get("driver"),
            d.get("python", ""),
            dict(d.get("clocks") or {}),
            d.get("host", ""),
            d.get("containment", ""),
        )


@dataclass(frozen=True)
class Skipped:
    """A transformation that does not apply to a problem, and why (shown in the report)."""

    transformation: str
    reason: str


@dataclass(frozen=True)
class FileChange:
    """One file a follow-up pull request writes (repository-relative path)."""

    path: str
    content: bytes


@dataclass(frozen=True)
class CheckRunPlan:
    name: str
    head_sha: str
    conclusion: str  # "success" | "neutral" | "failure"
    title: str
    summary: str


@dataclass(frozen=True)
class PullRequestPlan:
    """Everything stage 2 needs to publish: computed purely from results, no network."""

    repo: str  # "owner/name"
    branch: str  # e.g. "kernel-bot/pr-12"
    base: str  # branch the follow-up PR targets
    title: str
    body: str
    files: tuple[FileChange, ...]
    patch: str  # unified diff of `files` against `base`
    source_pr: int | None  # the PR that triggered the run (sticky comment goes there)
    comment_body: str | None
    fork: bool  # True: never push; the comment carries the patch
    check_run: CheckRunPlan | None = None
    # The commit the run measured: the follow-up commit's parent (bot.github.branches). A push
    # needs it and the run's id, which the commit carries as its `Kernel-Bot-Run:` trailer.
    measured_sha: str | None = None
    run_id: int | None = None
    # Files the measurement rests on (each TARGET and its problem file): the follow-up is built
    # on a newer tip of `base` only where all of them are unchanged since `measured_sha`.
    measured_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trigger:
    """Why the bot runs: a pull request event, a schedule, a manual dispatch or the CLI."""

    kind: str  # "pull_request" | "schedule" | "workflow_dispatch" | "cli"
    repo: str | None = None  # "owner/name"
    action: str | None = None  # e.g. "labeled", "synchronize"
    pr_number: int | None = None
    base_ref: str | None = None
    base_sha: str | None = None
    head_ref: str | None = None
    head_sha: str | None = None
    head_repo: str | None = None  # "owner/name" of the head; differs from repo for forks
    label: str | None = None  # the label that was added, for "labeled"
    labels: tuple[str, ...] = ()  # all labels on the PR
    default_branch: str | None = None

    @property
    def fork(self) -> bool:
        return self.head_repo is not None and self.repo is not None and self.head_repo != self.repo

    def to_json(self) -> dict[str, Any]:
        """Its one serialised form (results.json's `trigger`)."""
        return {
            "kind": self.kind,
            "repo": self.repo,
            "action": self.action,
            "pr_number": self.pr_number,
            "base_ref": self.base_ref,
            "base_sha": self.base_sha,
            "head_ref": self.head_ref,
            "head_sha": self.head_sha,
            "head_repo": self.head_repo,
            "label": self.label,
            "labels": list(self.labels),
            "default_branch": self.default_branch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trigger:
        """From `to_json`'s form; missing fields take their defaults, unknown ones are ignored."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{"kind": "schedule", **known, "labels": tuple(known.get("labels") or ())})
