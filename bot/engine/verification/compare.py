"""Outputs against the reference's, as pure functions to `CheckResult`s, by the rule each output
is held to (bot.engine.verification.tolerance): the full values of a checked call (`compare_values`), the
fingerprints of a timed call (`compare_fingerprints`) and what a timed call committed to inside
the parent's window against what it revealed after (`check_commitment`, `compare_outputs`).

Nothing here runs candidate code; the reference comes from a different process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
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


def _bound_in_place(
    allowed: torch.Tensor,
    ref: torch.Tensor,
    finite: torch.Tensor,
    all_finite: bool,
    shape: Sequence[int],
    tol: Tolerance,
    dtype: torch.dtype,
) -> Callable[[int], float]:
    """Turn `allowed` (|ref| of the compared elements) into each element's bound
    max(elem_rtol * |ref| + elem_atol_rel * max(max |ref| of its row (or the output), the
    dtype's smallest normal), its underflow residue), in place (no buffer the output's size
    where all values are finite); returns the scale of the j-th compared element, for the
    evidence."""
    floor, residue = torch.finfo(dtype).tiny, error_floor(dtype)
    width = row_width(shape) if allowed.numel() else 0
    if not width:
        whole = max(float(allowed.max()) if allowed.numel() else 0.0, floor)
        allowed.mul_(tol.elem_rtol).add_(tol.elem_atol_rel * whole).clamp_min_(residue)
        return lambda j: whole
    if all_finite:
        rows = allowed.view(-1, width).amax(1).clamp_min_(floor)
        allowed.mul_(tol.elem_rtol).view(-1, width).add_(rows[:, None], alpha=tol.elem_atol_rel)
        allowed.clamp_min_(residue)
        return lambda j: float(rows[j // width])
    full = torch.where(finite, ref.abs(), torch.zeros((), dtype=ref.dtype))
    per = full.view(-1, width).amax(1).clamp_min_(floor).repeat_interleave(width)[finite]
    allowed.mul_(tol.elem_rtol).add_(per, alpha=tol.elem_atol_rel).clamp_min_(residue)
    return lambda j: float(per[j])


def compare_values(expected: torch.Tensor, got: torch.Tensor, dtype: str, given: Given, label: str) -> CheckResult:
    """Values of one output against the reference's, by the rule `given` resolves to
    (bot.engine.verification.tolerance); evidence names the worst element."""
    name = "values"
    tol = rule_of(dtype, given)
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
    if isinstance(tol, AllClose):  # KernelBench compares in the output's own dtype
        work = got.dtype
    else:
        # float32 arithmetic where the tolerance is far above its rounding (half-precision
        # outputs): half the memory traffic of float64 on outputs of tens of millions of elements.
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
    if isinstance(tol, AllClose):
        return _allclose(ref, out, finite, tol, shape, label)
    ref_f, out_f = (ref, out) if all_finite else (ref[finite], out[finite])
    diff = out_f - ref_f
    ref_norm = float(ref_f.norm())
    # Scales are at least the dtype's smallest normal: an all-zero reference (the "zeros" inputs)
    # is matched within elem_atol_rel of it, for float16 6.1e-8, one step of its subnormals.
    tiny = torch.finfo(getattr(torch, dtype)).tiny
    norm_err = float(diff.norm()) / max(ref_norm, tiny * math.sqrt(max(ref_f.numel(), 1)))
    diff.abs_()
    allowed = ref_f.abs()
    scale_of = _bound_in_place(allowed, ref, finite, all_finite, shape, tol, getattr(torch, dtype))
    details = {
        "max_abs_err": float(diff.max()) if diff.numel() else 0.0,
        "norm_rel_err": norm_err,
        "tolerance": tol.__dict__,
    }
    excess = diff - allowed
    if diff.numel() and float(excess.max()) > 0:
        j = int(excess.argmax())
        i = j if all_finite else int(finite.nonzero()[j])
        scope = "its row's" if row_width(shape) else "the output's"
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


def _allclose(
    ref: torch.Tensor, out: torch.Tensor, finite: torch.Tensor, rule: AllClose, shape: Sequence[int], label: str
) -> CheckResult:
    """KernelBench's torch.allclose(reference, out, atol, rtol), its argument order kept (rtol
    scales |out|), in the output's dtype. Non-finite positions were matched already: there
    KernelBench's equal_nan=False would fail the problem's own reference too."""
    close = torch.isclose(ref, out, rtol=rule.rtol, atol=rule.atol, equal_nan=True)
    wide = torch.promote_types(ref.dtype, torch.float32)
    zero = torch.zeros((), dtype=wide)
    diff = torch.where(finite, out.to(wide) - ref.to(wide), zero)
    ref_norm = float(torch.where(finite, ref.to(wide), zero).norm())
    norm_err = float(diff.norm()) / max(ref_norm, torch.finfo(wide).tiny)
    diff.abs_()
    details = {
        "max_abs_err": float(diff.max()) if diff.numel() else 0.0,
        "norm_rel_err": norm_err,
        "tolerance": {"atol": rule.atol, "rtol": rule.rtol},
    }
    far = (~close).nonzero()
    if far.numel():
        i = int(far[0])
        return CheckResult(
            "values",
            False,
            f"{label}: element {_index(i, shape)} got {out[i].item():.6g}, expected {ref[i].item():.6g} "
            f"(abs err {diff[i].item():.3g} > atol {rule.atol:g} + rtol {rule.rtol:g} x |got|, KernelBench's "
            f"torch.allclose); {far.numel()} of {ref.numel()} elements outside, max abs err "
            f"{details['max_abs_err']:.3g}",
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
