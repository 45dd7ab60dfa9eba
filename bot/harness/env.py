"""The machine as a worker sees it: what the report names (versions, device, driver, clocks)
and the slack of the stream check (the host's time around an empty timed region)."""

from __future__ import annotations

import platform
import subprocess
from typing import Any

import torch

from bot.core.settings import Device
from bot.harness import shared


def describe_environment(device: str, describe: bool = True) -> dict[str, Any]:
    """What the parent reports as the machine: versions, the device, and with `describe` on a
    GPU its driver and clocks (nvidia-smi, a subprocess: only the reference worker asks)."""
    env: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "cuda": torch.version.cuda,
        "driver": None,
        "clocks": {},
    }
    try:
        from importlib.metadata import version

        env["triton"] = version("triton")
    except Exception:
        env["triton"] = None
    if device == Device.CUDA:
        env["device_name"] = torch.cuda.get_device_name()
        if describe:  # driver and clocks: only the worker whose environment is reported
            env.update(_nvidia_smi())
    else:
        env["device_name"] = _cpu_name()
    return env


def timer_overhead_us(device: str) -> float:
    """Host-minus-event time of an empty timed region: the slack of the stream check."""
    if device != Device.CUDA:
        return 0.0
    gaps = []
    for _ in range(30):
        e0, e1 = shared.Event(enable_timing=True), shared.Event(enable_timing=True)
        shared.cuda_sync()
        t0 = shared.perf_ns()
        shared.ev_record(e0)
        shared.ev_record(e1)
        shared.cuda_sync()
        host = (shared.perf_ns() - t0) / 1e3
        gaps.append(host - shared.ev_elapsed(e0, e1) * 1e3)
    gaps.sort()
    return gaps[len(gaps) // 2]


def _nvidia_smi() -> dict[str, Any]:
    query = "driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw"
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                f"--query-gpu={query}",
                "--format=csv,noheader,nounits",
                f"--id={torch.cuda.current_device()}",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        vals = [v.strip() for v in out.splitlines()[0].split(",")]
        names = query.split(",")[1:]
        return {"driver": vals[0], "clocks": dict(zip(names, vals[1:]))}
    except Exception:
        return {}


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
