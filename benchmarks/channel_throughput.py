"""Throughput of the worker channel (bot/protocol/channel.py) for large tensors: signed frames of a
128 MB float32 tensor over a socket pair, one thread writing, one reading.

    PYTHONPATH=. python benchmarks/channel_throughput.py [--frames 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time

import torch

from bot.protocol.channel import Channel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=20)
    args = parser.parse_args()
    a, b = socket.socketpair()
    key = os.urandom(32)
    writer, reader = Channel(a, key), Channel(b, key)
    tensor = torch.randn(32 << 20)  # 128 MB

    def send() -> None:
        for _ in range(args.frames):
            writer.send({"ok": True, "outputs": [tensor]})

    thread = threading.Thread(target=send)
    thread.start()
    started = time.perf_counter()
    for _ in range(args.frames):
        message = reader.recv()
    elapsed = time.perf_counter() - started
    thread.join()
    assert torch.equal(message["outputs"][0], tensor)
    print(f"{args.frames * 128 / elapsed:.0f} MB/s")


if __name__ == "__main__":
    main()
