"""Pure: the chat messages an LLM proposer sends for one `ProposalRequest`.

The system message is the same for every problem on one GPU and backend (contract,
rules, hardware, example, answer format), so servers with prefix caching reuse it;
the user message carries the problem, its floor, both sources and the feedback.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.propose.base import Feedback, Hardware, ProposalRequest

MAX_FEEDBACK_CHARS = 12_000  # ~3k tokens: enough for several tracebacks, small next to the sources
MAX_EVIDENCE_CHARS = 2_500  # per item: a compiler error's first lines and a traceback's tail
MAX_LAST_SOURCE_CHARS = 8_000  # the newest failed candidate, so the model can fix it

CONTRACT = """\
You write faster GPU kernels for PyTorch operators.

## The candidate contract
Answer with ONE self-contained Python module that is a drop-in replacement for the TARGET
file. It must define `class ModelNew(torch.nn.Module)`:
- the same constructor signature as the reference `Model` (it is built as
  `ModelNew(*get_init_inputs())`, parameters initialised the same way as `Model` would);
- `forward` takes the same inputs as `Model.forward` and returns outputs of the same
  type (plain `torch.Tensor`), shape, dtype and device;
- correct for every shape listed, not only the first one.
The module may import torch, triton and the standard library. It must not read files,
environment variables or the network (compiling a kernel at import time is allowed).

## Rules (the verifier checks them; breaking one rejects the candidate)
- No other CUDA streams: launch everything on the current stream.
- No threads or processes.
- No caching of outputs across calls: every call computes from its inputs (inputs are
  fresh random tensors from several distributions on each call).
- Edge cases count: inputs include all-zero tensors, all-zero rows, rows of 1e-6 beside
  rows of 128 (each row is judged at its own scale) and values near the dtype's range.
  Keep every eps, subtract a softmax's row max, do not flush small values to zero.
- Do not modify the inputs; do not return a view of an input.
- No computing in lower precision than the tolerance allows (fp32 stays fp32: no bf16,
  no TF32 unless the tolerance says so).
- No falling back to the reference (calling `Model` or the same torch ops) for the timed
  work: it is measured honestly and never counts as a speedup.
- A time below the roofline floor is physically impossible and is rejected."""

TRITON_EXAMPLE = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self):  # same arguments as Model.__init__
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
"""

CUDA_EXAMPLE = '''\
import torch
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* x, float* out, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f);
}

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "fp32 CUDA tensor");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
_CPP = "torch::Tensor relu(torch::Tensor x);"

_ext = load_inline(name="relu_ext", cpp_sources=_CPP, cuda_sources=_CUDA,
                   functions=["relu"], verbose=False)


class ModelNew(torch.nn.Module):
    def __init__(self):  # same arguments as Model.__init__
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.relu(x)
'''

ANSWER_FORMAT = """\
## Answer format
Think as long as you need, then give exactly ONE ```python block containing the whole
module (imports, kernels, `class ModelNew`). Nothing after it is read; no partial diffs."""


def hardware_text(hw: Hardware) -> str:
    """The device's ceilings, the numbers a kernel author plans tiles and occupancy with; only
    those known for this device."""
    figures = [
        f"compute capability {hw.compute_capability}" if hw.compute_capability else None,
        f"{hw.sm_count} SMs" if hw.sm_count else None,
        f"{hw.l2_mb:g} MB L2" if hw.l2_mb else None,
        f"{hw.smem_per_sm_kb} KB shared memory per SM" if hw.smem_per_sm_kb else None,
        f"{hw.bandwidth_gbs:g} GB/s memory bandwidth" if hw.bandwidth_gbs else None,
        f"{hw.bf16_tflops:g} TFLOP/s bf16 (tensor cores)" if hw.bf16_tflops else None,
        f"{hw.fp32_tflops:g} TFLOP/s fp32" if hw.fp32_tflops else None,
    ]
    known = [f for f in figures if f]
    return f"## Hardware\n{hw.name}" + (": " + ", ".join(known) + "." if known else ".")


def system_message(hw: Hardware, backend: str) -> str:
    """Contract, rules, hardware, one worked example for the backend, answer format."""
    if backend == "cuda":
        example = f"## Example (CUDA C++ through torch.utils.cpp_extension.load_inline)\n```python\n{CUDA_EXAMPLE}```"
    elif backend == "triton":
        example = f"## Example (Triton)\n```python\n{TRITON_EXAMPLE}```"
    else:
        raise ValueError(f"unknown backend {backend!r} (expected 'triton' or 'cuda')")
    return "\n\n".join((CONTRACT, hardware_text(hw), example, ANSWER_FORMAT))


