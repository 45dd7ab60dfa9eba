"""nvidia-smi, asked about one GPU as torch in this process numbers it: a subprocess, so that
the bot's own process never starts CUDA (no context of ~500 MiB held for the whole run, nothing
a later fork would inherit)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence


def device_id(gpu_index: int | None, visible_devices: str) -> str:
    """nvidia-smi's name for torch's device `gpu_index` under CUDA_VISIBLE_DEVICES=`visible_devices`:
    nvidia-smi ignores that variable, whose entries (indices or UUIDs) it accepts as `--id`."""
    index = gpu_index or 0
    visible = [v.strip() for v in visible_devices.split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def query(options: Sequence[str], gpu_index: int | None) -> str | None:
    """nvidia-smi's answer to `options` about torch's GPU `gpu_index` (its output, stripped), or
    None where it cannot say."""
    gpu = device_id(gpu_index, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    try:
        out = subprocess.run(["nvidia-smi", *options, f"--id={gpu}"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
