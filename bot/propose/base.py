"""The contract between the optimisation loop and its proposers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.core.domain import CandidateSource, Problem


@dataclass(frozen=True)
class Hardware:
    """What a kernel author needs to know about the device (ceilings for the prompt); `None`
    where the device's figure is not known (an unlisted GPU, a CPU)."""

    name: str
    sm_count: int | None = None
    l2_mb: float | None = None
    smem_per_sm_kb: int | None = None
    bandwidth_gbs: float | None = None
    bf16_tflops: float | None = None
    fp32_tflops: float | None = None
    compute_capability: str | None = None


# Datasheet figures (dense tensor-core rates). Keys are matched against the name the driver
# reports ("NVIDIA H100 80GB HBM3"), longest key first, so "H100 PCIe" wins over "H100".
KNOWN_GPUS: dict[str, Hardware] = {
    "H200": Hardware("NVIDIA H200 (SM90)", 132, 60, 228, 4800, 989, 67, "9.0"),
    "H100 PCIe": Hardware("NVIDIA H100 PCIe (SM90)", 114, 50, 228, 2000, 756, 51, "9.0"),
    "H100": Hardware("NVIDIA H100 SXM (SM90)", 132, 50, 228, 3350, 989, 67, "9.0"),
    "H800": Hardware("NVIDIA H800 (SM90)", 132, 50, 228, 3350, 989, 67, "9.0"),
    "A100": Hardware("NVIDIA A100 (SM80)", 108, 40, 164, 2039, 312, 19.5, "8.0"),
}
H200 = KNOWN_GPUS["H200"]


def hardware_for(device_name: str) -> Hardware:
    """The ceilings of the device a job runs on, by the name its driver reports; an unlisted
    device is named with no figures rather than described as another GPU."""
    for key in sorted(KNOWN_GPUS, key=len, reverse=True):
        if key in device_name:
            return KNOWN_GPUS[key]
    return Hardware(device_name)


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
