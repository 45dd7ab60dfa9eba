"""Compile every autotuning configuration of the search's replacement kernels for sm_90, here,
without a GPU, and say what each costs in registers, spills and shared memory.

The CPU tests run these kernels through Triton's interpreter, which never builds the GPU path:
not the inline PTX (GELU's tanh.approx.f32), not the tensor-core layout of the attention's dots.
A kernel that does not compile for sm_90, or a configuration that spills, would otherwise first
show on the H200. Triton's wheel carries ptxas, so the cubin is built here as it would be there;
cuobjdump (also in the wheel) reads its resource use. Run it with the device's Triton to see
what the H200 will build:

    python3 ci/compile_kernels_sm90.py [--json]
    PYTHONPATH=/path/to/triton-3.6 python3 ci/compile_kernels_sm90.py    # the device's version
    python3 ci/compile_kernels_sm90.py --unpruned     # also what the kernels' pruning drops

Exit 0 when every configuration that the kernel's own pruning keeps compiles, spills nothing
and fits sm_90's shared memory, and each kernel's PTX holds what it must; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
from kernels_module import import_kernels
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend

SM90_SHARED_BYTES = 227 * 1024  # the most one block may use on sm_90


@dataclass(frozen=True)
class Call:
    """One call of a replacement, on CPU tensors of a problem's shapes: the launch it makes is
    recorded, not run, and specialised as Triton's JIT would specialise it on the GPU (aligned
    pointers, sizes divisible by 16, unit strides as constants: what decides vector loads)."""

    file: str  # in bot/propose/kernels/
    replacement: str  # the function the candidate's forward reaches
    tuned: str  # the autotuned kernel it launches
    make: Callable[[], tuple[tuple, dict]]  # the replacement's arguments
    label: str
    ptx_must_hold: str = ""  # an instruction the GPU path exists for


def _attention(batch, heads, seq, dtype):
    def make():
        q, k, v = (torch.empty(batch, heads, seq, 128, dtype=dtype) for _ in range(3))
        return (q, k, v), {"is_causal": True}

    return make


def _gelu(tokens, dtype):
    def make():
        return (torch.empty(tokens, 14336, dtype=dtype),), {"approximate": "tanh"}

    return make


_ATTENTION = dict(
    file="short_attention.py", replacement="_kernel_bot_short_sdpa", tuned="_kernel_bot_tuned_short_attention"
)
_GELU = dict(
    file="gelu_tanh.py",
    replacement="_kernel_bot_fast_gelu",
    tuned="_kernel_bot_tuned_gelu_tanh",
    ptx_must_hold="tanh.approx.f32",
)
# causal_attention's and gelu's decode shapes (problems/), and 128 keys, the most the kernel takes.
CALLS = (
    Call(**_ATTENTION, make=_attention(4, 32, 64, torch.bfloat16), label="attention 4x32x64x128 bf16 causal"),
    Call(**_ATTENTION, make=_attention(1, 32, 128, torch.bfloat16), label="attention 1x32x128x128 bf16 causal"),
    Call(**_ATTENTION, make=_attention(4, 32, 64, torch.float16), label="attention 4x32x64x128 fp16 causal"),
    Call(**_GELU, make=_gelu(32, torch.bfloat16), label="gelu-tanh 32x14336 bf16"),
    Call(**_GELU, make=_gelu(32, torch.float16), label="gelu-tanh 32x14336 fp16"),
)


@dataclass(frozen=True)
class Build:
    call: str
    config: str
    registers: int
    spilled_bytes: int  # the stack: every call is inlined, so what sits there was spilled
    shared_bytes: int
    vector_loads: bool  # any 128-bit global load: contiguous data read at full width
    problems: tuple[str, ...]


class _Recorder:
    """Stands in for the autotuned kernel: kernel[grid](*args, **kwargs) is kept, not run."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((args, kwargs))


