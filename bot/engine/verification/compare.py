"""Outputs against the reference's, as pure functions to `CheckResult`s, by the rule each output
is held to (bot.engine.verification.tolerance): the full values of a checked call (`compare_values`), the
fingerprints of a timed call (`compare_fingerprints`) and what a timed call committed to inside
the parent's window against what it revealed after (`check_commitment`, `compare_outputs`).

Nothing here runs candidate code; the reference comes from a different process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from bot.core.domain import CheckResult
from bot.engine.verification.tolerance import AllClose, Given, Rule, Tolerance, rule_of, rules_of
from bot.protocol.measures import error_floor, hash_tensor, row_width

FINGERPRINT_SIGMAS = 6.0  # a projection on a random Gaussian vector: 6 sigma is never noise
# A timed call's outputs that a later call of the same batch overwrote: said plainly, as it is
# no cheat but a contract the harness holds every call to.
REUSED_OUTPUT = (
    "the output is valid only until the next call (CUDA graph trees reuse output memory: "
    "torch.compile modes 'reduce-overhead' and 'max-autotune'); each call's outputs must stay its own"
)


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
    (bot.engine.verification.tolerance), chunk by chunk of whole rows (CHUNK_ELEMENTS); evidence
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


def _norm_bound(rule: Rule | None, ref_norm: float) -> float:
    """How far an honest output's norm (and, in units of it, its projection) may be from the
    reference's: |out - ref| bounded by the rule."""
    if isinstance(rule, AllClose):  # |e_i| <= atol + rtol |out_i|, |out| <= |ref| + |e|
        return (rule.norm_abs + rule.rtol * ref_norm) / (1 - rule.rtol) + 1e-9
    return (rule.norm_rel if rule else 1e-12) * ref_norm + 1e-9


def compare_fingerprints(
    reference: Sequence[Sequence[float]],
    got: Sequence[Sequence[float]],
    dtypes: Sequence[str],
    given: Sequence[Rule | None] | Mapping[str, float] | None,
    label: str,
) -> CheckResult:
    """A call made while timing against the reference, through random projections.

    For honest errors e, <w, e> ~ N(0, |e|^2) with |e| <= norm_rel*|ref|, and
    | |out| - |ref| | <= |e| exactly; a stale or skipped result misses both by ~|ref|.
    """
    name = "timed-call outputs"
    if len(reference) != len(got):
        return CheckResult(name, False, f"{label}: {len(got)} outputs, expected {len(reference)}")
    for i, ((rp, rn, rnf), (gp, gn, gnf), rule) in enumerate(zip(reference, got, rules_of(dtypes, given))):
        bound = _norm_bound(rule, rn)
        if rnf != gnf:
            return CheckResult(
                name, False, f"{label}: output {i} has {int(gnf)} non-finite values, reference {int(rnf)}"
            )
        if abs(gn - rn) > bound or abs(gp - rp) > FINGERPRINT_SIGMAS * bound:
            return CheckResult(
                name,
                False,
                f"{label}: output {i} does not match the reference for "
                f"this call's inputs (norm {gn:.6g} vs {rn:.6g}, projection {gp:.6g} vs "
                f"{rp:.6g}): a cached, stale or skipped result?",
            )
    return CheckResult(name, True, details={"commitment": "fingerprint"})


def check_commitment(
    committed: Sequence[Any],
    revealed: Sequence[Any],
    reference_prints: Sequence[Any],
    dtypes: Sequence[str],
    given: Sequence[Rule | None] | Mapping[str, float] | None,
    label: str,
    later: Sequence[Sequence[Any]] = (),
) -> CheckResult:
    """What a timed call committed to inside the parent's window binds what it reveals after:
    on the CPU each output's digest must be the digest of the output revealed; on CUDA the
    committed fingerprints must match the reference's (compare_fingerprints). `later`: the
    commitments of the batch's later calls; a revealed output that one of them committed to was
    overwritten by that call (REUSED_OUTPUT)."""
    name = "timed-call outputs"
    if committed and all(isinstance(c, str) for c in committed):  # digests: the revealed must match
        digests = [hash_tensor(t) if isinstance(t, torch.Tensor) else None for t in revealed]
        if list(committed) == digests:
            return CheckResult(name, True, details={"commitment": "digest"})
        if any(list(c) == digests for c in later):
            return CheckResult(
                name, False, f"{label}: its outputs changed after a later call of the batch: {REUSED_OUTPUT}"
            )
        return CheckResult(
            name,
            False,
            f"{label}: the outputs revealed after the "
            "batch are not those the call committed to inside it: computed after "
            "the timed window?",
        )
    return compare_fingerprints(reference_prints, committed, dtypes, given, label)


def compare_outputs(
    expected: Sequence[torch.Tensor],
    got: Sequence[Any],
    dtypes: Sequence[str],
    given: Sequence[Rule | None] | Mapping[str, float] | None,
    label: str,
    committed: CheckResult | None = None,
) -> list[CheckResult]:
    """A timed call's full outputs, as the parent picked them after the batch, against the
    reference's for the same inputs. `committed`: the call's commitment check; where its
    fingerprint, taken as the call returned, matched the reference and the outputs revealed
    after the batch do not, they changed in between (REUSED_OUTPUT)."""
    name = "timed-call outputs"
    if len(expected) != len(got):
        return [CheckResult(name, False, f"{label}: {len(got)} outputs, expected {len(expected)}")]
    changed = committed is not None and committed.passed and committed.details.get("commitment") == "fingerprint"
    results = []
    for i, (e, g, rule) in enumerate(zip(expected, got, rules_of(dtypes, given))):
        if not isinstance(g, torch.Tensor) or list(g.shape) != list(e.shape):
            return [CheckResult(name, False, f"{label}: output {i} is not a tensor of shape {list(e.shape)}")]
        result = compare_values(e, g, dtypes[i], rule, label if len(dtypes) == 1 else f"{label}, output {i}")
        evidence = result.evidence
        if changed and not result.passed:
            evidence = (
                f"{label}: its output matched the reference when the call returned (its fingerprint) "
                f"and not after the batch: {REUSED_OUTPUT} ({evidence})"
            )
        results.append(CheckResult(name, result.passed, evidence, result.details))
    return results
