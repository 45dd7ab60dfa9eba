"""Inside a worker: a batch's inputs laid out for the parent to fill from outside (op "stage").

On the CPU the parent has the trusted reference worker draw a batch's inputs and describe them
(`layout`, `regions`); a contender allocates empty buffers of that layout (`allocate`) and the
parent copies the reference's bytes into them while the contender is frozen
(bot.sandbox.memory). So a contender holds no input of a timed call before the parent's window
opens, and cannot compute the answers ahead of it. Inputs this cannot describe (other than
tensors on the CPU and plain values) are staged by the worker itself, as on CUDA.
"""

from __future__ import annotations

from typing import Any

import torch

# Per call, per input: {"tensor": [dtype, shape]} or {"value": v, "tuple": bool}.
Layout = list[list[dict]]
Regions = list[list[list[int]]]  # per call, per tensor input: [address, bytes]

_PLAIN = (type(None), bool, int, float, str)


class NotLaidOut(Exception):
    """An input the layout cannot carry: the worker stages this problem's inputs itself."""


def contiguous(staged: list[list[Any]]) -> list[list[Any]]:
    """Each tensor input in one dense block (a copy where it was not), so one region holds it."""
    return [[x.contiguous() if isinstance(x, torch.Tensor) else x for x in inputs] for inputs in staged]


def layout(staged: list[list[Any]]) -> Layout:
    return [[_spec(x) for x in inputs] for inputs in staged]


def _spec(x: Any) -> dict:
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.layout != torch.strided or x.requires_grad:
            raise NotLaidOut(f"a {x.device.type} tensor ({x.layout}, requires_grad={x.requires_grad})")
        return {"tensor": [str(x.dtype).removeprefix("torch."), list(x.shape)]}
    if isinstance(x, _PLAIN):
        return {"value": x, "tuple": False}
    if isinstance(x, (list, tuple)) and all(isinstance(v, _PLAIN) for v in x):
        return {"value": list(x), "tuple": isinstance(x, tuple)}
    raise NotLaidOut(f"an input of type {type(x).__name__}")


def allocate(laid_out: Layout) -> list[list[Any]]:
    """Empty buffers for a batch of this layout (the parent fills the tensors' bytes)."""
    return [[_buffer(spec) for spec in inputs] for inputs in laid_out]


def _buffer(spec: dict) -> Any:
    if "tensor" in spec:
        dtype, shape = spec["tensor"]
        return torch.empty([int(n) for n in shape], dtype=getattr(torch, str(dtype)))
    value = spec["value"]
    return tuple(value) if spec.get("tuple") else value


def regions(staged: list[list[Any]]) -> Regions:
    return [
        [[x.data_ptr(), x.numel() * x.element_size()] for x in inputs if isinstance(x, torch.Tensor)]
        for inputs in staged
    ]
