

# kernel-bot: operator calls of the forward replaced by the kernels below, where they apply.
# Read as text into search candidates (bot/propose/paths.py), before the kernels' own text.
import os as _kernel_bot_os

import torch
from torch.overrides import TorchFunctionMode as _KernelBotTorchFunctionMode

_KERNEL_BOT_INTERPRETED = _kernel_bot_os.environ.get("TRITON_INTERPRET") == "1"
# function -> replacement: the replacement returns None where it does not apply (a shape,
# dtype or argument it does not cover), and the function then runs as it would have.
_KERNEL_BOT_REPLACEMENTS = {}


class _KernelBotReplacementMode(_KernelBotTorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        replacement = _KERNEL_BOT_REPLACEMENTS.get(func)
        if replacement is not None:
            out = replacement(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


class _KernelBotReplaced:
    """The forward with the replacements in force (on this thread, for this call only)."""

    def __init__(self, forward):
        self.forward = forward

    def __call__(self, *inputs):
        with _KernelBotReplacementMode():
            return self.forward(*inputs)


def _kernel_bot_on_device(*tensors):
    """Tensors a Triton kernel can take here: on a GPU, or on a CPU through the interpreter."""
    device = tensors[0].device
    return all(t.device == device for t in tensors) and (device.type == "cuda" or _KERNEL_BOT_INTERPRETED)
