"""Outputs compared where they lie, on a GPU: the reference lends each contender's call CUDA VMM
allocations (bot.harness.vmm) over the channel and judges them on the device. Skipped on CPU
machines (marker `gpu`); tests/test_lent_outputs.py runs the same protocol on CPU blocks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_a_vmm_block_lent_is_poisoned_and_what_a_borrower_writes_is_seen_by_the_lender():
    import os

    from bot.harness.blocks import POISON, borrow, lend

    block, fd = lend(3 << 20, "cuda")
    assert block.view(torch.uint8, [3 << 20]).eq(POISON).all()
    theirs = borrow(fd, 3 << 20, "cuda")  # this process stands in for the contender
    theirs.view(torch.float32, [3 << 18]).copy_(torch.arange(3 << 18, device="cuda", dtype=torch.float32))
    torch.cuda.synchronize()
    theirs.close()
    assert block.view(torch.float32, [3 << 18]).eq(torch.arange(3 << 18, device="cuda")).all()
    block.close()
    os.close(fd)


def test_cheats_and_honest_code_judged_in_the_reference_on_cuda():
    from test_lent_outputs import judged_in_the_reference

    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.timing.records import TimingOptions
    from bot.sandbox import Limits

    options = EvalOptions(
        device="cuda",
        use_cache=False,
        limits=Limits(memory_mb=32768, call_timeout_s=60),
        timing=TimingOptions(time_cap_s=0.5, min_samples=10),
        cache_root=Path("/tmp/kernel-bot-gpu-cache"),
    )
    names = ["big_add_triton", "cuda_empty", "cheat_skip_lent_write_add"]
    outcomes, notes = judged_in_the_reference("big_add.py", names, options)
    out = {name: o.verdict for name, o in outcomes.items()}
    assert any("outputs compared in the reference, where they lie" in n for n in notes), notes
    assert out["big_add_triton"].accepted, out["big_add_triton"].reasons
    for name in ("cuda_empty", "cheat_skip_lent_write_add"):
        assert not out[name].accepted and any(r.startswith("values:") for r in out[name].reasons), out[name].reasons


def test_picked_timed_calls_too_large_to_reveal_are_judged_in_the_reference_on_cuda(monkeypatch):
    """Every timed shape's picks lent for (no output revealed over the channel): a timed call
    off in one element by less than a fingerprint shows is rejected; honest code is not."""
    from test_lent_timed_picks import _evaluate

    from bot.engine.timing.harness_cost import HarnessCost

    monkeypatch.setattr(HarnessCost, "FULL_CHECK_BYTES", 0)
    result = _evaluate(["honest", "cheat_nudge_timed"], checks_per_batch=2, device="cuda")
    out = {o.candidate.name: o.verdict for o in result.candidates}
    honest = [c for c in out["honest"].checks if c.name == "timed-call outputs"]
    assert honest and all(c.passed for c in honest), out["honest"].reasons
    failed = [c for c in out["cheat_nudge_timed"].checks if c.name == "timed-call outputs" and not c.passed]
    assert failed and all("element" in c.evidence for c in failed), out["cheat_nudge_timed"].reasons


def test_a_gpu_tensors_digest_is_summed_there_as_the_cpu_sums_it():
    import time

    from bot.protocol.measures import hash_tensor, summed_digest

    x = torch.randn(3 << 20, device="cuda")  # 12 MiB: three chunks
    assert hash_tensor(x) == summed_digest(x.cpu())
    big = torch.randn(1 << 30, device="cuda")  # 4 GiB, as KernelBench's large inputs
    hash_tensor(big)
    torch.cuda.synchronize()
    began = time.perf_counter()
    hash_tensor(big)
    print(f"summed digest of 4 GiB on the GPU: {time.perf_counter() - began:.3f} s")
