"""The private channel: round trips tensors without pickle, and detects forged frames."""

from __future__ import annotations

import socket

import pytest
import torch

from bot.protocol.channel import Channel, ChannelTampered, decode, encode


def _pair(key=b"k" * 32):
    a, b = socket.socketpair()
    return Channel(a, key), Channel(b, key)


def test_round_trip_of_tensors_in_every_dtype():
    tx, rx = _pair()
    tensors = [
        torch.randn(3, 4),
        torch.randn(5).bfloat16(),
        torch.randn(2, 2).to(torch.float8_e4m3fn),
        torch.arange(6).reshape(2, 3),
        torch.tensor(1.5, dtype=torch.float64),
        torch.empty(0, 3),
    ]
    tx.send({"op": "x", "outs": tensors, "nested": {"t": tensors[0]}, "n": 1.5})
    got = rx.recv()
    for a, b in zip(tensors, got["outs"]):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(
            a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
            b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b,
        )
    assert torch.equal(got["nested"]["t"], tensors[0]) and got["n"] == 1.5


def test_frame_signed_with_another_key_is_rejected():
    a, b = socket.socketpair()
    Channel(a, b"wrong" * 8).send({"ok": True})
    with pytest.raises(ChannelTampered):
        Channel(b, b"k" * 32).recv()


def test_garbage_and_pickle_payloads_are_tampering_not_code():
    with pytest.raises(ChannelTampered):
        decode(b"\x00\x00\x00\x05notjs")
    import pickle

    with pytest.raises(ChannelTampered):
        decode(pickle.dumps({"ok": True}))
    payload = encode({"t": torch.ones(2)})
    with pytest.raises(ChannelTampered):
        decode(payload + b"extra")
