"""What the harness's parts share (bot/harness/worker.py and its timing, bot/harness/timing.py).

Every function and class the harness relies on, taken from torch, time and os when the harness
is imported, before any candidate code exists in the process: a candidate that patches
`time.perf_counter_ns`, `torch.cuda.Event.elapsed_time` or `torch.Tensor.sum` changes what it
sees, not what the harness measures. The harness reads them here, by attribute (`shared.X`), so
a candidate that rebinds them in this module rebinds them for the harness too; the parent's own
clock and thread count (docs/verifier.md, "hidden time", "no new threads") are what hold then.
Only the standard library, torch and bot.protocol are used here.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any

import torch

from bot.protocol import measures
from bot.protocol.typed import Failure

# --- originals, captured before any candidate code exists in this process ------------
perf_ns = time.perf_counter_ns
# Each timed call's inputs are drawn from its seed: the generators seeded directly, as
# torch.manual_seed would, without the traceback it formats per call for CUDA's lazy seeding
# (80 of the harness's 310 us per timed call on CPU).
seed_cpu = torch.default_generator.manual_seed
seed_cuda = torch.cuda.manual_seed
listdir = os.listdir
threads = threading.enumerate
Tensor = torch.Tensor
is_tensor = torch.is_tensor
detach = torch.Tensor.detach
to = torch.Tensor.to
numel = torch.Tensor.numel
clone = torch.Tensor.clone
cuda_sync = torch.cuda.synchronize
Event = torch.cuda.Event
ev_record = torch.cuda.Event.record
ev_elapsed = torch.cuda.Event.elapsed_time
copy_ = torch.Tensor.copy_
tensor_sum = torch.Tensor.sum
CUDAGraph = torch.cuda.CUDAGraph
graph_capture = torch.cuda.graph
graph_replay = torch.cuda.CUDAGraph.replay
Stream = torch.cuda.Stream
stream_ctx = torch.cuda.stream
current_stream = torch.cuda.current_stream
gpu_sleep = torch.cuda._sleep  # spins one GPU thread for a number of clock cycles
cuda_reserved = torch.cuda.memory_reserved
cuda_allocated = torch.cuda.memory_allocated
cuda_available = torch.cuda.is_available
# What a call commits to, computed alike by the parent (bot.protocol.measures): the harness's
# own references, taken here with the others.
hash_tensor = measures.hash_tensor
fingerprint_weights = measures.fingerprint_weights
fingerprint = measures.fingerprint


def flush_l2(words: torch.Tensor) -> torch.Tensor:
    """Read the whole flush buffer, so the L2 holds only its clean lines. Not a zeroing, as
    KernelBench and Triton's do_bench flush: that leaves the L2 full of dirty lines, whose
    write-back the next (timed) call pays as it reads; on the H200 it added 6.6 us (18 %) to
    matmul_bias_gelu's 117 MB decode layer (docs/benchmark.md). Bound at
    import like the timers, so a candidate that patches `Tensor.sum` or `zero_` cannot take
    the flush away from its own timings."""
    return tensor_sum(words)


def tids() -> set[str]:
    return set(listdir("/proc/self/task"))


# --- replies -------------------------------------------------------------------------
def as_outputs(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def not_tensors(outputs: list[Any]) -> dict | None:
    """The failure reply for a timed call whose outputs are not exactly torch.Tensor."""
    if all(type(o) is Tensor for o in outputs):
        return None
    return Failure("call", f"output type {[type(o).__name__ for o in outputs]}").to_wire()


def failure(phase: str, exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return Failure(phase, f"{type(exc).__name__}: {exc}"[:4000], "".join(tb)[-6000:]).to_wire()
