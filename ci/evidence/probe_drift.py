"""Session 10 probe: does a 4.6 us kernel's graph-replay time drift with the GPU's state?
One gelu decode graph replayed (fresh inputs, L2 flush, spin cover, as `--timing graph`) for
SECONDS; per second: the median, and the SM clock, memory clock, temperature and power."""
import statistics, subprocess, sys, time
import torch, torch.nn.functional as F

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 120
dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record(); torch.cuda._sleep(2_000_000); e1.record(); torch.cuda.synchronize()
cyc = 2_000_000 / (e0.elapsed_time(e1) * 1e3)
fn = lambda x: F.gelu(x, approximate="tanh")
static = torch.randn(32, 14336, dtype=torch.bfloat16, device=dev)
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): fn(static)
torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = fn(static)
print("second median_us p10 p90 n | sm_mhz mem_mhz temp_c power_w", flush=True)
t_end = time.time() + SECONDS
sec = 0
while time.time() < t_end:
    t1 = time.time() + 1.0
    samples = []
    while time.time() < t1:
        pend = []
        for _ in range(32):
            static.copy_(torch.randn_like(static))
            flush.zero_()
            torch.cuda._sleep(int(60 * cyc))
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); pend.append((a, b))
        torch.cuda.synchronize()
        samples += [a.elapsed_time(b) * 1e3 for a, b in pend]
    q = statistics.quantiles(samples, n=10)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
    print(f"{sec:4d} {statistics.median(samples):.3f} {q[0]:.3f} {q[-1]:.3f} {len(samples)} | {smi}", flush=True)
    sec += 1
