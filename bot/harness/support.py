"""What the harness's ops use that keeps no state of its own (bot/harness/worker.py): the
problem's and the candidate's import, their outputs described, the reference's parameters
given to ModelNew, the CUDA allocator's free memory poisoned, and the channel's socket."""

from __future__ import annotations

import importlib.util
import socket
import sys
from typing import Any

import torch

from bot.harness import shared


def import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def meta(out: Any) -> dict[str, Any]:
    if type(out) is not shared.Tensor:  # exact type: subclasses (lazy tensors) are refused
        return {"type": type(out).__name__}
    return {
        "type": "Tensor",
        "dtype": str(out.dtype).removeprefix("torch."),
        "shape": list(out.shape),
        "device": out.device.type,
    }


def transfer_dtype(native: torch.dtype) -> torch.dtype | None:
    """Reference values travel in float64 for fp32/fp64 outputs, float32 for lower precision."""
    if not native.is_floating_point:
        return None
    return torch.float64 if native in (torch.float32, torch.float64) else torch.float32


class ProblemShapeError(Exception):
    pass


def module_tensors(model: Any) -> list[torch.Tensor]:
    if not isinstance(model, torch.nn.Module):
        return []
    return list(model.parameters()) + list(model.buffers())


def copy_matching_state(reference: torch.nn.Module, model: Any) -> None:
    """Give ModelNew the reference's parameters wherever names and shapes match."""
    if not isinstance(model, torch.nn.Module) or not isinstance(reference, torch.nn.Module):
        return
    ref_state = reference.state_dict()
    for name, value in model.state_dict().items():
        src = ref_state.get(name)
        if src is not None and src.shape == value.shape:
            value.copy_(src)


def poison_free_cuda_memory() -> None:
    """Fill the caching allocator's free blocks with 0xFF (NaN in every float format),
    so an output that is `torch.empty` reusing freed memory cannot look correct."""
    shared.cuda_sync()
    sizes = [b["size"] for seg in torch.cuda.memory_snapshot() for b in seg["blocks"] if b["state"] == "inactive"]
    held = []
    for size in sorted(sizes, reverse=True):
        try:
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
        except RuntimeError:
            break
        t.fill_(0xFF)
        held.append(t)
    shared.cuda_sync()
    del held


def connect(address: str) -> socket.socket:
    kind, _, where = address.partition(":")
    if kind == "fd":
        return socket.socket(fileno=int(where))
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(where)
        return sock
    raise ValueError(f"unknown channel {address!r}")
