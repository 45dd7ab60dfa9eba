"""The problem's own error counts what cuDNN's TF32 algorithms make of its float32 convolutions
(bot.harness.tf32): on an H100 KernelBench's Conv2d_Tanh_Scaling_BiasAdd_Max measured 1.8e-6 in
one trial and 3.3e-4 in another, and its baseline failed a timed call held to the first. On the
CPU the emulation runs on CPU convolutions (TF32_DEVICES patched), which are float32."""

from __future__ import annotations

import struct

import pytest
import torch
from conftest import PROBLEMS

import bot.harness.checked as checked
import bot.harness.tf32 as tf32
import bot.harness.worker as worker
from bot.core.distributions import distribution_of
from bot.protocol.messages import Construct, Load, Run


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def test_values_round_to_ten_mantissa_bits_to_nearest_ties_to_even():
    one = 0x3F800000
    cases = {
        one: one,
        one + 0x0FFF: one,  # under half of the dropped part: down
        one + 0x1001: one + 0x2000,  # over half: up
        one + 0x1000: one,  # a tie, the kept part even: stays
        one + 0x3000: one + 0x4000,  # a tie, the kept part odd: up to even
        0x80000000 | (one + 0x3000): 0x80000000 | (one + 0x4000),  # the same for negatives
        0x7F7FFFFF: 0x7F800000,  # the largest float32 rounds up to infinity, as TF32's rounding does
    }
    x = torch.tensor([_f32(b) for b in cases])
    got = tf32.round_to_tf32(x).view(torch.int32).tolist()
    assert [g & 0xFFFFFFFF for g in got] == list(cases.values())
    special = torch.tensor([float("inf"), float("-inf"), float("nan")])
    kept = tf32.round_to_tf32(special)
    assert kept[:2].tolist() == [float("inf"), float("-inf")] and torch.isnan(kept[2])


def test_rounding_goes_chunk_by_chunk_and_leaves_its_operand_alone(monkeypatch):
    monkeypatch.setattr(tf32, "CHUNK_ELEMENTS", 7)
    x = torch.randn(6, 10).t()  # not contiguous, 60 elements: nine chunks, the last short
    before = x.clone()
    got = tf32.round_to_tf32(x)
    monkeypatch.setattr(tf32, "CHUNK_ELEMENTS", 1 << 24)
    assert torch.equal(got, tf32.round_to_tf32(x.contiguous()))
    assert torch.equal(x, before) and got.shape == x.shape
    assert ((got.view(torch.int32) & 0x1FFF) == 0).all()  # 13 low bits dropped everywhere
    assert 0 < (got - x).abs().max() <= x.abs().max() * 2.0**-11


def test_only_float32_convolutions_on_the_device_change():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 16, 3)
    x, a, b = torch.randn(2, 8, 12, 12), torch.randn(64, 64), torch.randn(64, 64)
    with tf32.Tf32Convolutions("cpu") as mode, torch.no_grad():
        emulated = conv(x)
        product = a @ b
        transposed = torch.nn.functional.conv_transpose1d(torch.randn(1, 4, 9), torch.randn(4, 2, 3))
        double = torch.nn.functional.conv1d(torch.randn(1, 4, 9, dtype=torch.float64), torch.randn(2, 4, 3).double())
    assert mode.convolutions == 2  # the float64 one is not counted
    assert transposed.shape == (1, 2, 11) and double.dtype == torch.float64
    assert torch.equal(product, a @ b)  # matmul untouched
    with torch.no_grad():
        exact = conv.double()(x.double())
    error = float((emulated.double() - exact).norm() / exact.norm())
    with tf32.Tf32Convolutions("cuda") as elsewhere, torch.no_grad():
        conv.float()(x)
    assert elsewhere.convolutions == 0  # CPU tensors, a mode for the GPU's
    assert 1e-5 < error < 2e-3  # TF32's 2^-11 operands, where float32 itself is at 1e-7


def _reference(problem: str) -> worker.Harness:
    h = worker.Harness(None, "cpu", 1)
    assert h.op_load(Load(problem=str(PROBLEMS / problem), precision="float64"))["ok"]
    assert h.op_construct(Construct(seed=3))["ok"]
    return h


def test_a_float32_convolution_is_held_to_what_tf32_makes_of_it(monkeypatch):
    seed = next(s for s in range(1, 100) if distribution_of(s) == "standard")
    as_it_ran = _reference("conv_f32.py").op_run(Run(seed=seed))
    monkeypatch.setattr(checked, "TF32_DEVICES", ("cpu",))
    h = _reference("conv_f32.py")
    widened = h.op_run(Run(seed=seed))
    assert as_it_ran["ok"] and widened["ok"]
    (ran_norm, ran_elem), (tf32_norm, tf32_elem) = as_it_ran["own_error"][0], widened["own_error"][0]
    assert ran_norm < 1e-6  # the CPU's float32 convolution
    assert 1e-5 < tf32_norm < 2e-3 and tf32_elem > ran_elem  # TF32's, on unit-scale inputs
    assert h.tf32_convolutions is True
    # The answer itself is the problem's own, as it ran: only the error figures widen.
    assert all(torch.equal(a, b) for a, b in zip(widened["outputs"], as_it_ran["outputs"], strict=True))


def test_a_model_without_convolutions_is_called_once_more_only_in_its_first_trial(monkeypatch):
    monkeypatch.setattr(checked, "TF32_DEVICES", ("cpu",))
    made = []
    real = tf32.Tf32Convolutions
    monkeypatch.setattr(checked, "Tf32Convolutions", lambda device: made.append(device) or real(device))
    h = _reference("scale_add.py")
    first, second = h.op_run(Run(seed=5)), h.op_run(Run(seed=6))
    assert first["ok"] and second["ok"]
    assert made == ["cpu"] and h.tf32_convolutions is False
    plain = _reference("scale_add.py")
    monkeypatch.setattr(checked, "TF32_DEVICES", ())
    assert plain.op_run(Run(seed=5))["own_error"] == first["own_error"]


def test_a_model_the_emulation_cannot_run_keeps_its_answer_and_its_own_bound(monkeypatch, capfd):
    class Broken(tf32.Tf32Convolutions):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise NotImplementedError("no Python dispatch for this op")

    monkeypatch.setattr(checked, "Tf32Convolutions", Broken)
    as_it_ran = _reference("conv_f32.py").op_run(Run(seed=5))
    monkeypatch.setattr(checked, "TF32_DEVICES", ("cpu",))
    h = _reference("conv_f32.py")
    reply = h.op_run(Run(seed=5))
    assert reply["ok"] and reply["own_error"] == as_it_ran["own_error"]
    assert h.tf32_convolutions is False
    assert "not emulated in TF32: NotImplementedError" in capfd.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_float32_convolution_is_held_to_tf32_whichever_algorithm_cudnn_took():
    h = worker.Harness(None, "cuda", 1)
    assert h.op_load(Load(problem=str(PROBLEMS / "conv_f32.py"), precision="float64"))["ok"]
    assert h.op_construct(Construct(seed=3))["ok"]
    reply = h.op_run(Run(seed=5))
    assert reply["ok"] and h.tf32_convolutions is True
    assert reply["own_error"][0][0] > 1e-5  # TF32's, where cuDNN's float32 algorithm is at 1e-6
