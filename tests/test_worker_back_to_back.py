"""The worker's back-to-back ("throughput") timing path, run on CPU with stand-in CUDA events:
the GPU is needed for the times, not for the bookkeeping, which this checks."""

from __future__ import annotations

import time

import torch

import bot.worker as worker
from conftest import PROBLEMS


class _Event:
    def __init__(self, enable_timing: bool = False):
        self.t = None


def _harness(monkeypatch):
    monkeypatch.setattr(worker, "_Event", _Event)
    monkeypatch.setattr(worker, "_ev_record", lambda e: setattr(e, "t", time.perf_counter()))
    monkeypatch.setattr(worker, "_ev_elapsed", lambda a, b: (b.t - a.t) * 1e3)  # ms, as CUDA's
    monkeypatch.setattr(worker, "_cuda_sync", lambda: None)
    h = worker.Harness(None, "cpu", 1)
    assert h.op_load({"problem": str(PROBLEMS / "scale_add.py"), "module": None})["ok"]
    assert h.op_construct({"overrides": {}, "seed": 3})["ok"]
    h.flush_buf = torch.zeros(1 << 16, dtype=torch.uint8)
    return h


def test_back_to_back_reply_has_per_call_times_and_one_stream_pair_per_batch(monkeypatch):
    h = _harness(monkeypatch)
    msg = {"seeds": [11, 12, 13, 14], "distribution": "standard", "fp_seed": 99}
    reply = h._time_back_to_back(msg)
    assert reply["ok"], reply
    assert len(reply["event_us"]) == 4 and len(reply["host_us"]) == 1
    assert sum(reply["event_us"]) <= reply["batch_span_us"] <= reply["host_us"][0]
    # The fingerprints kept on the device are the ones the synchronised path computes.
    latency = h.op_time({**msg, "mode": "latency"})
    assert reply["fingerprints"] == latency["fingerprints"]


def test_back_to_back_rejects_a_non_tensor_output(monkeypatch):
    h = _harness(monkeypatch)
    h.model = lambda *inputs: [inputs[0].sum().item()]
    reply = h._time_back_to_back({"seeds": [1], "distribution": "standard", "fp_seed": 5})
    assert not reply["ok"] and reply["phase"] == "call" and "output type" in reply["error"]


def test_a_call_counts_at_least_the_hosts_time_to_issue_it(monkeypatch):
    # Stand-in events that see 1 µs of GPU time (the GPU was busy with earlier work when the
    # call began), and a call whose launch path takes 3 ms on the host.
    h = _harness(monkeypatch)
    monkeypatch.setattr(worker, "_ev_elapsed", lambda a, b: 1e-3)
    model = h.model

    def slow_launch(*inputs):
        time.sleep(0.003)
        return model(*inputs)
    h.model = slow_launch
    reply = h._time_back_to_back({"seeds": [1, 2, 3], "distribution": "standard", "fp_seed": 5})
    assert reply["ok"] and reply["event_us"] == [1.0] * 3
    assert all(3000.0 <= s < 3000.0 + 50_000 for s in reply["samples_us"]), reply["samples_us"]
