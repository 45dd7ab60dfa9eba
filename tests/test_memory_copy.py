"""Bytes copied between two processes from outside both (bot.sandbox.memory): what the parent
uses to fill a contender's staged inputs while it is frozen."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bot.sandbox import memory

# A process holding a buffer (its bytes read as hex from the first line of stdin): prints its
# address, then on each further line prints the buffer's bytes, until stdin closes.
HOLDER = r"""
import ctypes, sys
data = bytes.fromhex(sys.stdin.readline())
buf = ctypes.create_string_buffer(data, len(data))
print(ctypes.addressof(buf), flush=True)
for _ in sys.stdin:
    print(buf.raw.hex(), flush=True)
"""

pytestmark = pytest.mark.skipif(not memory.supported(), reason="no process_vm_readv on this system")


def _holder(data: bytes) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdin.write(data.hex() + "\n")
    proc.stdin.flush()
    return proc, int(proc.stdout.readline())


def _contents(proc: subprocess.Popen) -> bytes:
    proc.stdin.write("\n")
    proc.stdin.flush()
    return bytes.fromhex(proc.stdout.readline().strip())


def test_bytes_move_from_one_process_into_another():
    size = memory.CHUNK_BYTES + 4099  # more than one pass through the parent's buffer
    source = bytes(range(256)) * (size // 256) + bytes(size % 256)
    src, src_addr = _holder(source)
    dst, dst_addr = _holder(bytes(size))
    try:
        copied = memory.copy(src.pid, dst.pid, [(src_addr, dst_addr + 1, size - 1)])
        assert copied == size - 1
        after = _contents(dst)
        assert after[0] == 0 and after[1:] == source[:-1]
        assert _contents(src) == source  # the source is only read
    finally:
        for proc in (src, dst):
            proc.stdin.close()
            proc.wait(10)


def test_an_address_the_process_does_not_have_is_refused():
    src, src_addr = _holder(b"x" * 64)
    dst, _ = _holder(b"y" * 64)
    try:
        with pytest.raises(memory.MemoryCopyError):
            memory.copy(src.pid, dst.pid, [(src_addr, 8, 64)])  # page zero is never mapped
        with pytest.raises(memory.MemoryCopyError):
            memory.copy(src.pid, dst.pid, [(src_addr, 0, 64)])
    finally:
        for proc in (src, dst):
            proc.stdin.close()
            proc.wait(10)


def test_a_process_that_is_gone_is_a_permission_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    with pytest.raises(PermissionError):
        memory.copy(proc.pid, proc.pid, [(4096, 4096, 8)])


def test_bytes_are_read_from_outside_a_process():
    data = bytes(range(256)) * 40
    proc, addr = _holder(data)
    try:
        got = memory.read(proc.pid, [(addr + 3, 1000), (addr, 0), (addr + 5000, 5240)])
        assert [bytes(g) for g in got] == [data[3:1003], b"", data[5000:]]
        with pytest.raises(memory.MemoryCopyError):
            memory.read(proc.pid, [(8, 64)])  # the first page is never mapped
        with pytest.raises(memory.MemoryCopyError):
            memory.read(proc.pid, [(addr, -1)])
    finally:
        proc.stdin.close()
        proc.wait(10)
