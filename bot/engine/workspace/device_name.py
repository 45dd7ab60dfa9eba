"""Facts about the device a job runs on, read through nvidia-smi (a subprocess), so that the
bot's own process never starts CUDA: no context of ~500 MiB held for the whole run, nothing a
later fork would inherit."""

from __future__ import annotations

import os
import platform
import subprocess

from bot.core.settings import Device, smi_id


def _device_id(gpu_index: int | None) -> str:
    return smi_id(gpu_index, os.environ.get("CUDA_VISIBLE_DEVICES", ""))


def _query(fields: str, gpu_index: int | None) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", f"--id={_device_id(gpu_index)}"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


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
