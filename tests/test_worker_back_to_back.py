"""The worker's back-to-back ("throughput") and graph-replay ("graph") timing paths, run on CPU
with stand-in CUDA events and graphs: the GPU is needed for the times, not for the
bookkeeping, which this checks."""

from __future__ import annotations

import contextlib
import time

import torch
from conftest import PROBLEMS

import bot.harness.shared as shared
import bot.harness.timing as worker_timing
import bot.harness.worker as worker
from bot.protocol.dispatch import parse_request
from bot.protocol.messages import Construct, Load


class _Event:
    def __init__(self, enable_timing: bool = False):
        self.t = None


def _harness(monkeypatch):
    monkeypatch.setattr(shared, "Event", _Event)
    monkeypatch.setattr(shared, "ev_record", lambda e: setattr(e, "t", time.perf_counter()))
    monkeypatch.setattr(shared, "ev_elapsed", lambda a, b: (b.t - a.t) * 1e3)  # ms, as CUDA's
    monkeypatch.setattr(shared, "cuda_sync", lambda: None)
    h = worker.Harness(None, "cpu", 1)
    assert h.op_load(Load(problem=str(PROBLEMS / "scale_add.py")))["ok"]
    assert h.op_construct(Construct(seed=3))["ok"]
    h.flush_buf = torch.zeros(1 << 16, dtype=torch.uint8)
    return h


def _op(op, msg, **more):
    """The request of op `op` that `msg`'s fields make, as the worker parses it."""
    return parse_request({"op": op, **msg, **more})


def _b2b(h, msg):
    """A back-to-back batch on inputs staged first, as the parent sends it."""
    assert h.op_stage(_op("stage", msg))["ok"]
    return h._time_back_to_back(_op("time", msg, mode="throughput"), h.model)


def _graph(h, msg):
    assert h.op_stage(_op("stage", msg))["ok"]
    return h._time_graph_replays(_op("time", msg, mode="graph"), h.model)


def _latency_prints(h, msg):
    """The fingerprints of the same calls timed one by one (on the CPU their commitments are
    digests: the fingerprints of the outputs kept are computed here)."""
    assert h.op_stage(_op("stage", msg))["ok"]
    assert h.op_time(_op("time", msg, mode="latency"))["ok"]
    return [h._fingerprints(outputs, msg["fp_seed"]) for outputs in h.kept]


def test_back_to_back_reply_has_per_call_times_and_one_stream_pair_per_batch(monkeypatch):
    h = _harness(monkeypatch)
    msg = {"seeds": [11, 12, 13, 14], "fp_seed": 99}
    reply = _b2b(h, msg)
    assert reply["ok"], reply
    assert len(reply["event_us"]) == 4 and len(reply["host_us"]) == 1
    assert sum(reply["event_us"]) <= reply["batch_span_us"] <= reply["host_us"][0]
    # The fingerprints kept on the device are the ones the synchronised path computes.
    assert reply["fingerprints"] == _latency_prints(h, msg)


def test_back_to_back_rejects_a_non_tensor_output(monkeypatch):
    h = _harness(monkeypatch)
    h.model = lambda *inputs: [inputs[0].sum().item()]
    reply = _b2b(h, {"seeds": [1], "fp_seed": 5})
    assert not reply["ok"] and reply["phase"] == "call" and "output type" in reply["error"]


def test_a_call_counts_at_least_the_hosts_time_to_issue_it(monkeypatch):
    # Stand-in events that see 1 µs of GPU time (the GPU was busy with earlier work when the
    # call began), and a call whose launch path takes 3 ms on the host.
    h = _harness(monkeypatch)
    monkeypatch.setattr(shared, "ev_elapsed", lambda a, b: 1e-3)
    model = h.model

    def slow_launch(*inputs):
        time.sleep(0.003)
        return model(*inputs)

    h.model = slow_launch
    reply = _b2b(h, {"seeds": [1, 2, 3], "fp_seed": 5})
    assert reply["ok"] and reply["event_us"] == [1.0] * 3
    assert all(3000.0 <= s < 3000.0 + 50_000 for s in reply["samples_us"]), reply["samples_us"]


class _Graph:
    pass


class _Stream:
    def wait_stream(self, other):
        pass


