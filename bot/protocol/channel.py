"""The private, authenticated message channel between the bot and a worker.

A message's payload is a JSON header followed by raw tensor bytes; it travels in frames of at
most `CHUNK_BYTES` each, `message length | offset | frame length | HMAC-SHA256 | bytes`, each
frame's MAC chained to the one before, so a forged or spliced frame is caught before the next
is read. A message longer than the receiver's bound is tampering: the parent bounds each
worker's messages by what the problem's outputs can need (`outputs_bound`), and before it
knows them by the machine's memory, which no honest message can exceed.

Nothing is ever unpickled: a hostile worker can send wrong data, but it cannot make the
bot's process execute anything. Every frame is signed with a per-run
key that travels over the channel itself (never argv or the environment), so a candidate
that writes into inherited file descriptors or prints "passed" is detected as tampering.
A determined candidate in the same process could still find the key in memory; that buys
it nothing, because the verdict is computed in the parent from outputs it cannot predict.

A message may carry file descriptors (SCM_RIGHTS, with its first frame's header): the shared
output blocks of bot.harness.blocks. Only an end that makes room for them (`fd_room`) takes
them; elsewhere the kernel closes whatever a peer attached, unread.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import socket
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

CHUNK_BYTES = 64 << 20  # one frame's bytes at most: a message of 12 GiB goes in 192 frames
# Beyond its tensors' bytes a message carries a JSON header (shapes, hashes, fingerprints):
# a trial's is a few KiB; this leaves room for any honest one.
CONTROL_BYTES = 16 << 20
# Descriptors one message may bring, at most: the blocks of one call's outputs.
FDS_PER_MESSAGE = 64
_HEADER = struct.Struct("!QQQ32s")  # message length, offset, this frame's length, MAC

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


# Bytes per element at most of any dtype the channel carries: the reference's float64.
_WIDEST = max(torch.empty((), dtype=d).element_size() for d in _DTYPES.values())


def machine_memory_bytes() -> int:
    """The machine's physical memory: no honest message is larger (both ends hold it whole)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def outputs_bound(metas: Sequence[Mapping[str, Any]], copies: int) -> int:
    """The most bytes an honest message carries for outputs of these shapes (the reference's
    output metadata): `copies` sets of them (a batch's picked calls) at the widest dtype, plus
    CONTROL_BYTES. The one size bound of the channel; a larger message is tampering."""
    elements = sum(math.prod(int(s) for s in m.get("shape", ())) for m in metas if m.get("type") == "Tensor")
    return max(1, copies) * elements * _WIDEST + CONTROL_BYTES


def close_fds(fds: Sequence[int]) -> None:
    """Close descriptors this process no longer needs (one already closed is no error)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


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


def _chunks(parts: list[memoryview | bytes], size: int) -> Iterator[list[memoryview]]:
    """The parts' bytes in order, cut into pieces of `size` bytes (the last one shorter),
    each a list of views of the parts' own memory (no copy)."""
    piece: list[memoryview] = []
    room = size
    for part in parts:
        view = memoryview(part).cast("B")
        while len(view):
            take = view[:room]
            piece.append(take)
            view, room = view[len(take) :], room - len(take)
            if room == 0:
                yield piece
                piece, room = [], size
    if piece:
        yield piece


class Channel:
    """One end of a connected stream socket, with signed frames. `max_message_bytes`: the
    longest message it accepts (default: the machine's memory); `chunk_bytes`: the longest
    frame it sends, and accepts."""

    def __init__(
        self,
        sock: socket.socket,
        key: bytes | None = None,
        max_message_bytes: int | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ):
        self.sock = sock
        self.key = key
        self.max_message_bytes = machine_memory_bytes() if max_message_bytes is None else max_message_bytes
        self.chunk_bytes = chunk_bytes
        self.fd_room = 0  # descriptors one frame may bring (0: none are taken)
        self.fds: list[int] = []  # those received and not yet taken (`take_fds`)

    def _mac(self, previous: bytes, total: int, offset: int, pieces: Sequence[memoryview | bytearray]) -> bytes:
        mac = hmac.new(self.key or b"", previous, hashlib.sha256)
        mac.update(struct.pack("!QQQ", total, offset, sum(len(p) for p in pieces)))
        for piece in pieces:
            mac.update(piece)
        return mac.digest()

    def send(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        """Send one message; `fds` travel with its first frame's header (the peer takes them
        only where it has `fd_room`)."""
        parts = _encode_parts(message)
        total = sum(len(memoryview(p).cast("B")) for p in parts)
        offset, previous = 0, b""
        for pieces in _chunks(parts, self.chunk_bytes):
            length = sum(len(p) for p in pieces)
            previous = self._mac(previous, total, offset, pieces)
            header = _HEADER.pack(total, offset, length, previous)
            sent = socket.send_fds(self.sock, [header], list(fds)) if fds else 0
            fds = ()
            self.sock.sendall(header[sent:])
            for piece in pieces:
                self.sock.sendall(piece)
            offset += length

    def _read_into(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            count = self.sock.recv_into(view[got:], min(len(view) - got, 1 << 22))
            if not count:
                raise ChannelClosed("channel closed")
            got += count

    def _frame_header(self) -> tuple[int, int, int, bytes]:
        head = bytearray(_HEADER.size)
        got = 0
        if self.fd_room:  # descriptors come with a header's first byte
            data, fds, flags, _ = socket.recv_fds(self.sock, _HEADER.size, self.fd_room)
            self.fds.extend(fds)
            if not data:
                raise ChannelClosed("channel closed")
            if flags & socket.MSG_CTRUNC:
                raise ChannelTampered(f"more than {self.fd_room} descriptors sent with one frame")
            head[: len(data)], got = data, len(data)
        self._read_into(memoryview(head)[got:])
        total, offset, length, digest = _HEADER.unpack(head)
        return total, offset, length, digest

    def take_fds(self) -> list[int]:
        """The descriptors received so far (the caller owns them now)."""
        fds, self.fds = self.fds, []
        return fds

    def recv(self) -> dict[str, Any]:
        """Block until one message arrives (use socket timeouts or select to bound it)."""
        total, offset, length, digest = self._frame_header()
        if total > self.max_message_bytes:
            raise ChannelTampered(f"message of {total} bytes exceeds this channel's bound of {self.max_message_bytes}")
        payload = bytearray(total)
        view = memoryview(payload)
        got, previous = 0, b""
        while True:
            if offset != got or not 0 < length <= min(self.chunk_bytes, total - got):
                raise ChannelTampered(
                    f"frame of {length} bytes at offset {offset} does not continue a message of {total} bytes"
                    f" at {got} (frames of at most {self.chunk_bytes} bytes)"
                )
            piece = view[got : got + length]
            self._read_into(piece)
            previous, expected = digest, self._mac(previous, total, offset, [piece])
            if not hmac.compare_digest(digest, expected):
                raise ChannelTampered("frame signature does not match the run key")
            got += length
            if got == total:
                return decode(payload)
            again, offset, length, digest = self._frame_header()
            if again != total:
                raise ChannelTampered(f"a frame of a {again}-byte message inside one of {total} bytes")
