"""Outputs against the reference's, as pure functions to `CheckResult`s, by the rule each output
is held to (bot.core.tolerance): the full values of a checked call (`compare_values`, in
bot.protocol.values, which the reference uses too), the
fingerprints of a timed call (`compare_fingerprints`) and what a timed call committed to inside
the parent's window against what it revealed after (`check_commitment`, `compare_outputs`).

Nothing here runs candidate code; the reference comes from a different process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from bot.core.domain import CheckResult
from bot.core.tolerance import AllClose, Rule, rules_of
from bot.protocol.measures import hash_tensor
from bot.protocol.values import compare_values

FINGERPRINT_SIGMAS = 6.0  # a projection on a random Gaussian vector: 6 sigma is never noise
# A timed call's outputs that a later call of the same batch overwrote: said plainly, as it is
# no cheat but a contract the harness holds every call to.
REUSED_OUTPUT = (
    "the output is valid only until the next call (CUDA graph trees reuse output memory: "
    "torch.compile modes 'reduce-overhead' and 'max-autotune'); each call's outputs must stay its own"
)


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
    results = []
    for i, (e, g, rule) in enumerate(zip(expected, got, rules_of(dtypes, given))):
        if not isinstance(g, torch.Tensor) or list(g.shape) != list(e.shape):
            return [CheckResult(name, False, f"{label}: output {i} is not a tensor of shape {list(e.shape)}")]
        result = compare_values(e, g, dtypes[i], rule, label if len(dtypes) == 1 else f"{label}, output {i}")
        results.append(as_timed_call(result, label, committed))
    return results


def as_timed_call(result: CheckResult, label: str, committed: CheckResult | None) -> CheckResult:
    """One output's full comparison as a timed call's check. `committed`: the call's commitment
    check; where its fingerprint, taken as the call returned, matched the reference and the
    full output after the batch is off normwise (as its fingerprint would have shown), the
    output changed in between (REUSED_OUTPUT). Off elementwise only, it may never have been
    right: a fingerprint holds an output to the normwise bound alone."""
    changed = (
        committed is not None
        and committed.passed
        and committed.details.get("commitment") == "fingerprint"
        and _off_normwise(result)
    )
    evidence = result.evidence
    if changed and not result.passed:
        evidence = (
            f"{label}: its output matched the reference when the call returned (its fingerprint) "
            f"and not after the batch: {REUSED_OUTPUT} ({evidence})"
        )
    return CheckResult("timed-call outputs", result.passed, evidence, result.details)


def _off_normwise(result: CheckResult) -> bool:
    """Whether a failed comparison is off by more than its normwise bound (or states none)."""
    bound = (result.details.get("tolerance") or {}).get("norm_rel")
    err = result.details.get("norm_rel_err")
    return bound is None or err is None or err > bound
