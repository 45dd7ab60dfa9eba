"""Who held the GPU's memory when a worker ran out of it: said in the failure, so that a run
out of memory beside others shows whether the reference, a contender or a leak held the rest."""

from __future__ import annotations

from types import SimpleNamespace

import bot.engine.workers.client as client
from bot.engine.workers.gpu_memory import Holder, holders_line, process_memory

GIB = 1 << 30


def test_nvidia_smis_listing_is_read_per_process_and_uncounted_lines_are_skipped():
    listing = "101, 4096\n102, [N/A]\n101, 1024\n\n103, 512\n"
    assert process_memory(listing) == {101: 5 << 30, 103: 512 << 20}


def test_the_bots_workers_are_named_largest_first_and_the_rest_summed_apart():
    used = {10: 20 * GIB, 11: 4 * GIB, 12: 6 * GIB, 99: 6 * GIB, 98: GIB}
    workers = [
        Holder("19_ReLU honest c1", (12,)),
        Holder("19_ReLU reference", (10, 11)),  # a worker and a process it started
        Holder("47_Sum reference", (13,)),  # holds nothing on the GPU: not named
    ]
    assert holders_line(used, workers) == (
        "GPU memory held then: 19_ReLU reference 24.0 GiB, 19_ReLU honest c1 6.0 GiB, "
        "2 process(es) not the bot's live workers 7.0 GiB"
    )
    assert holders_line({}, workers) == "GPU memory held then: no process listed"


def test_past_eight_workers_the_smallest_are_summed():
    used = {pid: (pid + 1) * GIB for pid in range(10)}
    line = holders_line(used, [Holder(f"w{pid}", (pid,)) for pid in range(10)])
    assert line.startswith("GPU memory held then: w9 10.0 GiB, w8 9.0 GiB")
    assert line.endswith("w2 3.0 GiB, 2 more worker(s) 3.0 GiB")


def _failure(device: str, error: str) -> str:
    worker = SimpleNamespace(device=device, gpu_index=0, running=SimpleNamespace(log_tail=lambda: ""))
    reply = {"ok": False, "phase": "call", "error": error, "traceback": ""}
    return client.WorkerClient._failure(worker, reply).reason


def test_a_workers_report_of_cuda_memory_run_out_says_who_held_it(monkeypatch):
    monkeypatch.setattr(client, "gpu_process_memory", lambda gpu: {4242: 70 * GIB})
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB."
    assert _failure("cuda", oom) == f"{oom} (GPU memory held then: 1 process(es) not the bot's live workers 70.0 GiB)"
    assert _failure("cpu", oom) == oom  # no GPU to account for
    assert _failure("cuda", "ValueError: shapes differ") == "ValueError: shapes differ"
    monkeypatch.setattr(client, "gpu_process_memory", lambda gpu: None)
    assert _failure("cuda", oom).endswith("(nvidia-smi could not say who held the GPU's memory)")
