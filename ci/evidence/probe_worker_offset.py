"""Session 11 probe: where does a fresh worker's offset on a few-µs kernel come from?

Each child is a fresh process (a new CUDA context, new allocations), as a worker is. It
captures 32 copies of a call (as `--timing graph` does) and times their replays in batches
of 50, with one of several L2 set-ups before each replay. If the spread of per-process
medians shrinks with some set-up, the set-up is the cause; if it stays under "none" (no
flush), the offset belongs to the process, not to the flush.

    python3 ci/evidence/probe_worker_offset.py --rounds 6 --out $OUT/offset.json
"""
import argparse
import json
import random
import statistics

from fresh_processes import run_children, spread

VARIANTS = ("zero", "zero-shift", "read", "zero+read", "none")
CASES = {"gelu decode": ((32, 14336), "gelu"), "softmax decode": ((64, 128256), "softmax")}
REPLAYS, BATCH, COPIES = 2000, 50, 32


def child(variant: str) -> dict:
    import torch
    import torch.nn.functional as F
    from graph_probe import capture, elapsed_us, enqueue_replay, spin_cycles_per_us

    dev = "cuda"
    mb = 1 << 20
    big = torch.empty(512 * mb, dtype=torch.uint8, device=dev)
    second = torch.empty(256 * mb, dtype=torch.uint8, device=dev)
    sink = torch.empty((), dtype=torch.float32, device=dev)
    rng = random.Random()

    def read(buf):
        sink.copy_(buf.view(torch.int32).sum())

    flushes = {
        "zero": lambda: big[:256 * mb].zero_(),  # what the worker does: one place per process
        "zero-shift": lambda: big[(o := rng.randrange(128) * 2 * mb):o + 256 * mb].zero_(),
        "read": lambda: read(big[:256 * mb]),  # leaves the L2 clean: no write-backs in the timed call
        "zero+read": lambda: (big[:256 * mb].zero_(), read(second)),
        "none": None,
    }
    fns = {"gelu": lambda x: F.gelu(x, approximate="tanh"), "softmax": lambda x: torch.softmax(x, -1)}
    cyc = spin_cycles_per_us()
    out = {}
    for case, (shape, fn_name) in CASES.items():
        fn = fns[fn_name]
        sets = [capture(fn, torch.randn(shape, dtype=torch.bfloat16, device=dev)) for _ in range(COPIES)]
        fresh = [torch.randn(shape, dtype=torch.bfloat16, device=dev) for _ in range(4)]
        samples, batch_medians, i = [], [], 0
        while len(samples) < REPLAYS:
            pend = []
            for _ in range(BATCH):
                g, static, _out = sets[i % COPIES]
                pend.append(enqueue_replay(g, static, fresh[i % 4], flushes[variant], cyc))
                i += 1
            got = elapsed_us(pend)
            samples += got
            batch_medians.append(statistics.median(got))
        warm = samples[BATCH:]  # the first batch is warm-up, as in the worker
        q = statistics.quantiles(warm, n=10)
        out[case] = {"median": statistics.median(warm), "mean": statistics.fmean(warm),
                     "p10": q[0], "p90": q[-1],
                     "batch_median_spread_pct": 100 * (max(batch_medians[1:]) - min(batch_medians[1:]))
                     / statistics.median(batch_medians[1:]),
                     "samples": [round(s, 3) for s in warm]}
        del sets
        torch.cuda.empty_cache()
    return out


def parent(rounds: int, out_path: str | None) -> None:
    runs = run_children(__file__, VARIANTS, rounds, lambda res: "  ".join(
        f"{c}: {res[c]['median']:.3f}" for c in CASES), out_path)
    print(f"\n{'case':15} {'variant':10} | medians of {rounds} fresh processes (us) | "
          "spread of medians % | spread of means % | worst within-process batch-median spread %")
    for case in CASES:
        for v in VARIANTS:
            meds = [run[case]["median"] for run in runs[v]]
            means = [run[case]["mean"] for run in runs[v]]
            within = max(run[case]["batch_median_spread_pct"] for run in runs[v])
            print(f"{case:15} {v:10} | {' '.join(f'{m:.3f}' for m in meds)} | {spread(meds):6.2f} | "
                  f"{spread(means):6.2f} | {within:6.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
    else:
        parent(a.rounds, a.out)
