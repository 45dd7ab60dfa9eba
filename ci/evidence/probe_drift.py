"""Session 10 probe: does a 4.6 us kernel's graph-replay time drift with the GPU's state?
One gelu decode graph replayed (fresh inputs, L2 flush, spin cover, as `--timing graph`) for
SECONDS; per second: the median, and the SM clock, memory clock, temperature and power."""
import statistics, subprocess, sys, time
import torch, torch.nn.functional as F

from graph_probe import DEV as dev, capture, elapsed_us, enqueue_replay, flush_buffer, spin_cycles_per_us

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 120
flush = flush_buffer()
cyc = spin_cycles_per_us()
g, static, out = capture(lambda x: F.gelu(x, approximate="tanh"),
                         torch.randn(32, 14336, dtype=torch.bfloat16, device=dev))
print("second median_us p10 p90 n | sm_mhz mem_mhz temp_c power_w", flush=True)
t_end = time.time() + SECONDS
sec = 0
while time.time() < t_end:
    t1 = time.time() + 1.0
    samples = []
    while time.time() < t1:
        samples += elapsed_us([enqueue_replay(g, static, torch.randn_like(static), flush.zero_, cyc)
                               for _ in range(32)])
    q = statistics.quantiles(samples, n=10)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout.strip()
    print(f"{sec:4d} {statistics.median(samples):.3f} {q[0]:.3f} {q[-1]:.3f} {len(samples)} | {smi}", flush=True)
    sec += 1
