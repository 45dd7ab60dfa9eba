"""Session 10 probe: which graph-replay set-up makes a tiny kernel's median repeat across
workers? Each trial stands for one worker: fresh allocations at shifted addresses, K captured
input/output sets replayed in rotation, an L2 flush by writing (zero_) or by reading (sum)."""
import os, statistics, sys
import torch, torch.nn.functional as F

dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
sink = torch.empty((), dtype=torch.float32, device=dev)
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record(); torch.cuda._sleep(2_000_000); e1.record(); torch.cuda.synchronize()
cyc = 2_000_000 / (e0.elapsed_time(e1) * 1e3)

def capture(fn, x):
    static = x.clone()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn(static)
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(static)
    return g, static, out

def trial(fn, shape, k, flush_kind, n=256, seed=0):
    pad = torch.empty(int(torch.randint(1, 1 << 22, (1,), generator=torch.Generator().manual_seed(seed))),
                      dtype=torch.uint8, device=dev)  # shift the addresses, as another worker's would be
    sets = [capture(fn, torch.randn(shape, dtype=torch.bfloat16, device=dev)) for _ in range(k)]
    samples, pend = [], []
    for i in range(n):
        g, static, out = sets[i % k]
        static.copy_(torch.randn(shape, dtype=torch.bfloat16, device=dev))
        if flush_kind == "zero":
            flush.zero_()
        else:
            sink.copy_(flush.view(torch.int32).sum())  # reads 256 MB; leaves L2 clean
        torch.cuda._sleep(int(60 * cyc))
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record()
        pend.append((a, b))
        if len(pend) == 32:
            torch.cuda.synchronize(); samples += [x.elapsed_time(y) * 1e3 for x, y in pend]; pend = []
    torch.cuda.synchronize(); samples += [x.elapsed_time(y) * 1e3 for x, y in pend]
    del sets, pad
    torch.cuda.empty_cache()
    return samples[4:]

cases = {
    "gelu decode": (lambda x: F.gelu(x, approximate="tanh"), (32, 14336)),
    "rmsnorm-ish decode": (lambda x: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype), (8, 4096)),
    "softmax decode": (lambda x: torch.softmax(x.float(), -1).to(x.dtype), (32, 32000)),
}
print(f"{'case':20} {'K':>3} {'flush':5} | medians of 8 workers (us) | spread of medians % | spread of means %")
for name, (fn, shape) in cases.items():
    for flush_kind in ("zero", "read"):
        for k in (1, 16, 64):
            meds, means = [], []
            for t in range(8):
                s = trial(fn, shape, k, flush_kind, seed=1000 * k + t)
                meds.append(statistics.median(s)); means.append(statistics.fmean(s))
            sp = lambda v: 100 * (max(v) - min(v)) / statistics.median(v)
            print(f"{name:20} {k:>3} {flush_kind:5} | {' '.join(f'{m:.2f}' for m in meds)} | {sp(meds):5.2f} | {sp(means):5.2f}", flush=True)
