"""Probe: does the search's short-attention kernel (bot/propose/kernels/short_attention.py)
beat scaled_dot_product_attention on short sequences, and which of its configurations wins?
Each path's call captured as a CUDA graph and replayed with fresh inputs copied in and the L2
flushed by reading 256 MB, as `--timing graph` does; medians of replays in µs, and each path's
normwise error against a float64 reference.

    cd ci/evidence && python3 probe_short_attention.py [--replays N]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from graph_probe import DEV, flush_buffer, replay_median_us_sets, spin_cycles_per_us

ROOT = Path(__file__).resolve().parents[2]
# (batch, heads, sequence, head dim): causal_attention's decode first, then other short ones.
SHAPES = [(4, 32, 64, 128), (1, 32, 128, 128), (16, 32, 32, 128), (8, 8, 100, 64), (32, 32, 16, 128)]
CONFIGS = [(16, 2), (16, 4), (32, 4), (64, 4), (32, 8), (64, 8)]  # (BLOCK_M, num_warps)


def kernel_namespace() -> dict:
    namespace: dict = {"torch": torch}
    exec(compile((ROOT / "bot/propose/kernels/short_attention.py").read_text(), "short_attention", "exec"),
         namespace)
    return namespace


def held(backend):
    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return run


def one_config(ns, block_m, warps):
    triton = ns["triton"]

    def run(q, k, v):
        b, h, n, d = q.shape
        out = torch.empty_like(q)
        ns["_kernel_bot_short_attention"][(triton.cdiv(n, block_m), b * h)](
            q, k, v, out, d ** -0.5 * ns["_KERNEL_BOT_LOG2E"], h, n, n, *q.stride(), *k.stride(),
            *v.stride(), *out.stride(), HEAD_DIM=d, BLOCK_D=max(16, triton.next_power_of_2(d)),
            BLOCK_M=block_m, BLOCK_N=max(16, triton.next_power_of_2(n)), CAUSAL=True,
            num_warps=warps, num_stages=1)
        return out
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "short-attention.json"))
    args = parser.parse_args()
    ns = kernel_namespace()
    mode = ns["_KernelBotShortAttention"](lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    flush = flush_buffer().view(torch.int32)
    cycles = spin_cycles_per_us()
    paths = {"eager SDPA": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             "SDPA flash": held(SDPBackend.FLASH_ATTENTION), "SDPA cuDNN": held(SDPBackend.CUDNN_ATTENTION),
             "SDPA efficient": held(SDPBackend.EFFICIENT_ATTENTION), "search path (autotuned)": mode,
             **{f"BLOCK_M {m}, {w} warps": one_config(ns, m, w) for m, w in CONFIGS}}
    results: dict = {}
    print(f"{'shape':<22}{'path':<26}{'µs':>9}{'vs eager':>10}{'norm err':>10}", flush=True)
    for shape in SHAPES:
        torch.manual_seed(0)
        sets = [[torch.randn(shape, dtype=torch.bfloat16, device=DEV) for _ in range(3)] for _ in range(4)]
        ref = F.scaled_dot_product_attention(*(t.double() for t in sets[0]), is_causal=True)
        row = results.setdefault("x".join(map(str, shape)), {})
        with torch.no_grad():
            for name, fn in paths.items():
                try:
                    err = float((fn(*sets[0]).double() - ref).norm() / ref.norm())
                    us = replay_median_us_sets(fn, sets, args.replays, flush, cycles)
                except Exception as exc:  # a backend without a kernel for this shape is a finding
                    row[name] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
                    print(f"{'x'.join(map(str, shape)):<22}{name:<26} {row[name]}", flush=True)
                    continue
                row[name] = {"us": us, "norm_rel_err": err}
                eager = row["eager SDPA"]["us"] if isinstance(row.get("eager SDPA"), dict) else float("nan")
                print(f"{'x'.join(map(str, shape)):<22}{name:<26}{us:>9.2f}{eager / us:>9.2f}x{err:>10.1e}", flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.exit(main())
