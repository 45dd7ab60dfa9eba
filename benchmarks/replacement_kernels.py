"""Probe: do the search's replacement kernels (bot/propose/kernels) beat torch where they
apply, and which of their configurations wins? The short-attention kernel against
scaled_dot_product_attention's backends on short sequences; the hardware-tanh GELU against
ATen's and torch.compile's. Each path's call captured as a CUDA graph and replayed with fresh
inputs copied in and the L2 flushed by reading 256 MB, as `--timing graph` does; medians of
replays in µs, and each path's normwise error against a float64 reference.

    python3 benchmarks/replacement_kernels.py [--replays N] [--only attention|gelu]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from graph_replay import DEV, flush_buffer, replay_median_us_sets, spin_cycles_per_us
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ci"))
from kernels_module import import_kernels  # noqa: E402  (ci/kernels_module.py)

# (batch, heads, sequence, head dim): causal_attention's decode first, then other short ones.
ATTENTION_SHAPES = [(4, 32, 64, 128), (1, 32, 128, 128), (16, 32, 32, 128), (8, 8, 100, 64), (32, 32, 16, 128)]
# (tokens, features): gelu's prefill and decode, then a Llama-7B-sized MLP's.
GELU_SHAPES = [(8192, 14336), (32, 14336), (4096, 11008)]


def tuned_configs(tuned) -> list[tuple[int, int]]:
    """(block size, warps) of every configuration the kernel's autotuner chooses from."""
    return [(next(iter(c.kwargs.values())), c.num_warps) for c in tuned.configs]


def held(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return run


def one_config(ns, block_m, warps):  # the attention kernel at one configuration
    triton = ns["triton"]

    def run(q, k, v):
        b, h, n, d = q.shape
        out = torch.empty_like(q)
        ns["_kernel_bot_short_attention"][(triton.cdiv(n, block_m), b * h)](
            q,
            k,
            v,
            out,
            d**-0.5 * ns["_KERNEL_BOT_LOG2E"],
            h,
            n,
            n,
            *q.stride(),
            *k.stride(),
            *v.stride(),
            *out.stride(),
            HEAD_DIM=d,
            BLOCK_D=max(16, triton.next_power_of_2(d)),
            BLOCK_M=block_m,
            BLOCK_N=max(16, triton.next_power_of_2(n)),
            CAUSAL=True,
            num_warps=warps,
            num_stages=1,
        )
        return out

    return run


def gelu_config(ns, block, warps, hardware_tanh=True):
    triton = ns["triton"]

    def run(x):
        out = torch.empty_like(x)
        n = x.numel()
        ns["_kernel_bot_gelu_tanh"][(triton.cdiv(n, block),)](
            x, out, n, BLOCK=block, HARDWARE_TANH=hardware_tanh, num_warps=warps
        )
        return out

    return run


def measure(table: str, shape, paths: dict, sets, reference, replays, flush, cycles, results: dict) -> None:
    """Each path's normwise error and graph-replay median on `sets`; printed and kept."""
    label = "x".join(map(str, shape))
    row = results.setdefault(table, {}).setdefault(label, {})
    first = None
    with torch.no_grad():
        for name, fn in paths.items():
            try:
                err = float((fn(*sets[0]).double() - reference).norm() / reference.norm())
                us = replay_median_us_sets(fn, sets, replays, flush, cycles)
            except Exception as exc:  # a backend without a kernel for this shape is a finding
                row[name] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
                print(f"{label:<22}{name:<30} {row[name]}", flush=True)
                continue
            row[name] = {"us": us, "norm_rel_err": err}
            first = first or us  # the first path is the eager one each ratio is against
            print(f"{label:<22}{name:<30}{us:>9.2f}{first / us:>9.2f}x{err:>10.1e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--only", choices=("attention", "gelu"))
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "replacement-kernels.json"))
    args = parser.parse_args()
    ns = vars(import_kernels("short_attention.py", "gelu_tanh.py"))
    flush = flush_buffer().view(torch.int32)
    cycles = spin_cycles_per_us()
    results: dict = {}
    print(f"{'shape':<22}{'path':<30}{'µs':>9}{'vs eager':>10}{'norm err':>10}", flush=True)
    if args.only in (None, "attention"):

        def eager(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        paths = {
            "eager SDPA": eager,
            "SDPA flash": held(SDPBackend.FLASH_ATTENTION),
            "SDPA cuDNN": held(SDPBackend.CUDNN_ATTENTION),
            "SDPA efficient": held(SDPBackend.EFFICIENT_ATTENTION),
            "search path (autotuned)": ns["_KernelBotReplaced"](eager),
            **{
                f"BLOCK_M {m}, {w} warps": one_config(ns, m, w)
                for m, w in tuned_configs(ns["_kernel_bot_tuned_short_attention"])
            },
        }
        for shape in ATTENTION_SHAPES:
            torch.manual_seed(0)
            sets = [[torch.randn(shape, dtype=torch.bfloat16, device=DEV) for _ in range(3)] for _ in range(4)]
            reference = F.scaled_dot_product_attention(*(t.double() for t in sets[0]), is_causal=True)
            measure("attention", shape, paths, sets, reference, args.replays, flush, cycles, results)
            Path(args.out).write_text(json.dumps(results, indent=1))
    if args.only in (None, "gelu"):

        def gelu(x):
            return F.gelu(x, approximate="tanh")

        for shape in GELU_SHAPES:
            torch._dynamo.reset()
            paths = {
                "eager (ATen)": gelu,
                "torch.compile default": torch.compile(gelu, dynamic=False),
                "search path (autotuned)": ns["_KernelBotReplaced"](gelu),
                "BLOCK 1024, 2 warps, exp tanh": gelu_config(ns, 1024, 2, hardware_tanh=False),
                **{
                    f"BLOCK {b}, {w} warps": gelu_config(ns, b, w)
                    for b, w in tuned_configs(ns["_kernel_bot_tuned_gelu_tanh"])
                },
            }
            torch.manual_seed(0)
            sets = [[torch.randn(shape, dtype=torch.bfloat16, device=DEV)] for _ in range(2)]
            reference = F.gelu(sets[0][0].double(), approximate="tanh")
            measure("gelu", shape, paths, sets, reference, args.replays, flush, cycles, results)
            Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
