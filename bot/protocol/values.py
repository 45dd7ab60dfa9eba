"""One output's values against the reference's, by the rule it is held to (bot.core.tolerance):
`compare_values`, a pure function to a `CheckResult`. Defined once for the bot's process and
the trusted reference, which judges large outputs where they lie (bot.harness.judge).

Nothing here runs candidate code; the reference comes from a different process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch

from bot.core.domain import CheckResult
from bot.core.tolerance import AllClose, Given, Tolerance, rule_of
from bot.protocol.measures import error_floor, row_width


def _index(flat_index: int, shape: Sequence[int]) -> tuple[int, ...]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim if dim else 0)
        flat_index //= max(dim, 1)
    return tuple(reversed(idx))


# Elements compared at once: the comparison's work buffers (a few of them, in float64 at most)
# stay near 32 MiB each whatever the output's size, where whole-output buffers of a 6 GiB
# float32 output (KernelBench's 19_ReLU) were 12 GiB apiece. Chunks hold whole rows, so each
# row's scale is its own; a row wider than this is one chunk.
CHUNK_ELEMENTS = 1 << 22
NONFINITE = (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf))
# Per chunk: its first element's index, the reference and the output in the working dtype, where
# the reference is finite, and whether both are finite throughout.
Chunks = Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, bool]]


def _spans(numel: int, width: int) -> list[tuple[int, int]]:
    """[start, end) of each chunk of a flattened output: whole rows of `width`, at least one."""
    step = max(CHUNK_ELEMENTS // width, 1) * width if width else CHUNK_ELEMENTS
    return [(a, min(a + step, numel)) for a in range(0, numel, step)] or [(0, 0)]


def _bound_in_place(
    allowed: torch.Tensor,
    ref: torch.Tensor,
    finite: torch.Tensor,
    width: int,
    tol: Tolerance,
    dtype: torch.dtype,
    whole: float,
) -> Callable[[int], float]:
    """Turn `allowed` (|ref| of the compared elements of a chunk of whole rows) into each
    element's bound max(elem_rtol * |ref| + elem_atol_rel * max(max |ref| of its row (or
    `whole`, the output's, where it has no rows), the dtype's smallest normal), its underflow
    residue), in place (no buffer the chunk's size where all values are finite); returns the
    scale of the j-th compared element, for the evidence."""
    floor, residue = torch.finfo(dtype).tiny, error_floor(dtype)
    if not width or not allowed.numel():
        scale = max(whole, floor)
        allowed.mul_(tol.elem_rtol).add_(tol.elem_atol_rel * scale).clamp_min_(residue)
        return lambda j: scale
    if allowed.numel() == ref.numel():  # every reference value finite: no mask to apply
        rows = allowed.view(-1, width).amax(1).clamp_min_(floor)
        # Scaled apart, not through `alpha`: a rule held to a problem's own error can ask for a
        # multiple past the dtype's range (4_Conv2d_Mish_Mish: 8e46), which is a bound of inf,
        # where `alpha` refuses to convert it.
        allowed.mul_(tol.elem_rtol).view(-1, width).add_(rows[:, None] * tol.elem_atol_rel)
        allowed.clamp_min_(residue)
        return lambda j: float(rows[j // width])
    full = torch.where(finite, ref.abs(), torch.zeros((), dtype=ref.dtype))
    per = full.view(-1, width).amax(1).clamp_min_(floor).repeat_interleave(width)[finite]
    allowed.mul_(tol.elem_rtol).add_(per * tol.elem_atol_rel).clamp_min_(residue)
    return lambda j: float(per[j])


def compare_values(expected: torch.Tensor, got: torch.Tensor, dtype: str, given: Given, label: str) -> CheckResult:
    """Values of one output against the reference's, by the rule `given` resolves to
    (bot.core.tolerance), chunk by chunk of whole rows (CHUNK_ELEMENTS); evidence
    names the worst element."""
    name = "values"
    tol = rule_of(dtype, given)
    shape = list(got.shape)
    ref_all, out_all = expected.reshape(-1), got.reshape(-1)
    spans = _spans(ref_all.numel(), row_width(shape))
    if tol is None:
        return _exact(ref_all, out_all, spans, shape, label)
    if isinstance(tol, AllClose):  # KernelBench compares in the output's own dtype
        work = got.dtype
    else:
        # float32 arithmetic where the tolerance is far above its rounding (half-precision
        # outputs): half the memory traffic of float64 on outputs of tens of millions of elements.
        work = torch.float32 if min(tol.norm_rel, tol.elem_rtol) >= 1e-4 else torch.float64

    kept: list = []  # an output of one chunk is converted once for all the passes below

    def chunks() -> Chunks:
        if kept:
            yield from kept
            return
        for a, b in spans:
            ref, out = ref_all[a:b].to(work), out_all[a:b].to(work)
            finite = torch.isfinite(ref)
            chunk = (a, ref, out, finite, bool(finite.all()) and bool(torch.isfinite(out).all()))
            if len(spans) == 1:
                kept.append(chunk)
            yield chunk

    if isinstance(tol, AllClose):
        return _allclose(chunks(), tol, shape, ref_all.numel(), label)
    width = row_width(shape)
    whole = 0.0  # the output's max |ref| over finite elements, where it has no rows
    if not width:
        whole = max((float(r[f].abs().max()) for _, r, _, f, _ in chunks() if bool(f.any())), default=0.0)
    diff_sq = ref_sq = max_abs = 0.0
    compared = 0
    worst, worst_excess = "", 0.0  # the element furthest past its bound (the first of equals)
    scope = "its row's" if width else "the output's"
    nonfinite = _Nonfinite()
    for a, ref, out, finite, all_finite in chunks():
        nonfinite.add(a, ref, out, all_finite, shape)
        ref_f, out_f = (ref, out) if all_finite else (ref[finite], out[finite])
        diff = out_f - ref_f
        diff_sq += float(diff.norm()) ** 2
        ref_sq += float(ref_f.norm()) ** 2
        compared += ref_f.numel()
        diff.abs_()
        if not diff.numel():
            continue
        max_abs = max(max_abs, float(diff.max()))
        allowed = ref_f.abs()
        scale_of = _bound_in_place(allowed, ref, finite, width, tol, getattr(torch, dtype), whole)
        excess = diff - allowed
        j = int(excess.argmax())
        if float(excess[j]) > worst_excess:
            i = j if all_finite else int(finite.nonzero()[j])
            worst_excess = float(excess[j])
            worst = (
                f"element {_index(a + i, shape)} got {out[i].item():.6g}, expected {ref[i].item():.6g} "
                f"(abs err {diff[j].item():.3g} > allowed {allowed[j].item():.3g}, {scope} max |ref| "
                f"{scale_of(j):.3g})"
            )
    # Scales are at least the dtype's smallest normal: an all-zero reference (the "zeros" inputs)
    # is matched within elem_atol_rel of it, for float16 6.1e-8, one step of its subnormals.
    tiny = torch.finfo(getattr(torch, dtype)).tiny
    norm_err = math.sqrt(diff_sq) / max(math.sqrt(ref_sq), tiny * math.sqrt(max(compared, 1)))
    details = {"max_abs_err": max_abs, "norm_rel_err": norm_err, "tolerance": tol.__dict__}
    differ = nonfinite.failure(label)  # before any figure: NaNs in the wrong places void them
    if differ is not None:
        return differ
    if worst:
        return CheckResult(
            name,
            False,
            f"{label}: {worst}; max abs err {max_abs:.3g}, normwise rel err {norm_err:.3g}",
            details,
        )
    if norm_err > tol.norm_rel:
        return CheckResult(
            name,
            False,
            f"{label}: normwise rel err {norm_err:.3g} > {tol.norm_rel:g} "
            f"(max abs err {max_abs:.3g}); lower precision than the "
            f"{dtype} output allows?",
            details,
        )
    return CheckResult(name, True, details=details)


def _exact(
    ref_all: torch.Tensor, out_all: torch.Tensor, spans: list[tuple[int, int]], shape: list[int], label: str
) -> CheckResult:
    """Bit for bit (integer and boolean outputs, or a rule that allows no error)."""
    count, first = 0, ""
    for a, b in spans:
        ref, out = ref_all[a:b].to(torch.float64), out_all[a:b].to(torch.float64)
        bad = (ref != out).nonzero()
        if bad.numel() and not first:
            i = int(bad[0])
            first = f"first at {_index(a + i, shape)}: got {out[i].item()}, expected {ref[i].item()}"
        count += bad.numel()
    if count:
        return CheckResult(
            "values", False, f"{label}: {count} of {ref_all.numel()} elements differ; {first}", {"mismatches": count}
        )
    return CheckResult("values", True, details={"max_abs_err": 0.0, "norm_rel_err": 0.0})


class _Nonfinite:
    """Where the reference is NaN, +Inf or -Inf the output must be too, and nowhere else: tallied
    chunk by chunk; the first kind that differs anywhere fails, with its count and first position."""

    def __init__(self) -> None:
        self.count = {kind: 0 for kind, _ in NONFINITE}
        self.first: dict[str, str] = {}

    def add(self, a: int, ref: torch.Tensor, out: torch.Tensor, all_finite: bool, shape: list[int]) -> None:
        if all_finite:
            return
        for kind, fn in NONFINITE:
            mismatch = (fn(ref) != fn(out)).nonzero()
            if mismatch.numel() and kind not in self.first:
                i = int(mismatch[0])
                self.first[kind] = f"first at {_index(a + i, shape)}: got {out[i].item()}, expected {ref[i].item()}"
            self.count[kind] += mismatch.numel()

    def failure(self, label: str) -> CheckResult | None:
        for kind, _ in NONFINITE:
            if self.count[kind]:
                return CheckResult(
                    "values",
                    False,
                    f"{label}: {kind} positions differ at {self.count[kind]} elements; {self.first[kind]}",
                )
        return None


def _allclose(chunks: Chunks, rule: AllClose, shape: list[int], numel: int, label: str) -> CheckResult:
    """KernelBench's torch.allclose(reference, out, atol, rtol), its argument order kept (rtol
    scales |out|), in the output's dtype. Non-finite positions must match first: there
    KernelBench's equal_nan=False would fail the problem's own reference too."""
    diff_sq = ref_sq = max_abs = 0.0
    far_count, first, tiny = 0, "", 0.0
    nonfinite = _Nonfinite()
    for a, ref, out, finite, all_finite in chunks:
        nonfinite.add(a, ref, out, all_finite, shape)
        close = torch.isclose(ref, out, rtol=rule.rtol, atol=rule.atol, equal_nan=True)
        wide = torch.promote_types(ref.dtype, torch.float32)
        tiny = torch.finfo(wide).tiny
        zero = torch.zeros((), dtype=wide)
        diff = torch.where(finite, out.to(wide) - ref.to(wide), zero)
        ref_sq += float(torch.where(finite, ref.to(wide), zero).norm()) ** 2
        diff_sq += float(diff.norm()) ** 2
        diff.abs_()
        max_abs = max(max_abs, float(diff.max()) if diff.numel() else 0.0)
        far = (~close).nonzero()
        if far.numel() and not first:
            i = int(far[0])
            first = (
                f"element {_index(a + i, shape)} got {out[i].item():.6g}, expected {ref[i].item():.6g} "
                f"(abs err {diff[i].item():.3g} > atol {rule.atol:g} + rtol {rule.rtol:g} x |got|, KernelBench's "
                "torch.allclose)"
            )
        far_count += far.numel()
    norm_err = math.sqrt(diff_sq) / max(math.sqrt(ref_sq), tiny)
    details = {"max_abs_err": max_abs, "norm_rel_err": norm_err, "tolerance": {"atol": rule.atol, "rtol": rule.rtol}}
    differ = nonfinite.failure(label)
    if differ is not None:
        return differ
    if far_count:
        return CheckResult(
            "values",
            False,
            f"{label}: {first}; {far_count} of {numel} elements outside, max abs err {max_abs:.3g}",
            details,
        )
    return CheckResult("values", True, details=details)
