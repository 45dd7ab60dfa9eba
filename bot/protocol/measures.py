"""What the worker and the parent compute alike, so that a figure one side sends means what the
other reads: an output's digest (what a timed call commits to on the CPU) and its fingerprint
on a secret random vector (on CUDA), and the rows an output's error is scaled by (the
reference's `own_error` figures, the parent's bound).

The tensor methods and the hash are bound when this module is imported. In a worker that is
before any candidate code exists (bot.harness.shared imports it, and keeps its own reference
to each function), so a candidate that patches `torch.Tensor.contiguous` or `hashlib.sha256`
changes what it sees, not the digest. It can still rebind the harness's references (as
`cheat_commit_hook` does): what a worker commits to is its own word, which the parent checks
against what it computes here from the outputs it reads or is shown.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

_sha256 = hashlib.sha256
_detach = torch.Tensor.detach
_contiguous = torch.Tensor.contiguous
_reshape = torch.Tensor.reshape
_view = torch.Tensor.view
_to = torch.Tensor.to
_numel = torch.Tensor.numel
_narrow = torch.Tensor.narrow
_numpy = torch.Tensor.numpy
# A tensor's bytes go to the hash this many at a time: a whole-tensor copy to the host (and the
# bytes object made of it) was two more copies of a 6 GiB KernelBench input in host memory, in
# every worker hashing one.
HASH_CHUNK_BYTES = 64 << 20

MIN_ROW_WIDTH = 8  # narrower last dimensions ([T, 1] scales) are judged against the whole output
# Below float32's smallest normal (1.2e-38, bfloat16's too) a kernel that flushes subnormals to
# zero (GPU float32 arithmetic under -ftz, exp2 on a score 126 below the row's max) and one that
# keeps them differ by up to that much in an intermediate, times what multiplies it later (a
# value of up to 2^7, summed over the keys of an attention row). An error no larger than 2^-100
# (7.9e-31) is such a residue, never a kernel's mistake: the smallest scale an input row takes
# is 2^-20 (bot.harness.inputs). float64 keeps its own smallest normal.
UNDERFLOW_RESIDUE = 2.0**-100


def _digest_of(dtype: torch.dtype, shape: tuple[int, ...], parts: Iterable[Any]) -> str:
    """The digest of an output of `dtype` and `shape` whose dense bytes are `parts`, in order."""
    h = _sha256(f"{dtype}{shape}".encode())
    for part in parts:
        h.update(part)
    return h.hexdigest()[:24]


def digest(dtype: torch.dtype, shape: tuple[int, ...], data: bytes | bytearray | memoryview) -> str:
    """The digest of an output of `dtype` and `shape` whose dense bytes are `data`."""
    return _digest_of(dtype, shape, (data,))


def output_nbytes(meta: Mapping[str, Any]) -> int:
    """Bytes of an output as its metadata describes it (dtype and shape)."""
    return (
        math.prod(int(s) for s in meta["shape"]) * torch.empty((), dtype=getattr(torch, meta["dtype"])).element_size()
    )


# A GPU tensor's digest is summed where it lies, SUM_CHUNK_BYTES at a time: its bytes through
# the host's SHA-256 took seconds for a 6 GiB KernelBench input, twice a trial call.
SUM_CHUNK_BYTES = 4 << 20
# Each byte's weight in a chunk: distinct for every position (odd multipliers are bijective
# modulo 2^23, and a chunk has 2^22 bytes), and a byte times its weight fits an int32.
_WEIGHT_BITS = 23
_MULTIPLIERS = (2654435761, 2246822519)
_weights: dict[tuple[str, int], list[torch.Tensor]] = {}


def _chunk_weights(device: torch.device, n: int) -> list[torch.Tensor]:
    key = (str(device), n)
    if key not in _weights:
        j = torch.arange(n, dtype=torch.int64, device=device)
        mask = (1 << _WEIGHT_BITS) - 1
        _weights.clear()  # one chunk length per device at a time: bounded memory
        _weights[key] = [_to((j * m) & mask, torch.int32) for m in _MULTIPLIERS]
    return _weights[key]


def summed_digest(t: torch.Tensor) -> str:
    """A digest of a tensor's bytes, its dtype and its shape, computed with integer sums where
    the tensor lies: per chunk of SUM_CHUNK_BYTES, the sum of its bytes and two sums of each byte
    times a weight distinct for its position, then the SHA-256 of those figures in order. Exact
    integer arithmetic, so the same on any device. Any one changed byte changes the first sum;
    bytes moved within a chunk change the weighted ones; chunks moved change the order. Unlike
    SHA-256 it does not resist a forger, and needs not: a worker's digest is its own word, and
    what it guards (inputs left unchanged by an honest kernel, the reference's inputs matched)
    is the worker's own to break anyway."""
    raw = _view(_contiguous(_reshape(_detach(t), -1)), torch.uint8)
    total = _numel(raw)
    figures = []
    weights = _chunk_weights(raw.device, SUM_CHUNK_BYTES) if total else []
    for start in range(0, total, SUM_CHUNK_BYTES):
        chunk = _narrow(raw, 0, start, min(SUM_CHUNK_BYTES, total - start))
        n = _numel(chunk)
        figures.append(chunk.sum(dtype=torch.int64))
        figures.extend((chunk * w[:n]).sum(dtype=torch.int64) for w in weights)
    sums = _to(torch.stack(figures), "cpu") if figures else torch.empty(0, dtype=torch.int64)
    return _digest_of(t.dtype, tuple(t.shape), (b"summed", _numpy(sums).tobytes()))


def hash_tensor(t: torch.Tensor) -> str:
    """The digest of a tensor's values, its dtype and its shape: on the CPU `digest` of its dense
    bytes, read HASH_CHUNK_BYTES at a time; on a GPU `summed_digest`, computed there."""
    if t.device.type != "cpu":
        return summed_digest(t)
    raw = _view(_contiguous(_reshape(_detach(t), -1)), torch.uint8)
    total = _numel(raw)
    chunks = (
        _numpy(_to(_narrow(raw, 0, start, min(HASH_CHUNK_BYTES, total - start)), "cpu"))
        for start in range(0, total, HASH_CHUNK_BYTES)
    )
    return _digest_of(t.dtype, tuple(t.shape), chunks)


# An output's elements projected at a time: a chunk's float64 copy takes 256 MiB. Whole, a 6 GiB
# float32 output (KernelBench's 19_ReLU) took a float64 copy, its masked copy, the product and the
# vector, 12 GiB each: 30 GiB of a contender's GPU memory, and the reference ran out in it.
FP_CHUNK = 1 << 25


def fingerprint_weights(shape: tuple[int, ...], device: Any, seed: int) -> torch.Tensor:
    """The secret random vector an output of `shape` is projected on, drawn from `seed`: the
    same in the reference's worker and in the parent, which checks timed outputs it read from
    outside (bot.engine.timing.outside_checks). Flat, as long as the output up to FP_CHUNK
    elements: a longer output's chunks are each projected on it with a sign of their own
    (`fingerprint`)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return torch.randn(min(math.prod(shape), FP_CHUNK), generator=gen, dtype=torch.float64, device=device)


def fingerprint(out: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(projection on `w`, 2-norm, non-finite count) of one output, float64 on its device, the
    non-finite values counted and left out of the other two. An output longer than `w` is taken
    FP_CHUNK elements at a time, chunk k projected on `w` times the sign of w[k]: per element the
    weights stay N(0, 1), and an error in any chunk moves the projection. No host
    synchronisation: back-to-back timed calls stay back to back."""
    flat = _reshape(_detach(out), -1)
    length, size = _numel(flat), w.numel()
    if length <= size:
        x, nonfinite = _finite_part(flat)
        return torch.stack([(x * w[:length]).sum(), x.norm(), nonfinite])
    projection = torch.zeros((), dtype=torch.float64, device=w.device)
    squares, nonfinite = projection.clone(), projection.clone()
    for k, start in enumerate(range(0, length, size)):
        x, uncounted = _finite_part(_narrow(flat, 0, start, min(size, length - start)))
        nonfinite += uncounted
        projection += torch.sign(w[k]) * (x * w[: x.numel()]).sum()
        squares += (x * x).sum()
    return torch.stack([projection, squares.sqrt(), nonfinite])


def _finite_part(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`values` in float64 with their non-finite elements zeroed, and how many those were."""
    x = _to(values, torch.float64)
    finite = torch.isfinite(x)
    x = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x, _to((~finite).sum(), torch.float64)


def error_floor(dtype: torch.dtype) -> float:
    """The largest error in an output of `dtype` that is underflow residue, not an error."""
    return UNDERFLOW_RESIDUE if torch.finfo(dtype).bits <= 32 else 0.0


def row_width(shape: Sequence[int]) -> int:
    """The width of the rows an output's elementwise bound is scaled by; 0: the whole output.
    A row is the last dimension, as in the "rows" inputs: a row of 1e-6 beside rows of 128 is
    judged at its own scale, where a bound scaled by the whole output's max would pass anything
    in it (an RMSNorm without eps is 1000x off there). Rows narrower than MIN_ROW_WIDTH are not:
    one element near zero by cancellation would be judged against itself."""
    return shape[-1] if len(shape) >= 2 and shape[-1] >= MIN_ROW_WIDTH else 0


__all__ = [
    "FP_CHUNK",
    "MIN_ROW_WIDTH",
    "UNDERFLOW_RESIDUE",
    "digest",
    "error_floor",
    "fingerprint",
    "fingerprint_weights",
    "hash_tensor",
    "output_nbytes",
    "summed_digest",
    "row_width",
]
