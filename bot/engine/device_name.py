"""The name of the device a job runs on, read without starting CUDA in the bot's process."""

from __future__ import annotations

import platform
import subprocess


def device_name(device: str, gpu_index: int | None) -> str:
    """The GPU's name as its driver reports it ("NVIDIA H100 80GB HBM3", through nvidia-smi, a
    subprocess, so the bot's own process holds no CUDA context), or the CPU's."""
    if device != "cuda":
        return f"CPU ({platform.processor() or platform.machine()}): no GPU, candidates run on the CPU"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", f"--id={gpu_index or 0}"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return "an unidentified NVIDIA GPU"
    return out.stdout.strip() or "an unidentified NVIDIA GPU"
