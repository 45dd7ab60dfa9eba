"""Session 10 probe: which graph-replay set-up makes a tiny kernel's median repeat across
workers? Each trial stands for one worker: fresh allocations at shifted addresses, K captured
input/output sets replayed in rotation, an L2 flush by writing (zero_) or by reading (sum)."""
import statistics
import torch, torch.nn.functional as F

from graph_probe import DEV as dev, capture, elapsed_us, enqueue_replay, flush_buffer, spin_cycles_per_us

flush = flush_buffer()
sink = torch.empty((), dtype=torch.float32, device=dev)
cyc = spin_cycles_per_us()
FLUSHES = {"zero": flush.zero_,
           "read": lambda: sink.copy_(flush.view(torch.int32).sum())}  # reads 256 MB; leaves L2 clean

def trial(fn, shape, k, flush_kind, n=256, seed=0):
    pad = torch.empty(int(torch.randint(1, 1 << 22, (1,), generator=torch.Generator().manual_seed(seed))),
                      dtype=torch.uint8, device=dev)  # shift the addresses, as another worker's would be
    sets = [capture(fn, torch.randn(shape, dtype=torch.bfloat16, device=dev)) for _ in range(k)]
    samples, pend = [], []
    for i in range(n):
        g, static, out = sets[i % k]
        pend.append(enqueue_replay(g, static, torch.randn(shape, dtype=torch.bfloat16, device=dev),
                                   FLUSHES[flush_kind], cyc))
        if len(pend) == 32:
            samples += elapsed_us(pend); pend = []
    samples += elapsed_us(pend)
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
