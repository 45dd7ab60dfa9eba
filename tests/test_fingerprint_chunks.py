"""A timed call's fingerprint (projection on a secret vector, norm, non-finite count) of an
output longer than measures.FP_CHUNK: taken chunk by chunk, so that no worker holds float64
copies of a whole multi-GiB output, and still every element counts."""

from __future__ import annotations

import math

import pytest
import torch

import bot.protocol.measures as measures


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(measures, "FP_CHUNK", 64)


def _whole(out: torch.Tensor, w: torch.Tensor) -> list[float]:
    """The fingerprint through one vector as long as the output: chunk k's part of it is w
    times the sign of w[k]."""
    x = out.reshape(-1).double()
    finite = torch.isfinite(x)
    x = torch.where(finite, x, torch.zeros(()))
    chunks = math.ceil(x.numel() / w.numel())
    full = torch.cat([torch.sign(w[k]) * w for k in range(chunks)])[: x.numel()]
    return [float((x * full).sum()), float(x.norm()), float((~finite).sum())]


def test_the_vector_is_no_longer_than_a_chunk_and_a_short_outputs_is_as_it_was(small_chunks):
    assert measures.fingerprint_weights((10, 30), "cpu", 7).shape == (64,)
    short = measures.fingerprint_weights((5, 8), "cpu", 7)
    gen = torch.Generator().manual_seed(7)
    assert torch.equal(short, torch.randn((5, 8), generator=gen, dtype=torch.float64).reshape(-1))


def test_a_long_outputs_fingerprint_is_its_projection_on_the_signed_chunks(small_chunks):
    out = torch.randn(10, 30)
    out[3, 4], out[9, 29] = float("nan"), float("inf")  # one in the first chunk, one in the last
    w = measures.fingerprint_weights(tuple(out.shape), "cpu", 11)
    got = measures.fingerprint(out, w).tolist()
    assert got == pytest.approx(_whole(out, w), rel=1e-12) and got[2] == 2.0


def test_a_change_in_the_last_chunk_alone_moves_the_projection(small_chunks):
    out = torch.randn(300)
    w = measures.fingerprint_weights((300,), "cpu", 3)
    changed = out.clone()
    changed[-1] += 1.0  # the last, short chunk
    moved = float(changed[-1]) - float(out[-1])  # 1.0 up to float32's rounding of the sum
    before, after = measures.fingerprint(out, w), measures.fingerprint(changed, w)
    assert abs(float(after[0] - before[0])) == pytest.approx(abs(moved * float(w[300 % 64 - 1])), rel=1e-9)


def test_the_parent_reads_a_long_output_from_outside_as_the_harness_fingerprints_it(small_chunks):
    from bot.engine.timing.outside_checks import OutsideChecks

    checks = OutsideChecks(secret=5)
    calls = [[torch.randn(10, 30), torch.randn(4)] for _ in range(3)]
    prints = checks._fingerprints(calls)
    for call, printed in zip(calls, prints):
        for j, out in enumerate(call):
            w = measures.fingerprint_weights(tuple(out.shape), "cpu", 5 + j)
            assert printed[j] == pytest.approx(measures.fingerprint(out, w).tolist(), rel=1e-9)