def clip(text: str, limit: int) -> str:
    """Shorten to about `limit` chars, keeping the head (first error) and tail (traceback end)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - head - tail} chars omitted] ...\n{text[-tail:]}"


def _timing(fb: Feedback) -> str:
    parts = []
    if fb.median_us is not None:
        parts.append(f"{fb.median_us:.2f} µs")
        if fb.baseline_us is not None:
            parts.append(f"vs baseline {fb.baseline_us:.2f} µs")
        if fb.speedup is not None:
            parts.append(f"(speedup {fb.speedup:.2f}x)")
        if fb.floor_us is not None and fb.median_us > 0:
            parts.append(
                f"; roofline floor {fb.floor_us:.2f} µs, {100 * fb.floor_us / fb.median_us:.0f}% of speed-of-light"
            )
    elif fb.speedup is not None:
        parts.append(f"speedup {fb.speedup:.2f}x")
    return " ".join(parts).replace(" ;", ";")


def feedback_item(index: int, fb: Feedback) -> str:
    """One earlier attempt: status, timings vs baseline and floor, evidence."""
    o = fb.candidate.origin
    where = ", ".join(x for x in (f"round {o.round}" if o.round is not None else "", o.detail) if x)
    lines = [f"### Attempt {index}: {fb.status}" + (f" ({where})" if where else "")]
    timing = _timing(fb)
    if timing:
        lines.append(f"Timing: {timing}")
    if fb.message:
        lines.append(f"Evidence:\n{clip(fb.message.strip(), MAX_EVIDENCE_CHARS)}")
    return "\n".join(lines)


def format_feedback(history: Sequence[Feedback], max_chars: int = MAX_FEEDBACK_CHARS) -> str:
    """Earlier attempts, newest last, dropping the oldest beyond `max_chars`."""
    items = [feedback_item(i + 1, fb) for i, fb in enumerate(history)]
    kept: list[str] = []
    used = 0
    for item in reversed(items):  # newest first, so the newest always survives
        if kept and used + len(item) > max_chars:
            break
        kept.append(item if kept else clip(item, max_chars))
        used += len(kept[-1])
    kept.reverse()
    omitted = len(items) - len(kept)
    if omitted:
        kept.insert(0, f"({omitted} older attempt(s) omitted)")
    return "\n\n".join(kept)


def user_message(request: ProposalRequest, max_feedback_chars: int = MAX_FEEDBACK_CHARS) -> str:
    """The problem (floor, shapes, tolerance, both sources) and the feedback so far."""
    p = request.problem
    floor = f"{request.floor_us:.2f} µs on this GPU" if request.floor_us is not None else "unknown"
    shapes = (
        ", ".join(f"{s.name} {dict(s.overrides)}" if s.overrides else s.name for s in p.gpu_shapes)
        or "the defaults in the reference file"
    )
    tol = ", ".join(f"{k}={v:g}" for k, v in sorted(p.tolerance.items())) or "defaults for the dtype"
    target = p.target_relpath or "(none: the reference file itself)"
    parts = [
        f"# Problem `{p.name}` (TARGET: {target})",
        f"Roofline floor of the main shape: {floor}. Shapes: {shapes}. "
        f"Verified against a {p.reference_precision} reference; tolerance: {tol}.",
        f"## Reference (`Model`, `get_inputs`, `get_init_inputs`)\n```python\n{p.source.rstrip()}\n```",
    ]
    if request.current_source.strip() == p.source.strip():
        parts.append("## Current implementation\nThe reference itself (no faster version yet).")
    else:
        parts.append(f"## Current implementation (to beat)\n```python\n{request.current_source.rstrip()}\n```")
    if request.history:
        parts.append(
            "## Feedback on earlier attempts (newest last)\n" + format_feedback(request.history, max_feedback_chars)
        )
        last = request.history[-1]
        if last.status != "accepted" and last.candidate.source.strip():
            parts.append(
                "## Your newest attempt (fix it or take a different approach)\n"
                f"```python\n{clip(last.candidate.source.rstrip(), MAX_LAST_SOURCE_CHARS)}\n```"
            )
    parts.append(
        f"Write `ModelNew` using {request.backend}, faster than the current "
        "implementation and closer to the floor. One ```python block, the whole module."
    )
    return "\n\n".join(parts)


def build_messages(request: ProposalRequest, max_feedback_chars: int = MAX_FEEDBACK_CHARS) -> list[dict[str, str]]:
    """[system, user] chat messages for one request."""
    return [
        {"role": "system", "content": system_message(request.hardware, request.backend)},
        {"role": "user", "content": user_message(request, max_feedback_chars)},
    ]