def _graph_harness(monkeypatch):
    """Stand-in graphs: a replay runs the captured call again on the captured input tensors
    and writes the captured output tensors, as a real replay of GPU-only work does."""
    h = _harness(monkeypatch)
    captures = []
    monkeypatch.setattr(shared, "CUDAGraph", _Graph)
    monkeypatch.setattr(shared, "graph_capture", lambda g: captures.append(g) or contextlib.nullcontext())
    monkeypatch.setattr(shared, "Stream", _Stream)
    monkeypatch.setattr(shared, "stream_ctx", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(shared, "current_stream", _Stream)
    monkeypatch.setattr(shared, "gpu_sleep", lambda cycles: None)

    replayed, uploaded = [], []

    def replay(graph):
        if h.captured is None or all(c.graph is not graph for c in h.captured.sets):
            uploaded.append(graph)  # the replay at capture, which uploads a real graph
            return
        copy = next(c for c in h.captured.sets if c.graph is graph)
        replayed.append(graph)
        for static, fresh in zip(copy.outputs, shared.as_outputs(h.model(*copy.inputs))):
            static.copy_(fresh)

    monkeypatch.setattr(shared, "graph_replay", replay)
    h.replayed, h.uploaded = replayed, uploaded
    return h, captures


def test_graph_replays_see_each_calls_fresh_inputs_and_capture_once_per_shape(monkeypatch):
    h, captures = _graph_harness(monkeypatch)
    msg = {"seeds": [21, 22, 23], "fp_seed": 7}
    reply = _graph(h, msg)
    assert reply["ok"], reply
    assert len(reply["event_us"]) == 3 and reply["samples_us"] == reply["event_us"]
    assert len(reply["host_us"]) == 1 and sum(reply["event_us"]) <= reply["batch_span_us"]
    assert reply["fingerprints"] == _latency_prints(h, msg)  # not the captured call's outputs
    copies = reply["graph_copies"]
    assert copies == worker_timing.GRAPH_SETS_MAX == len(captures)  # a small shape: the most copies
    assert _graph(h, {**msg, "seeds": [24]})["ok"] and len(captures) == copies
    h.get_inputs = lambda: [torch.randn(4, 128)]  # another shape: captured anew, the old ones let go
    assert _graph(h, {**msg, "seeds": [25]})["ok"] and len(captures) == 2 * copies
    assert all(c.inputs[0].shape == (4, 128) for c in h.captured.sets)


def test_graph_replays_rotate_over_copies_with_tensors_of_their_own(monkeypatch):
    h, captures = _graph_harness(monkeypatch)
    n = 40
    reply = _graph(h, {"seeds": list(range(100, 100 + n)), "fp_seed": 7})
    assert reply["ok"], reply
    copies = h.captured.sets
    # Each copy replays in turn, so a run's times cover every copy's placement; each was
    # replayed once when captured, so no timed replay pays a graph's upload.
    assert h.replayed == [copies[i % len(copies)].graph for i in range(n)]
    assert h.uploaded == [c.graph for c in copies]
    pointers = {t.data_ptr() for c in copies for t in (*c.inputs, *c.outputs)}
    assert len(pointers) == 2 * len(copies)  # no copy shares an input or output tensor


def test_graph_copies_are_as_many_as_fit_in_their_memory_allowance(monkeypatch):
    h, _ = _graph_harness(monkeypatch)
    big = [torch.randn(256, 128)]  # 128 KiB in, 128 KiB out per copy
    monkeypatch.setattr(worker_timing, "GRAPH_SETS_BYTES", 1 << 20)
    assert len(h._capture(big, h.model).sets) == 4
    h.captured = None
    monkeypatch.setattr(worker_timing, "GRAPH_SETS_BYTES", 100_000)  # not even one: one copy all the same
    assert len(h._capture(big, h.model).sets) == 1


def test_graph_capture_failure_is_a_call_failure_naming_the_mode(monkeypatch):
    h, _ = _graph_harness(monkeypatch)

    def refuses(*inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    h.model = refuses
    reply = _graph(h, {"seeds": [1], "fp_seed": 5})
    assert not reply["ok"] and reply["phase"] == "call"
    assert reply["error"].startswith("CUDA graph capture for --timing graph failed: ")
    assert "not permitted" in reply["error"]
    h.model = lambda *inputs: [inputs[0].sum().item()]
    reply = _graph(h, {"seeds": [1], "fp_seed": 5})
    assert not reply["ok"] and "output type" in reply["error"]


def test_every_timed_call_reads_the_whole_flush_buffer_even_with_tensor_methods_patched(monkeypatch):
    # A candidate's module can rebind torch.Tensor's methods in the worker; the flush must
    # still read the buffer before each of its timed calls, or its timings run on a warm L2.
    h = _harness(monkeypatch)
    h.flush_buf = torch.arange(1 << 12, dtype=torch.int32)
    reads = []
    real_sum = shared.tensor_sum
    monkeypatch.setattr(shared, "tensor_sum", lambda t: reads.append(t) or real_sum(t))
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: self)
    monkeypatch.setattr(torch.Tensor, "sum", lambda self, *a, **k: torch.zeros(()))
    reply = _b2b(h, {"seeds": [1, 2, 3], "fp_seed": 5})
    assert reply["ok"], reply
    assert [r is h.flush_buf for r in reads] == [True] * 3
    assert int(shared.flush_l2(h.flush_buf)) == (1 << 12) * ((1 << 12) - 1) // 2


def test_the_spin_before_a_replay_follows_the_median_launch_not_one_hiccup():
    # The spin is in the parent's window: sized by a batch's slowest launch, one host hiccup
    # lengthened every later call's spin by a different amount in each batch and worker.
    assert worker_timing._launch_cover_us([]) == 50.0
    assert worker_timing._launch_cover_us([30.0] * 63 + [3_000.0]) == 60.0
    assert worker_timing._launch_cover_us([12.0, 9.0, 10.0]) == 50.0  # never under 50 us
    assert worker_timing._launch_cover_us([9_000.0] * 5) == 5_000.0  # nor over 5 ms
