"""The private, authenticated message channel between the bot and a worker.

Frames are `length | HMAC-SHA256 | payload`, the payload a JSON header followed by raw
tensor bytes. Nothing is ever unpickled: a hostile worker can send wrong data, but it
cannot make the bot's process execute anything. Every frame is signed with a per-run
key that travels over the channel itself (never argv or the environment), so a candidate
that writes into inherited file descriptors or prints "passed" is detected as tampering.
A determined candidate in the same process could still find the key in memory; that buys
it nothing, because the verdict is computed in the parent from outputs it cannot predict.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
from typing import Any

import torch

MAX_FRAME_BYTES = 8 << 30  # a frame larger than 8 GiB is tampering, not data
_HEADER = struct.Struct("!Q32s")

# Tensors travel as raw bytes; dtypes are named, never evaluated.
_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.complex64,
    )
}


class ChannelError(Exception):
    """The channel closed, timed out, or carried a frame that fails authentication."""


class ChannelClosed(ChannelError):
    pass


class ChannelTampered(ChannelError):
    pass


def _flatten(obj: Any, blobs: list[memoryview], metas: list[dict]) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().reshape(-1).contiguous().cpu()
        metas.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(obj.shape)})
        # A view of the tensor's own memory: frames are written from it without a copy.
        blobs.append(memoryview(t.view(torch.uint8).numpy()) if t.numel() else memoryview(b""))
        return {"__tensor__": len(metas) - 1}
    if isinstance(obj, dict):
        return {str(k): _flatten(v, blobs, metas) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_flatten(v, blobs, metas) for v in obj]
    return obj


def _encode_parts(message: dict[str, Any]) -> list[memoryview | bytes]:
    """The payload as parts: the length-prefixed JSON header, then each tensor's bytes."""
    blobs: list[memoryview] = []
    metas: list[dict] = []
    body = _flatten(message, blobs, metas)
    header = json.dumps({"body": body, "tensors": metas, "sizes": [b.nbytes for b in blobs]}, allow_nan=True).encode()
    return [struct.pack("!I", len(header)) + header, *blobs]


def encode(message: dict[str, Any]) -> bytes:
    """Serialise a message (JSON-able values and tensors) into a payload."""
    return b"".join(_encode_parts(message))


def _unflatten(obj: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[int(obj["__tensor__"])]
        return {k: _unflatten(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unflatten(v, tensors) for v in obj]
    return obj


def decode(payload: bytes | bytearray) -> dict[str, Any]:
    """Parse a payload; raises ChannelTampered on anything malformed. Tensors share the
    memory of a bytearray payload (no copy); a bytes payload is copied once, to be writable."""
    try:
        if not isinstance(payload, bytearray):
            payload = bytearray(payload)
        (hlen,) = struct.unpack_from("!I", payload, 0)
        header = json.loads(bytes(payload[4 : 4 + hlen]))
        offset = 4 + hlen
        tensors = []
        for meta, size in zip(header["tensors"], header["sizes"], strict=True):
            dtype = _DTYPES[meta["dtype"]]
            shape = [int(s) for s in meta["shape"]]
            size = int(size)
            if size < 0 or offset + size > len(payload):
                raise ValueError("truncated tensor")
            flat = (
                torch.frombuffer(payload, dtype=torch.uint8, count=size, offset=offset).view(dtype)
                if size
                else torch.empty(0, dtype=dtype)
            )
            offset += size
            tensors.append(flat.reshape(shape))
        if offset != len(payload):
            raise ValueError("trailing bytes")
        body = _unflatten(header["body"], tensors)
        if not isinstance(body, dict):
            raise ValueError("message is not an object")
        return body
    except ChannelTampered:
        raise
    except Exception as exc:  # any parse failure is a forged or corrupted frame
        raise ChannelTampered(f"malformed frame: {exc}") from None


class Channel:
    """One end of a connected stream socket, with signed frames."""

    def __init__(self, sock: socket.socket, key: bytes | None = None):
        self.sock = sock
        self.key = key

    def send(self, message: dict[str, Any]) -> None:
        parts = _encode_parts(message)
        mac = hmac.new(self.key or b"", digestmod=hashlib.sha256)
        for part in parts:
            mac.update(part)
        self.sock.sendall(_HEADER.pack(sum(len(memoryview(p)) for p in parts), mac.digest()))
        for part in parts:
            self.sock.sendall(part)

    def _read_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            count = self.sock.recv_into(view[got:], min(n - got, 1 << 22))
            if not count:
                raise ChannelClosed("channel closed")
            got += count
        return buf

    def recv(self) -> dict[str, Any]:
        """Block until one frame arrives (use socket timeouts or select to bound it)."""
        length, digest = _HEADER.unpack(self._read_exact(_HEADER.size))
        if length > MAX_FRAME_BYTES:
            raise ChannelTampered(f"frame of {length} bytes exceeds the cap")
        payload = self._read_exact(length)
        expected = hmac.new(self.key or b"", payload, hashlib.sha256).digest()
        if not hmac.compare_digest(digest, expected):
            raise ChannelTampered("frame signature does not match the run key")
        return decode(payload)
