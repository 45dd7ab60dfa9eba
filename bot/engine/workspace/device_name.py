"""Facts about the device a job runs on, read through nvidia-smi (bot.sandbox.nvidia_smi)."""

from __future__ import annotations

import platform

from bot.core.settings import Device
from bot.sandbox import nvidia_smi


def _query(fields: str, gpu_index: int | None) -> str | None:
    return nvidia_smi.query([f"--query-gpu={fields}", "--format=csv,noheader,nounits"], gpu_index) or None


def device_name(device: str, gpu_index: int | None) -> str:
    """The GPU's name as its driver reports it ("NVIDIA H100 80GB HBM3"), or the CPU's."""
    if device != Device.CUDA:
        return f"CPU ({platform.processor() or platform.machine()}): no GPU, candidates run on the CPU"
    return _query("name", gpu_index) or "an unidentified NVIDIA GPU"


def gpu_memory_bytes(gpu_index: int | None) -> tuple[int, int] | None:
    """(free, total) bytes of the GPU as its driver counts them (every process's use), or None
    where nvidia-smi cannot say."""
    out = _query("memory.free,memory.total", gpu_index)
    try:
        free_mib, total_mib = (int(v) for v in (out or "").split(","))
    except ValueError:
        return None
    return free_mib << 20, total_mib << 20
