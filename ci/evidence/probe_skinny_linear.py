"""Probe: does the split-K Triton GEMM of the search catalogue's few-row linear transformation
(ci/evidence/skinny_linear_kernel.py) beat cuBLAS on decode-sized linear layers of the H200,
in graph-replay timing (the GPU's time alone, L2 flushed, fresh inputs)? First a grid of its
knobs on matmul_bias_gelu's decode shape (16 x 4096 -> 14336, bias, then ATen's GELU: the
candidate's form), then the best setting across row counts and other Llama-like layers.
Writes $OUT/probe-skinny-linear.json; prints one line per configuration and a summary."""
import argparse, importlib.util, itertools, json, os, sys, time
import torch, torch.nn.functional as F

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
from graph_probe import DEV, flush_buffer, replay_median_us, spin_cycles_per_us

spec = importlib.util.spec_from_file_location(
    "skinny", os.path.join(HERE, "skinny_linear_kernel.py"))
sk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sk)

ap = argparse.ArgumentParser()
ap.add_argument("--replays", type=int, default=100)
ap.add_argument("--quick", action="store_true", help="a few settings only")
args = ap.parse_args()
flush, cyc = flush_buffer(), spin_cycles_per_us()
results = {}
out_path = os.path.join(os.environ.get("OUT", "/tmp"), "probe-skinny-linear.json")


def median_us(fn, make_input):
    return replay_median_us(fn, make_input, args.replays, flush.zero_, cyc)


def run(label, fn, make_input, want, x_probe):
    t0 = time.time()
    try:
        with torch.no_grad():
            got = fn(x_probe).double()
            err = ((got - want).norm() / want.norm()).item()
            med = median_us(fn, make_input)
        results[label] = {"median_us": med, "norm_rel_err": err}
        print(f"{label:70s} {med:9.2f} µs  norm err {err:.2e}  ({time.time() - t0:.1f} s)", flush=True)
        return med
    except Exception as exc:
        results[label] = {"error": repr(exc)[:300]}
        print(f"{label:70s} FAILED {repr(exc)[:160]}", flush=True)
        return None


def knobs(bn, bk, split, warps, stages):
    sk.BLOCK_N, sk.BLOCK_K, sk.SPLIT_K, sk.NUM_WARPS, sk.NUM_STAGES = bn, bk, split, warps, stages


def layer(rows, k, n, bias=True):
    torch.manual_seed(0)
    lin = torch.nn.Linear(k, n, bias=bias, dtype=torch.bfloat16, device=DEV)
    make = lambda: torch.randn(rows, k, dtype=torch.bfloat16, device=DEV)
    x = make()
    return lin, make, x


# 1. matmul_bias_gelu decode: eager, linear alone, and the candidate's form over a grid of knobs
lin, make, x = layer(16, 4096, 14336)
with torch.no_grad():
    want_gelu = F.gelu(F.linear(x.double(), lin.weight.double(), lin.bias.double()))
eager_us = run("mbg decode eager (cuBLAS + GELU)", lambda t: F.gelu(lin(t)), make, want_gelu, x)
run("mbg decode linear alone (cuBLAS)", lambda t: lin(t), make,
    F.linear(x.double(), lin.weight.double(), lin.bias.double()), x)
grid = list(itertools.product((32, 64, 128), (64, 128, 256), (1, 2, 4, 8), ((4, 3), (4, 4), (8, 3))))
if args.quick:
    grid = [(64, 128, 4, (4, 4)), (32, 128, 2, (4, 3))]
times = {}
for bn, bk, split, (warps, stages) in grid:
    knobs(bn, bk, split, warps, stages)
    key = (bn, bk, split, warps, stages)
    times[key] = run(f"mbg decode skinny BN{bn} BK{bk} SK{split} w{warps} s{stages} + GELU",
                     lambda t: F.gelu(sk._kernel_bot_skinny_linear(t, lin.weight, lin.bias)),
                     make, want_gelu, x)
json.dump(results, open(out_path, "w"), indent=1)
ranked = sorted((v, k) for k, v in times.items() if v is not None)
best = ranked[0][1]
print("best settings:", "; ".join(f"{k} {v:.2f} µs ({eager_us / v:.3f}x)" for v, k in ranked[:6]), flush=True)

# 2. the best setting across row counts and other layers, against F.linear alone
knobs(*best)
for (k, n), rows in itertools.product(((4096, 14336), (4096, 4096), (14336, 4096), (4096, 6144)),
                                      (1, 8, 16, 32, 64)):
    lin, make, x = layer(rows, k, n)
    with torch.no_grad():
        want = F.linear(x.double(), lin.weight.double(), lin.bias.double())
    a = run(f"linear {rows}x{k}->{n} cuBLAS", lambda t: lin(t), make, want, x)
    b = run(f"linear {rows}x{k}->{n} skinny {best}",
            lambda t: sk._kernel_bot_skinny_linear(t, lin.weight, lin.bias), make, want, x)
    if a and b:
        print(f"   -> {a / b:.3f}x", flush=True)
json.dump(results, open(out_path, "w"), indent=1)