def _recorded_launch(module, call: Call) -> tuple[tuple, dict]:
    recorder = _Recorder()
    setattr(module, call.tuned, recorder)
    module._kernel_bot_on_device = lambda *tensors: True  # CPU tensors stand in for the GPU's
    args, kwargs = call.make()
    if getattr(module, call.replacement)(*args, **kwargs) is None or len(recorder.launches) != 1:
        raise RuntimeError(f"{call.label}: {call.replacement} made no launch of {call.tuned}")
    return recorder.launches[0]


def _specialised(fn, backend, values: dict) -> tuple[dict, dict, dict]:
    """Signature, constants and attributes as Triton's JIT derives them from a launch's values."""
    signature, constants, attrs = {}, {}, {}
    for index, param in enumerate(fn.params):
        value = values[param.name]
        if param.is_constexpr:
            signature[param.name], constants[(index,)] = "constexpr", value
            continue
        kind, key = native_specialize_impl(
            backend, value, param.is_const, not param.do_not_specialize, not param.do_not_specialize_on_alignment
        )
        signature[param.name] = kind
        if kind == "constexpr":
            constants[(index,)] = key  # an integer 1 (a unit stride) becomes a constant
        elif isinstance(key, str):
            attrs[(index,)] = backend.parse_attr(key)
    return signature, constants, attrs


def _resource_use(cubin: bytes) -> tuple[int, int]:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        listing = subprocess.run(
            [str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True, check=True
        ).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", listing)
    if not found:
        raise RuntimeError(f"cuobjdump printed no resource use:\n{listing}")
    return int(found.group(1)), int(found.group(2))


def build(call: Call, pruned: bool = True) -> list[Build]:
    module = import_kernels(call.file)
    tuned = getattr(module, call.tuned)
    args, kwargs = _recorded_launch(module, call)
    configs = tuned.configs
    if pruned and tuned.early_config_prune:  # as the autotuner calls it
        configs = tuned.early_config_prune(configs, dict(zip(tuned.arg_names, args)), **kwargs)
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    builds = []
    for config in configs:
        values = {**dict(zip(tuned.fn.arg_names, args)), **kwargs, **config.kwargs}
        signature, constants, attrs = _specialised(tuned.fn, backend, values)
        compiled = triton.compile(
            ASTSource(tuned.fn, signature, constants, attrs),
            target=target,
            options={"num_warps": config.num_warps, "num_stages": config.num_stages},
        )
        registers, spilled = _resource_use(compiled.asm["cubin"])
        shared, ptx = compiled.metadata.shared, compiled.asm["ptx"]
        problems = []
        if spilled:
            problems.append(f"spills {spilled} bytes")
        if shared > SM90_SHARED_BYTES:
            problems.append(f"needs {shared} bytes of shared memory, sm_90 has {SM90_SHARED_BYTES}")
        if call.ptx_must_hold and call.ptx_must_hold not in ptx:
            problems.append(f"its PTX has no {call.ptx_must_hold}")
        vector_loads = bool(re.search(r"ld\.global\S*\.v4\.b32", ptx))
        if not vector_loads:
            problems.append("no 128-bit loads: the data is read a few bytes at a time")
        words = ", ".join(f"{k}={v}" for k, v in config.kwargs.items())
        builds.append(
            Build(
                call.label,
                f"{words}, warps={config.num_warps}, stages={config.num_stages}",
                registers,
                spilled,
                shared,
                vector_loads,
                tuple(problems),
            )
        )
    return builds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--unpruned", action="store_true", help="build every configuration, also those the kernel's own pruning drops"
    )
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: the interpreter builds nothing to compile")
    builds = [b for call in CALLS for b in build(call, pruned=not args.unpruned)]
    failed = [b for b in builds if b.problems]
    if args.json:
        print(
            json.dumps(
                {
                    "triton": triton.__version__,
                    "target": "sm_90",
                    "builds": [asdict(b) for b in builds],
                    "failed": len(failed),
                }
            )
        )
    else:
        print(f"Triton {triton.__version__}, target sm_90: {len(builds)} builds, {len(failed)} failed")
        for b in builds:
            verdict = "; ".join(b.problems) or "ok"
            print(
                f"  {b.call:36} {b.config:34} regs {b.registers:3}  spilled {b.spilled_bytes:5}  "
                f"shared {b.shared_bytes:6}  {verdict}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
