"""Probe: can a Triton implementation, tuned over its knobs, beat eager on gelu and
matmul_bias_gelu in graph-replay timing (the GPU's time alone, L2 flushed, fresh inputs)?
Each configuration is captured as a CUDA graph and replayed `--replays` times; medians in µs.
Writes $OUT/probe-triton-targets.json and prints a table per problem and shape."""
import argparse, itertools, json, os, sys, time
import torch, torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "candidates"))
from graph_probe import DEV, flush_buffer, replay_median_us, spin_cycles_per_us
import gelu_tanh_triton as gelu_triton, matmul_bias_gelu_triton as mbg

ap = argparse.ArgumentParser()
ap.add_argument("--replays", type=int, default=100)
args = ap.parse_args()
flush, cyc = flush_buffer(), spin_cycles_per_us()
results = {}


def median_us(fn, make_input):
    return replay_median_us(fn, make_input, args.replays, flush.zero_, cyc)


def run(label, fn, make_input, check):
    t0 = time.time()
    try:
        with torch.no_grad():
            err = check(fn)
            med = median_us(fn, make_input)
        results[label] = {"median_us": med, "max_abs_err_vs_eager": err}
        print(f"{label:60s} {med:9.2f} µs  err {err:.3g}  ({time.time() - t0:.1f} s)", flush=True)
    except Exception as exc:
        results[label] = {"error": repr(exc)[:300]}
        print(f"{label:60s} FAILED {repr(exc)[:120]}", flush=True)


def set_knobs(module, **knobs):
    for k, v in knobs.items():
        setattr(module, k, v)


# gelu (tanh)
gelu_eager = lambda x: F.gelu(x, approximate="tanh")
for shape_name, shape in (("decode", (32, 14336)), ("prefill", (8192, 14336))):
    make = lambda: torch.randn(shape, dtype=torch.bfloat16, device=DEV)
    probe_x = make() * 4
    want = gelu_eager(probe_x).float()
    check = lambda fn: (fn(probe_x).float() - want).abs().max().item()
    run(f"gelu {shape_name} eager", gelu_eager, make, check)
    torch._dynamo.reset()
    run(f"gelu {shape_name} compile default", torch.compile(gelu_eager, dynamic=False), make, check)
    for block, warps in itertools.product((256, 512, 1024, 2048, 4096, 8192), (1, 2, 4, 8, 16)):
        if block // (32 * warps) < 1:
            continue
        set_knobs(gelu_triton, BLOCK_SIZE=block, NUM_WARPS=warps)
        run(f"gelu {shape_name} triton BLOCK_SIZE={block} NUM_WARPS={warps}", gelu_triton.gelu_tanh, make, check)
json.dump(results, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe-triton-targets.json"), "w"), indent=1)

# matmul + bias + erf GELU
lin = torch.nn.Linear(4096, 14336, dtype=torch.bfloat16, device=DEV)
eager = lambda x: F.gelu(lin(x))
triton_fn = lambda x: mbg.linear_bias_gelu(x, lin.weight, lin.bias)
grids = {
    "decode": (16, itertools.product((16,), (32, 64, 128, 256), (32, 64, 128), (4, 8), (3, 5))),
    "prefill": (8192, itertools.product((64, 128, 256), (64, 128, 256), (64,), (4, 8), (3, 4))),
}
for shape_name, (tokens, grid) in grids.items():
    make = lambda: torch.randn(tokens, 4096, dtype=torch.bfloat16, device=DEV)
    probe_x = make()
    with torch.no_grad():
        want = eager(probe_x).float()
    check = lambda fn: (fn(probe_x).float() - want).abs().max().item()
    run(f"mbg {shape_name} eager", eager, make, check)
    run(f"mbg {shape_name} linear alone", lambda x: lin(x), make, lambda fn: 0.0)
    for bm, bn, bk, warps, stages in grid:
        if shape_name == "prefill" and bm * bn > 128 * 256:
            continue
        set_knobs(mbg, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_WARPS=warps, NUM_STAGES=stages)
        run(f"mbg {shape_name} triton M{bm} N{bn} K{bk} w{warps} s{stages}", triton_fn, make, check)
    json.dump(results, open(os.path.join(os.environ.get("OUT", "/tmp"), "probe-triton-targets.json"), "w"), indent=1)

for prefix in ("gelu decode", "gelu prefill", "mbg decode", "mbg prefill"):
    rows = {k: v["median_us"] for k, v in results.items() if k.startswith(prefix) and "median_us" in v}
    eager_us = rows.get(f"{prefix} eager")
    best = sorted((v, k) for k, v in rows.items() if "triton" in k)[:3]
    print(f"{prefix}: eager {eager_us:.2f} µs; best Triton " +
          "; ".join(f"{k[len(prefix) + 1:]} {v:.2f} µs ({eager_us / v:.3f}x)" for v, k in best))
