"""The frozen dataclasses that cross module boundaries.

Units live in field names (`median_us`, `max_rel_err`); `None` means absent.
Only the standard library is imported here so that the GPU-side path stays light.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]  # takes one line of progress for the person watching


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
        return self.cpu_shapes if device == "cpu" else self.gpu_shapes


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


# Worker processes per contender, at most (`--replicas`): on the H200 a 5 us kernel's median
# repeated within 1 % across fresh runs with this many, and moved by 2 % with two (docs/benchmark.md).
STEADY_REPLICAS = 16


@dataclass(frozen=True)
class Measurement:
    """Raw timing samples of one contender on one shape; statistics are derived."""

    samples_us: tuple[float, ...]
    # Lengths of the consecutive batches the samples were taken in (one visit of the
    # interleaved protocol each). Calls within a batch share their moment (clocks, host
    # state), so batches, not calls, are the independent units; () means every sample is
    # its own batch.
    batch_sizes: tuple[int, ...] = ()
    # Which of the contender's worker processes took each batch (bot.engine.timing, replicas); ()
    # means one worker took them all.
    batch_workers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.batch_sizes and sum(self.batch_sizes) != len(self.samples_us):
            raise ValueError(f"batch sizes {sum(self.batch_sizes)} != {len(self.samples_us)} samples")
        if self.batch_workers and len(self.batch_workers) != len(self.batch_sizes):
            raise ValueError(f"{len(self.batch_workers)} batch workers for {len(self.batch_sizes)} batches")

    @property
    def workers(self) -> int:
        return len(set(self.batch_workers)) or 1

    @property
    def worker_medians(self) -> tuple[float, ...]:
        """The median of each worker's own samples, in worker order."""
        if not self.batch_workers:
            return (self.median_us,)
        taken: dict[int, list[float]] = {}
        start = 0
        for worker, size in zip(self.batch_workers, self.batch_sizes):
            taken.setdefault(worker, []).extend(self.samples_us[start : start + size])
            start += size
        return tuple(statistics.median(taken[w]) for w in sorted(taken))

    @property
    def n(self) -> int:
        return len(self.samples_us)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.batch_sizes or (1,) * len(self.samples_us)

    @property
    def batch_medians(self) -> tuple[float, ...]:
        out, start = [], 0
        for size in self.sizes:
            out.append(statistics.median(self.samples_us[start : start + size]))
            start += size
        return tuple(out)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    def quantile_us(self, q: float) -> float:
        s = sorted(self.samples_us)
        pos = q * (len(s) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    @property
    def iqr_us(self) -> float:
        return self.quantile_us(0.75) - self.quantile_us(0.25)

    @property
    def rel_se(self) -> float:
        """Relative standard error of the median: the larger of the estimate from the IQR
        of all calls and the one from the spread between batches (calls within a batch are
        correlated, so the first alone is too optimistic)."""
        if self.n < 2 or self.median_us <= 0:
            return math.inf
        sigma = self.iqr_us / 1.349
        within = 1.2533 * sigma / math.sqrt(self.n) / self.median_us
        if not self.batch_sizes:
            return within
        meds = self.batch_medians
        if len(meds) < 2:
            return math.inf
        between = statistics.stdev(meds) / math.sqrt(len(meds)) / self.median_us
        return max(within, between)

    def to_json(self, with_samples: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "median_us": self.median_us,
            "iqr_us": self.iqr_us,
            "q1_us": self.quantile_us(0.25),
            "q3_us": self.quantile_us(0.75),
            "n": self.n,
            "rel_se": self.rel_se,
            "batches": len(self.sizes),
            "workers": self.workers,
            "worker_medians_us": list(self.worker_medians),
        }
        if with_samples:
            out.update(self.samples_json())
        return out

    def samples_json(self) -> dict[str, Any]:
        """The raw samples alone: everything the statistics are derived from."""
        return {
            "samples_us": list(self.samples_us),
            "batch_sizes": list(self.batch_sizes),
            "batch_workers": list(self.batch_workers),
        }

    @classmethod
    def from_samples_json(cls, data: Mapping[str, Any]) -> Measurement:
        return cls(
            tuple(float(v) for v in data["samples_us"]),
            tuple(int(v) for v in data["batch_sizes"]),
            tuple(int(v) for v in data["batch_workers"]),
        )


@dataclass(frozen=True)
class Speedup:
    """Baseline median / candidate median with a bootstrap confidence interval."""

    ratio: float
    ci_low: float
    ci_high: float
    level: float
    significance: str  # "faster" | "slower" | "no significant difference"
    # What the interval was derived from besides the candidate's own samples: the publishing
    # stage recomputes ratio and interval from these and refuses an artifact that disagrees.
    baseline: Measurement | None = None
    spread_log_sd: float = 0.0
    spread_df: int = 0
    resamples: int = 2000

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "speedup": self.ratio,
            "speedup_ci": [self.ci_low, self.ci_high],
            "level": self.level,
            "significance": self.significance,
        }
        if self.baseline is not None:
            out["derivation"] = {
                "baseline": self.baseline.samples_json(),
                "spread_log_sd": self.spread_log_sd,
                "spread_df": self.spread_df,
                "resamples": self.resamples,
            }
        return out


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

    @property
    def key(self) -> str:
        """Identity for caches: results from another GPU or stack are not reused."""
        return "|".join(str(x) for x in (self.device_name, self.torch, self.triton, self.cuda, self.driver))


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
