"""The physical floor of a problem on a device: no honest kernel runs faster."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peaks:
    """Datasheet ceilings (upper bounds, so the floor is a true lower bound)."""

    bandwidth_bytes_per_s: float
    flops_per_s: float  # the fastest matrix rate any precision allowed by the tolerance reaches


# Dense bf16 tensor-core rate: a kernel may legally use it for any tolerance we accept.
_PEAKS = {
    "H200": Peaks(4.8e12, 989e12),
    "H100": Peaks(3.35e12, 989e12),
    "H800": Peaks(3.35e12, 989e12),
    "A100": Peaks(2.04e12, 312e12),
}


def peaks_for(device_name: str) -> Peaks | None:
    """Peaks for a GPU by name; None for CPUs and unknown GPUs (no floor is enforced)."""
    for key, peaks in _PEAKS.items():
        if key in device_name:
            return peaks
    return None


def floor_us(nbytes: int, flops: int | None, peaks: Peaks | None) -> float | None:
    if peaks is None:
        return None
    return max(nbytes / peaks.bandwidth_bytes_per_s, (flops or 0) / peaks.flops_per_s) * 1e6
