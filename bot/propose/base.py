"""The contract between the optimisation loop and its proposers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.domain import CandidateSource, Problem


@dataclass(frozen=True)
class Hardware:
    """What a kernel author needs to know about the GPU (ceilings for the prompt)."""

    name: str
    sm_count: int
    l2_mb: float
    smem_per_sm_kb: int
    bandwidth_gbs: float
    bf16_tflops: float
    fp32_tflops: float
    compute_capability: str


H200 = Hardware(
    name="NVIDIA H200 (SM90)",
    sm_count=132,
    l2_mb=60,
    smem_per_sm_kb=228,
    bandwidth_gbs=4800,
    bf16_tflops=989,
    fp32_tflops=67,
    compute_capability="9.0",
)


@dataclass(frozen=True)
class Feedback:
    """What happened to one earlier candidate; goes into the next round's prompt."""

    candidate: CandidateSource
    status: str  # "syntax_error" | "compile_error" | "runtime_error" | "rejected" | "accepted" | "empty"
    message: str  # the evidence: compiler output with the line, failed check, error...
    speedup: float | None = None
    median_us: float | None = None
    baseline_us: float | None = None
    floor_us: float | None = None


@dataclass(frozen=True)
class ProposalRequest:
    problem: Problem
    current_source: str  # the TARGET module's source, or the problem's reference
    hardware: Hardware
    floor_us: float | None  # roofline floor of the main shape, when known
    round: int
    samples: int
    history: tuple[Feedback, ...]
    backend: str = "triton"  # "triton" | "cuda"


class BudgetExhausted(Exception):
    """A proposer ran out of its token (or cost) budget."""


class Proposer(Protocol):
    name: str

    def propose(self, request: ProposalRequest) -> list[CandidateSource]:
        """Zero or more candidate modules for this round (never raises for bad answers)."""
        ...
