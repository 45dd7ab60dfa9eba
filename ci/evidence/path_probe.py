"""Kernel times of a few execution paths outside the bot (triton.testing.do_bench, no L2
flush, the same inputs every call): which path could win a problem, before the search runs it.

    PYTHONPATH=. python3 ci/evidence/path_probe.py      (on a GPU; prints one line per case)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench


def us(fn) -> str:
    try:
        return f"{do_bench(fn, warmup=25, rep=200) * 1e3:8.1f}"
    except Exception as exc:  # a backend that does not apply says why, in one word
        return f"{type(exc).__name__:>8}"


def compiled(fn, dynamic, *shapes_inputs):
    torch._dynamo.reset()
    # None is torch.compile's own default policy (static first, generic after a second shape)
    c = torch.compile(fn, dynamic=None if dynamic == "default" else dynamic)
    for inputs in shapes_inputs:  # decode first, as the verifier's trials may
        c(*inputs)
    return c


def main() -> None:
    dev = "cuda"
    bf = torch.bfloat16
    cases = {
        "transpose": (lambda x: x.transpose(1, 2).contiguous(),
                      [(torch.randn(4, 16, 32, 128, dtype=bf, device=dev),),
                       (torch.randn(1, 8192, 32, 128, dtype=bf, device=dev),)]),
        "layernorm": (torch.nn.LayerNorm(8192, device=dev, dtype=bf),
                      [(torch.randn(32, 8192, dtype=bf, device=dev),),
                       (torch.randn(8192, 8192, dtype=bf, device=dev),)]),
        "gelu": (lambda x: F.gelu(x, approximate="tanh"),
                 [(torch.randn(32, 14336, dtype=bf, device=dev),),
                  (torch.randn(8192, 14336, dtype=bf, device=dev),)]),
    }
    print(f"{'case':<12}{'shape':<9}{'eager':>9}{'default':>9}{'static':>9}{'dynamic':>9}  (us)")
    for name, (fn, shapes) in cases.items():
        variants = {d: compiled(fn, d, *shapes) for d in ("default", False, True)}
        for label, inputs in zip(("decode", "prefill"), shapes):
            row = [us(lambda: fn(*inputs))] + [
                us(lambda c=variants[d]: c(*inputs)) for d in ("default", False, True)]
            print(f"{name:<12}{label:<9}" + " ".join(row))
    attn = {"decode": [torch.randn(4, 32, 64, 128, dtype=bf, device=dev) for _ in range(3)],
            "prefill": [torch.randn(1, 32, 4096, 128, dtype=bf, device=dev) for _ in range(3)]}
    print(f"{'attention':<12}{'shape':<9}{'default':>9}{'flash':>9}{'efficnt':>9}{'cudnn':>9}  (us)")
    for label, (q, k, v) in attn.items():
        row = [us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))]
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.CUDNN_ATTENTION):
            def held(b=backend):
                with sdpa_kernel(b):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            row.append(us(held))
        print(f"{'attention':<12}{label:<9}" + " ".join(row))


if __name__ == "__main__":
    main()
