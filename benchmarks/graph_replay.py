"""What the graph-replay benchmarks share: `--timing graph`'s set-up in a few lines (a call
captured after warm-up on a side stream; per timed replay, fresh inputs copied in, the L2
flushed, a spin kernel covering the host's launch, events around the replay)."""

import statistics

import torch

DEV = "cuda"


def flush_buffer() -> torch.Tensor:
    return torch.empty(256 << 20, dtype=torch.uint8, device=DEV)  # > the H200's 60 MB L2


def spin_cycles_per_us() -> float:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(2_000_000)
    e1.record()
    torch.cuda.synchronize()
    return 2_000_000 / (e0.elapsed_time(e1) * 1e3)


def capture_call(fn, inputs):
    """(graph, static inputs, output) of fn(*inputs) on copies of the tensors among `inputs`."""
    static = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*static)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*static)
    return g, static, out


def capture(fn, x):
    """(graph, static input, output) of fn on a copy of x."""
    g, (static,), out = capture_call(fn, [x])
    return g, static, out


def enqueue_call_replay(graph, static, fresh, flush_l2, cycles_per_us, cover_us=60.0):
    """One timed replay with the tensors of `fresh` copied into those of `static`; `flush_l2`
    None leaves the L2 as it is. The events' pair, to read after a synchronise (`elapsed_us`)."""
    for s, f in zip(static, fresh):
        if isinstance(s, torch.Tensor):
            s.copy_(f)
    if flush_l2 is not None:
        flush_l2()
    torch.cuda._sleep(int(cover_us * cycles_per_us))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    graph.replay()
    b.record()
    return a, b


def enqueue_replay(graph, static, fresh, flush_l2, cycles_per_us, cover_us=60.0):
    """One timed replay on a `fresh` input (one tensor, as `capture` takes)."""
    return enqueue_call_replay(graph, [static], [fresh], flush_l2, cycles_per_us, cover_us)


def elapsed_us(pairs) -> list[float]:
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in pairs]


def replay_median_us_sets(fn, sets, replays, flush_words, cycles_per_us) -> float:
    """Median of `replays` timed graph replays of fn(*inputs), the inputs copied in from
    `sets` in turn, the L2 flushed by reading `flush_words` (as the worker's flush does)."""
    g, static, out = capture_call(fn, sets[0])
    pend = [enqueue_call_replay(g, static, sets[i % len(sets)], flush_words.sum, cycles_per_us) for i in range(replays)]
    med = statistics.median(elapsed_us(pend))
    del g, static, out
    return med
