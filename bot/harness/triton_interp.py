"""A repair to Triton's CPU interpreter, applied inside a worker before a candidate's calls.

The interpreter keeps bfloat16 tensors as their uint16 bit patterns, and its `tl.dot` only
converts 8-bit floats before `np.matmul`, so a bfloat16 dot multiplies bit patterns
(triton-lang/triton#11584; upstream: "we just don't support it yet"). A correct bf16 matmul
kernel would then be rejected on CPU with errors near 1e10. bfloat16 is the upper half of a
float32, so the operands widen exactly.
"""

from __future__ import annotations

import os
import sys


def needed() -> bool:
    """Only where Triton runs interpreted and a candidate has imported it."""
    return os.environ.get("TRITON_INTERPRET") == "1" and "triton" in sys.modules


def mend_bf16_dot() -> bool:
    """Patch the interpreter's `create_dot` once; False where this Triton has no such hook."""
    import numpy as np

    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    builder = getattr(interpreter, "InterpreterBuilder", None)
    original = getattr(builder, "create_dot", None)
    if original is None or getattr(original, "kernel_bot_mended", False):
        return original is not None

    def widened(handle):
        if handle.dtype != tl.bfloat16:
            return handle
        bits = np.ascontiguousarray(handle.data).astype(np.uint32) << 16
        return interpreter.TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot(self, a, b, d, *args, **kwargs):
        return original(self, widened(a), widened(b), d, *args, **kwargs)

    create_dot.kernel_bot_mended = True
    builder.create_dot = create_dot
    return True
