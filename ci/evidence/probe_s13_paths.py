"""Session 13 probe: paths search does not have yet, on the three problems it cannot win in
graph timing. matmul_bias_gelu: cuBLASLt instead of cuBLAS for the GEMM (torch's
`preferred_blas_library`), alone and with its fused GELU epilogue. causal_attention:
FlexAttention (compiled) with a causal block mask. Each path timed as `--timing graph` does
(graph replay, L2 flushed, fresh inputs), medians of 200 replays in µs.

    cd ci/evidence && python3 probe_s13_paths.py
"""
import json
import os
import statistics

import torch
import torch.nn.functional as F

from graph_probe import DEV as dev, capture, elapsed_us, enqueue_replay, flush_buffer, spin_cycles_per_us

OUT = os.environ.get("OUT", "/tmp")
flush = flush_buffer()
cyc = spin_cycles_per_us()
res = {}


def bench(fn, *xs, n=200):
    """Median µs of `fn` on fresh copies of xs (only the first input refreshed; the others
    are the captured ones, as a weight would be)."""
    g, static, _out = capture(lambda a: fn(a, *xs[1:]), xs[0])
    pend = [enqueue_replay(g, static, torch.randn_like(xs[0]), flush.zero_, cyc) for _ in range(n)]
    return statistics.median(elapsed_us(pend))


def record(key, fn, *xs):
    try:
        with torch.no_grad():
            res[key] = round(bench(fn, *xs), 2)
    except Exception as exc:  # a path that does not run here is a finding, not a crash
        res[key] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    print(f"{key:50s} {res[key]}", flush=True)


lin = torch.nn.Linear(4096, 14336, dtype=torch.bfloat16, device=dev)
for name, tokens in (("decode", 16), ("prefill", 8192)):
    x = torch.randn(tokens, 4096, dtype=torch.bfloat16, device=dev)
    for blas in ("cublas", "cublaslt", "cublas"):  # cublas twice: the order does not decide
        torch.backends.cuda.preferred_blas_library(blas)
        record(f"mbg {name} {blas} linear+gelu", lambda a: F.gelu(lin(a)), x)
        record(f"mbg {name} {blas} addmm_activation(tanh)",
               lambda a: torch._addmm_activation(lin.bias, a, lin.weight.t(), use_gelu=True), x)
torch.backends.cuda.preferred_blas_library("cublas")

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = torch.compile(flex_attention, dynamic=False)
except Exception as exc:
    flex = None
    res["flex import"] = f"failed: {exc}"
for name, (b, h, s, d) in (("decode", (4, 32, 64, 128)), ("prefill", (1, 32, 4096, 128))):
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=dev) for _ in range(3))
    record(f"attn {name} sdpa", lambda a, k, v: F.scaled_dot_product_attention(a, k, v, is_causal=True), q, k, v)
    if flex is not None:
        mask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s, device=dev)
        record(f"attn {name} flex(compiled)", lambda a, k, v: flex(a, k, v, block_mask=mask), q, k, v)
        got = flex(q, k, v, block_mask=mask).float()
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        res[f"attn {name} flex max abs err"] = float((got - want).abs().max())
json.dump(res, open(f"{OUT}/probe-s13-paths.json", "w"), indent=1)
