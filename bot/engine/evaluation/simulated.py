"""Code that runs only under a simulator on this device: verified, never timed for a claim.

On a CPU every Triton kernel runs through Triton's interpreter (the workers set
TRITON_INTERPRET=1, bot/sandbox/base.py): a NumPy simulation of the GPU program. rmsnorm's
Triton TARGET takes 181 ms there against the eager reference's 39 us, so a dry run timing it
would claim "4675x faster": true of the interpreter, meaningless for any machine. Decided here in
the parent, from the device and the contender's source, never from what the worker says.
"""

from __future__ import annotations

import re

from bot.core.settings import Device

# (pattern in the source, the simulator it runs under on a CPU). Numba's CUDA kernels run in
# its CUDA simulator where one is enabled (NUMBA_ENABLE_CUDASIM), the same kind of thing.
_SIMULATED_ON_CPU = (
    (
        re.compile(r"^\s*(?:import|from)\s+triton\b|\btriton\.jit\b|\btl\.\w+", re.M),
        "runs in Triton's interpreter on this CPU",
    ),
    (
        re.compile(r"\bnumba\.cuda\b|^\s*from\s+numba\s+import\s+cuda\b", re.M),
        "runs in Numba's CUDA simulator on this CPU",
    ),
)


def simulated_reason(source: str, device: str) -> str | None:
    """Why `source`'s times on `device` describe a simulator, not the code; None where they don't."""
    if device == Device.CUDA:
        return None
    return next((why for pattern, why in _SIMULATED_ON_CPU if pattern.search(source)), None)
