"""Outputs against the reference's, as pure functions to `CheckResult`s: the tolerance of each
output dtype, the full values of a checked call (`compare_values`), the fingerprints of a timed
call (`compare_fingerprints`) and what a timed call committed to inside the parent's window
against what it revealed after (`check_commitment`, `compare_outputs`).

Nothing here runs candidate code; the reference comes from a different process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bot.core.domain import CheckResult
from bot.harness.shared import hash_tensor


@dataclass(frozen=True)
class Tolerance:
    """Normwise ||out-ref||/||ref|| bound plus an elementwise bound
    |out-ref| <= elem_atol_rel * max|ref| + elem_rtol * |ref| (scale-free, so the
    'large' input distribution does not need its own numbers)."""

    norm_rel: float
    elem_rtol: float
    elem_atol_rel: float


# Chosen so that an honest kernel in the output's precision passes and a kernel computing
# a float32 problem in bf16 (~3e-3), fp16 (~5e-4) or TF32 (~3e-4) does not.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-9, 1e-7, 1e-9),
    "float32": Tolerance(1e-5, 1e-4, 1e-5),
    "float16": Tolerance(1e-3, 2e-3, 1e-3),
    "bfloat16": Tolerance(1e-2, 2e-2, 1e-2),
    "float8_e4m3fn": Tolerance(7e-2, 0.13, 2e-2),
    "float8_e5m2": Tolerance(1.4e-1, 0.26, 4e-2),
}
FINGERPRINT_SIGMAS = 6.0  # a projection on a random Gaussian vector: 6 sigma is never noise


def tolerance_for(dtype: str, overrides: Mapping[str, float] | None = None) -> Tolerance | None:
    """None means exact comparison (integer and boolean outputs)."""
    base = DEFAULT_TOLERANCES.get(dtype)
    if base is None:
        return None
    if overrides:
        return Tolerance(**{**base.__dict__, **{k: float(v) for k, v in overrides.items()}})
    return base


def _index(flat_index: int, shape: Sequence[int]) -> tuple[int, ...]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_index % dim if dim else 0)
        flat_index //= max(dim, 1)
    return tuple(reversed(idx))


MIN_ROW_WIDTH = 8  # narrower last dimensions ([T, 1] scales) are judged against the whole output


def _row_width(shape: Sequence[int]) -> int:
    """The width of the rows an output's elementwise bound is scaled by; 0: the whole output.
    A row is the last dimension, as in the "rows" inputs: a row of 1e-6 beside rows of 128 is
    judged at its own scale, where a bound scaled by the whole output's max would pass anything
    in it (an RMSNorm without eps is 1000x off there). Rows narrower than MIN_ROW_WIDTH are not:
    one element near zero by cancellation would be judged against itself."""
    return shape[-1] if len(shape) >= 2 and shape[-1] >= MIN_ROW_WIDTH else 0


def _bound_in_place(
    allowed: torch.Tensor,
    ref: torch.Tensor,
    finite: torch.Tensor,
    all_finite: bool,
    shape: Sequence[int],
    tol: Tolerance,
    floor: float,
) -> Callable[[int], float]:
    """Turn `allowed` (|ref| of the compared elements) into each element's bound
    elem_rtol * |ref| + elem_atol_rel * max(max |ref| of its row (or the output), floor), in
    place (no buffer the output's size where all values are finite); returns the scale of the
    j-th compared element, for the evidence."""
    width = _row_width(shape) if allowed.numel() else 0
    if not width:
        whole = max(float(allowed.max()) if allowed.numel() else 0.0, floor)
        allowed.mul_(tol.elem_rtol).add_(tol.elem_atol_rel * whole)
        return lambda j: whole
    if all_finite:
        rows = allowed.view(-1, width).amax(1).clamp_min_(floor)
        allowed.mul_(tol.elem_rtol).view(-1, width).add_(rows[:, None], alpha=tol.elem_atol_rel)
        return lambda j: float(rows[j // width])
    full = torch.where(finite, ref.abs(), torch.zeros((), dtype=ref.dtype))
    per = full.view(-1, width).amax(1).clamp_min_(floor).repeat_interleave(width)[finite]
    allowed.mul_(tol.elem_rtol).add_(per, alpha=tol.elem_atol_rel)
    return lambda j: float(per[j])


def compare_values(
    expected: torch.Tensor, got: torch.Tensor, dtype: str, overrides: Mapping[str, float] | None, label: str
) -> CheckResult:
    """Values of one output against the upcast reference; evidence names the worst element."""
    name = "values"
    tol = tolerance_for(dtype, overrides)
    shape = list(got.shape)
    if tol is None:
        ref = expected.to(torch.float64).reshape(-1)
        out = got.to(torch.float64).reshape(-1)
        bad = (ref != out).nonzero()
        if bad.numel():
            i = int(bad[0])
            return CheckResult(
                name,
                False,
                f"{label}: {bad.numel()} of {ref.numel()} elements differ; "
                f"first at {_index(i, shape)}: got {out[i].item()}, expected {ref[i].item()}",
                {"mismatches": int(bad.numel())},
            )
        return CheckResult(name, True, details={"max_abs_err": 0.0, "norm_rel_err": 0.0})
    # float32 arithmetic where the tolerance is far above its rounding (half-precision outputs):
    # half the memory traffic of float64 on outputs of tens of millions of elements.
    work = torch.float32 if min(tol.norm_rel, tol.elem_rtol) >= 1e-4 else torch.float64
    ref = expected.reshape(-1).to(work)
    out = got.reshape(-1).to(work)
    finite = torch.isfinite(ref)
    all_finite = bool(finite.all()) and bool(torch.isfinite(out).all())
    if not all_finite:
        for kind, fn in (("NaN", torch.isnan), ("+Inf", torch.isposinf), ("-Inf", torch.isneginf)):
            mismatch = (fn(ref) != fn(out)).nonzero()
            if mismatch.numel():
                i = int(mismatch[0])
                return CheckResult(
                    name,
                    False,
                    f"{label}: {kind} positions differ at {mismatch.numel()} "
                    f"elements; first at {_index(i, shape)}: got {out[i].item()}, "
                    f"expected {ref[i].item()}",
                )
    ref_f, out_f = (ref, out) if all_finite else (ref[finite], out[finite])
    diff = out_f - ref_f
    ref_norm = float(ref_f.norm())
    # Scales are at least the dtype's smallest normal: an all-zero reference (the "zeros" inputs)
    # is matched within elem_atol_rel of it, for float16 6.1e-8, one step of its subnormals.
    tiny = torch.finfo(getattr(torch, dtype)).tiny
    norm_err = float(diff.norm()) / max(ref_norm, tiny * math.sqrt(max(ref_f.numel(), 1)))
    diff.abs_()
    allowed = ref_f.abs()
    scale_of = _bound_in_place(allowed, ref, finite, all_finite, shape, tol, tiny)
    details = {
        "max_abs_err": float(diff.max()) if diff.numel() else 0.0,
        "norm_rel_err": norm_err,
        "tolerance": tol.__dict__,
    }
    excess = diff - allowed
    if diff.numel() and float(excess.max()) > 0:
        j = int(excess.argmax())
        i = j if all_finite else int(finite.nonzero()[j])
        scope = "its row's" if _row_width(shape) else "the output's"
        return CheckResult(
            name,
            False,
            f"{label}: element {_index(i, shape)} got {out[i].item():.6g}, "
            f"expected {ref[i].item():.6g} (abs err {diff[j].item():.3g} > allowed "
            f"{allowed[j].item():.3g}, {scope} max |ref| "
            f"{scale_of(j):.3g}); max abs err "
            f"{details['max_abs_err']:.3g}, normwise rel err {norm_err:.3g}",
            details,
        )
    if norm_err > tol.norm_rel:
        return CheckResult(
            name,
            False,
            f"{label}: normwise rel err {norm_err:.3g} > {tol.norm_rel:g} "
            f"(max abs err {details['max_abs_err']:.3g}); lower precision than the "
            f"{dtype} output allows?",
            details,
        )
    return CheckResult(name, True, details=details)


def compare_fingerprints(
    reference: Sequence[Sequence[float]],
    got: Sequence[Sequence[float]],
    dtypes: Sequence[str],
    overrides: Mapping[str, float] | None,
    label: str,
) -> CheckResult:
    """A call made while timing against the reference, through random projections.

    For honest errors e, <w, e> ~ N(0, |e|^2) with |e| <= norm_rel*|ref|, and
    | |out| - |ref| | <= |e| exactly; a stale or skipped result misses both by ~|ref|.
    """
    name = "timed-call outputs"
    if len(reference) != len(got):
        return CheckResult(name, False, f"{label}: {len(got)} outputs, expected {len(reference)}")
    for i, ((rp, rn, rnf), (gp, gn, gnf), dtype) in enumerate(zip(reference, got, dtypes)):
        tol = tolerance_for(dtype, overrides)
        bound = (tol.norm_rel if tol else 1e-12) * rn + 1e-9
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
    return CheckResult(name, True)


def check_commitment(
    committed: Sequence[Any],
    revealed: Sequence[Any],
    reference_prints: Sequence[Any],
    dtypes: Sequence[str],
    overrides: Mapping[str, float] | None,
    label: str,
) -> CheckResult:
    """What a timed call committed to inside the parent's window binds what it reveals after:
    on the CPU each output's digest must be the digest of the output revealed; on CUDA the
    committed fingerprints must match the reference's (compare_fingerprints)."""
    if committed and all(isinstance(c, str) for c in committed):  # digests: the revealed must match
        digests = [hash_tensor(t) if isinstance(t, torch.Tensor) else None for t in revealed]
        if list(committed) != digests:
            return CheckResult(
                "timed-call outputs",
                False,
                f"{label}: the outputs revealed after the "
                "batch are not those the call committed to inside it: computed after "
                "the timed window?",
            )
        return CheckResult("timed-call outputs", True)
    return compare_fingerprints(reference_prints, committed, dtypes, overrides, label)


def compare_outputs(
    expected: Sequence[torch.Tensor],
    got: Sequence[Any],
    dtypes: Sequence[str],
    overrides: Mapping[str, float] | None,
    label: str,
) -> list[CheckResult]:
    """A timed call's full outputs, as the parent picked them after the batch, against the
    reference's for the same inputs."""
    name = "timed-call outputs"
    if len(expected) != len(got):
        return [CheckResult(name, False, f"{label}: {len(got)} outputs, expected {len(expected)}")]
    results = []
    for i, (e, g, dtype) in enumerate(zip(expected, got, dtypes)):
        if not isinstance(g, torch.Tensor) or list(g.shape) != list(e.shape):
            return [CheckResult(name, False, f"{label}: output {i} is not a tensor of shape {list(e.shape)}")]
        result = compare_values(e, g, dtype, overrides, label if len(dtypes) == 1 else f"{label}, output {i}")
        results.append(CheckResult(name, result.passed, result.evidence, result.details))
    return results
