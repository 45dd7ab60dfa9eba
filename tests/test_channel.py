"""The private channel: round trips tensors without pickle, and detects forged frames."""

from __future__ import annotations

import socket

import pytest
import torch

from bot.protocol.channel import CONTROL_BYTES, Channel, ChannelTampered, decode, encode, outputs_bound


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


def _exchange(tx: Channel, rx: Channel, message: dict) -> dict:
    """`message` sent on a thread (a long one fills the socket's buffer) and received here."""
    import threading

    sender = threading.Thread(target=tx.send, args=(message,))
    sender.start()
    try:
        return rx.recv()
    finally:
        sender.join(timeout=30)


def test_an_output_larger_than_a_frame_travels_in_frames_within_the_problems_bound():
    # A lowered frame size stands for the 64 MiB default: 6 GiB float32 outputs whose float64
    # reference doubles them were 12 GiB in one frame, above the old fixed 8 GiB cap.
    a, b = socket.socketpair()
    output = torch.randn(512, 300)  # float32, 600 KiB
    meta = [{"type": "Tensor", "dtype": "float32", "shape": [512, 300], "device": "cpu"}]
    bound = outputs_bound(meta, copies=1)
    tx = Channel(a, b"k" * 32, chunk_bytes=64 << 10)
    rx = Channel(b, b"k" * 32, max_message_bytes=bound, chunk_bytes=64 << 10)
    got = _exchange(tx, rx, {"ok": True, "outputs": [output.double()]})  # the reference's float64: 1.2 MiB
    assert output.double().nbytes > 16 * tx.chunk_bytes
    assert torch.equal(got["outputs"][0], output.double())


def test_a_message_above_the_problems_bound_is_tampering():
    a, b = socket.socketpair()
    meta = [{"type": "Tensor", "dtype": "float32", "shape": [16, 16], "device": "cpu"}]
    rx = Channel(b, b"k" * 32, max_message_bytes=outputs_bound(meta, copies=1) - CONTROL_BYTES + 1024)
    tx = Channel(a, b"k" * 32)
    tx.send({"ok": True, "outputs": [torch.randn(16, 16).double()]})  # within: 2 KiB + header
    assert rx.recv()["ok"]
    tx.send({"ok": True, "outputs": [torch.randn(64, 64).double()]})  # 32 KiB: not this problem's outputs
    with pytest.raises(ChannelTampered, match="exceeds this channel's bound"):
        rx.recv()


def test_a_forged_oversized_frame_is_tampering_before_anything_is_read():
    import struct

    a, b = socket.socketpair()
    rx = Channel(b, b"k" * 32, max_message_bytes=1 << 20)
    a.sendall(struct.pack("!QQQ32s", 12884902233, 0, 1 << 20, b"\0" * 32))  # 12 GiB claimed
    with pytest.raises(ChannelTampered, match="12884902233 bytes exceeds"):
        rx.recv()
    # Within the bound, but a frame longer than the receiver's frame size.
    a2, b2 = socket.socketpair()
    rx2 = Channel(b2, b"k" * 32, chunk_bytes=1024)
    a2.sendall(struct.pack("!QQQ32s", 4096, 0, 4096, b"\0" * 32))
    with pytest.raises(ChannelTampered, match="does not continue"):
        rx2.recv()


def test_frames_spliced_from_another_message_fail_the_chained_signature():
    import struct

    key = b"k" * 32
    a, b = socket.socketpair()
    tx = Channel(a, key, chunk_bytes=1024)
    streams: list[bytes] = []

    class Recorder:
        def sendall(self, data):
            streams[-1] += bytes(data)

    for values in (torch.zeros(1000), torch.ones(1000)):  # the same lengths, other bytes
        streams.append(b"")
        tx.sock = Recorder()  # type: ignore[assignment]
        tx.send({"t": values})

    def frames(stream: bytes) -> list[bytes]:
        out = []
        while stream:
            length = struct.unpack_from("!QQQ", stream)[2]
            out.append(stream[: 56 + length])
            stream = stream[56 + length :]
        return out

    first, second = frames(streams[0]), frames(streams[1])
    assert len(first) == len(second) >= 3
    # The second message's second frame in place of the first message's: same length, offset.
    a.sendall(first[0] + second[1] + b"".join(first[2:]))
    with pytest.raises(ChannelTampered, match="signature"):
        Channel(b, key).recv()
