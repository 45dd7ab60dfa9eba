"""Bytes read from one process and written into another from outside both (bot.sandbox.memory):
how the parent fills a contender's staged inputs while it is frozen, and reads them back."""

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
    size = (16 << 20) + 4099
    source = bytes(range(256)) * (size // 256) + bytes(size % 256)
    src, src_addr = _holder(source)
    dst, dst_addr = _holder(bytes(size))
    try:
        data = memory.read(src.pid, [(src_addr, size - 1), (src_addr, 10)])
        assert memory.write(dst.pid, [(dst_addr + 1, data[0]), (dst_addr, bytearray())]) == size - 1
        after = _contents(dst)
        assert after[0] == 0 and after[1:] == source[:-1]
        assert _contents(src) == source  # the source is only read
    finally:
        for proc in (src, dst):
            proc.stdin.close()
            proc.wait(10)


def test_more_regions_than_one_call_takes_are_written_in_order():
    count = memory.IOV_MAX + 7
    dst, addr = _holder(bytes(4 * count))
    try:
        regions = [(addr + 4 * k, bytearray(k.to_bytes(4, "little"))) for k in range(count)]
        assert memory.write(dst.pid, regions) == 4 * count
        after = _contents(dst)
        assert [int.from_bytes(after[4 * k : 4 * k + 4], "little") for k in range(count)] == list(range(count))
    finally:
        dst.stdin.close()
        dst.wait(10)


def test_an_address_the_process_does_not_have_is_refused():
    dst, addr = _holder(b"y" * 64)
    try:
        with pytest.raises(memory.MemoryCopyError, match="0x8"):
            memory.write(dst.pid, [(addr, bytearray(b"z" * 8)), (8, bytearray(64))])  # page zero is never mapped
        with pytest.raises(memory.MemoryCopyError):
            memory.write(dst.pid, [(0, bytearray(64))])
        assert _contents(dst) == b"z" * 8 + b"y" * 56  # the good region before the bad one is written
    finally:
        dst.stdin.close()
        dst.wait(10)


def test_a_process_that_is_gone_is_a_permission_error():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    with pytest.raises(PermissionError):
        memory.write(proc.pid, [(4096, bytearray(8))])
    with pytest.raises(PermissionError):
        memory.read(proc.pid, [(4096, 8)])


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
