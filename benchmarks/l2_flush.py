"""How the L2 flush before each timed replay changes a fresh process's median (docs/benchmark.md,
"Flushing the L2"). Each variant runs in fresh processes (a new CUDA context and new allocations,
as a worker is), six by default, rounds in shuffled order; each process captures copies of the
call as `--timing graph` does and times 3,000 replays in batches of 50.

A variant is "flush/copies[/workload]": the flush (`fixed`: a 256 MB buffer zeroed in place;
`shift512` / `shift2g`: 256 MB zeroed at a random 2 MB offset of 512 MB / 2 GB per replay;
`read`: the 256 MB buffer summed, which leaves the L2 holding clean lines, as the worker does;
`zeroread`: zeroed, then summed), how many captured copies the replays rotate over, and the
workload: gelu's decode (32 x 14336 bf16) by default, or `linear`, matmul_bias_gelu's decode
layer (16 x 4096 -> 14336 bf16, then GELU), whose 117 MB weight read shows what a zeroing
flush's dirty lines cost when they are written back during the timed call.

    python3 benchmarks/l2_flush.py --rounds 6 --out $OUT/flush-placement.json
    python3 benchmarks/l2_flush.py --rounds 6 --out $OUT/flush-read.json \
        --variants fixed/32,read/32,zeroread/32,fixed/32/linear,read/32/linear
"""

import argparse
import json
import random
import statistics

from fresh_processes import run_children, spread

VARIANTS = ("fixed/32", "shift512/32", "shift512/256", "fixed/256", "shift2g/256")
SHAPE = (32, 14336)  # gelu decode, bf16
LINEAR_SHAPE = (16, 4096)  # matmul_bias_gelu decode's input; its layer is 4096 -> 14336
REPLAYS, BATCH = 3000, 50
MB = 1 << 20


def child(variant: str) -> dict:
    import torch
    import torch.nn.functional as F
    from graph_replay import capture, elapsed_us, enqueue_replay, spin_cycles_per_us

    placement, copies, *workload = variant.split("/")
    window = {"fixed": 256, "read": 256, "zeroread": 256, "shift512": 512, "shift2g": 2048}[placement] * MB
    flush = torch.empty(window, dtype=torch.uint8, device="cuda")
    rng = random.Random()
    places = (window - 256 * MB) // (2 * MB) + 1

    words = flush.view(torch.int32)

    def flush_l2():
        if placement in ("zeroread", "fixed", "shift512", "shift2g"):
            at = rng.randrange(places) * 2 * MB
            flush[at : at + 256 * MB].zero_()
        if placement in ("read", "zeroread"):
            words.sum()  # reads the whole buffer: the L2 is left with clean lines

    if workload == ["linear"]:
        layer = torch.nn.Linear(4096, 14336, dtype=torch.bfloat16, device="cuda")
        fn, shape = (lambda x: F.gelu(layer(x))), LINEAR_SHAPE
    else:
        fn, shape = (lambda x: F.gelu(x, approximate="tanh")), SHAPE
    cyc = spin_cycles_per_us()
    with torch.no_grad():
        sets = [capture(fn, torch.randn(shape, dtype=torch.bfloat16, device="cuda")) for _ in range(int(copies))]
    fresh = [torch.randn(shape, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    samples, i = [], 0
    while len(samples) < REPLAYS + BATCH:
        pend = []
        for _ in range(BATCH):
            g, static, _out = sets[i % len(sets)]
            pend.append(enqueue_replay(g, static, fresh[i % 4], flush_l2, cyc))
            i += 1
        samples += elapsed_us(pend)
    warm = samples[BATCH:]  # the first batch is warm-up, as in the worker
    q = statistics.quantiles(warm, n=10)
    return {
        "median": statistics.median(warm),
        "mean": statistics.fmean(warm),
        "p10": q[0],
        "p90": q[-1],
        "samples": [round(s, 3) for s in warm],
    }


def parent(rounds: int, out_path: str | None) -> None:
    runs = run_children(__file__, VARIANTS, rounds, lambda res: f"median {res['median']:.3f}", out_path)
    print(
        f"\n{'variant':13} | medians of {rounds} fresh processes (us) | spread of medians % | "
        "spread of means % | spread of pairs' pooled medians %"
    )
    for v in VARIANTS:
        meds = [run["median"] for run in runs[v]]
        means = [run["mean"] for run in runs[v]]
        # two processes per contender, as the worker's replicas: the pooled median of each pair
        pairs = [statistics.median(a["samples"] + b["samples"]) for a, b in zip(runs[v][::2], runs[v][1::2])]
        print(
            f"{v:13} | {' '.join(f'{m:.3f}' for m in meds)} | {spread(meds):6.2f} | "
            f"{spread(means):6.2f} | {spread(pairs) if len(pairs) > 1 else float('nan'):6.2f}"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out")
    ap.add_argument("--variants", help="comma-separated, e.g. fixed/32,read/32,read/32/linear")
    a = ap.parse_args()
    if a.variants:
        VARIANTS = tuple(a.variants.split(","))
    if a.child:
        print(json.dumps(child(a.child)))
    else:
        parent(a.rounds, a.out)
