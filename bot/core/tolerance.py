"""Which bound each output of a shape is held to: the tolerance policy (docs/verifier.md,
"Tolerance").

`strict` (the default) compares with the float64 oracle: the output dtype's default tolerance
(or the problem's TOLERANCE overrides), widened by OWN_ERROR_MULTIPLE times the problem's own
error against that oracle, which the reference worker measures in the same trials (its `Model`
run as written, in the problem's dtype on the device, beside the oracle). The code being
replaced passes by construction, and a candidate may be as accurate as it, but not much worse.
`kernelbench` is KernelBench's rule: `torch.allclose` against the problem's own `Model` run on
the same device in the same dtype.

Pure functions of the reference's replies; nothing here runs code of the problem or a candidate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from bot.core.distributions import NOT_TIMED, timed_mix
from bot.core.settings import OWN_ERROR_MULTIPLE, TolerancePolicy


@dataclass(frozen=True)
class Tolerance:
    """Normwise ||out-ref||/||ref|| bound plus an elementwise bound
    |out-ref| <= elem_atol_rel * max|ref| + elem_rtol * |ref| (scale-free, so the
    'large' input distribution does not need its own numbers)."""

    norm_rel: float
    elem_rtol: float
    elem_atol_rel: float


@dataclass(frozen=True)
class AllClose:
    """KernelBench's rule: torch.isclose(reference, out, rtol, atol) everywhere, i.e.
    |ref - out| <= atol + rtol * |out|. `norm_abs` is atol * sqrt(elements of the output): with
    rtol, the normwise bound the rule implies, for the fingerprints of timed calls."""

    atol: float
    rtol: float
    norm_abs: float


Rule = Tolerance | AllClose
# What the comparisons take: a shape's resolved rule, or the problem's TOLERANCE overrides of the
# dtype's default (None: the default itself).
Given = Rule | Mapping[str, float] | None

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

# The multiple of the problem's own error a bound is widened by: bot.core.settings says why.
# However loose the reference, the normwise bound is never looser than this: a zero, stale or
# skipped output is ~100 % off normwise, so it still fails. A reference further from its oracle
# fails its own baseline. The elementwise bound has no cap: one rounding can move a whole row
# of a float32 result (a GEMM's cancellation on 'limits' inputs, a TF32 convolution's row that
# ReLU leaves near zero), and the problem as written must pass its own baseline; the trials of
# the other distributions hold candidates to their own, tight, bounds (distribution_rules).
NORM_CEILING = 0.05
# Except where the problem's own answer is its rounding noise: its normwise error reaches its
# whole answer, as where a normalisation divides a constant input's cancellation by its epsilon
# (KernelBench's 11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm on 'zeros' inputs: float32
# gives elements up to 2e-4 where the float64 oracle's are all but zero: 5.6e33 times its norm).
# On that distribution's trials the normwise bound is not capped, so the problem passes its own
# baseline; the uncapped elementwise bound still holds a candidate within four times that noise
# of the oracle's answer (near zero, which a zero output meets: it is the answer). The shape's
# timed calls never draw such inputs (timed_rules), and every other distribution keeps its own
# bound, so no code wrong on real inputs passes by it.
NOISE_ERROR = 1.0

# KernelBench (src/kernelbench/eval.py, get_tolerance_for_precision): atol = rtol = 1e-4 for
# float32, 1e-2 for float16 and bfloat16. It defines no other dtype: float64 takes float32's
# figure and the float8 types the half types', the nearest rule it has.
KERNELBENCH_TOLERANCE: dict[str, float] = {
    "float64": 1e-4,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "float8_e4m3fn": 1e-2,
    "float8_e5m2": 1e-2,
}


def tolerance_for(dtype: str, overrides: Mapping[str, float] | None = None) -> Tolerance | None:
    """None means exact comparison (integer and boolean outputs)."""
    base = DEFAULT_TOLERANCES.get(dtype)
    if base is None:
        return None
    if overrides:
        return Tolerance(**{**base.__dict__, **{k: float(v) for k, v in overrides.items()}})
    return base


def rule_of(dtype: str, given: Given) -> Rule | None:
    """The rule one output is held to: `given` itself when resolved, else the dtype's default
    with the overrides."""
    if isinstance(given, (Tolerance, AllClose)):
        return given
    return tolerance_for(dtype, given)


def rules_of(dtypes: Sequence[str], given: Sequence[Rule | None] | Mapping[str, float] | None) -> list[Rule | None]:
    """Per output: a shape's resolved rules as they are, or the overrides applied to each dtype.
    A list of rules of another length is a bug, never a comparison of fewer outputs."""
    if given is None or isinstance(given, Mapping):
        return [tolerance_for(d, given) for d in dtypes]
    if len(given) != len(dtypes):
        raise ValueError(f"{len(given)} tolerance rules for {len(dtypes)} outputs")
    return list(given)


def widened(base: Tolerance, norm_err: float, row_err: float, noise: bool = False) -> Tolerance:
    """`base` plus OWN_ERROR_MULTIPLE times the reference's own error (normwise, and the largest
    |error| over its row's max |ref|), the normwise bound capped at NORM_CEILING unless `noise`
    lets a reference whose answer is its rounding noise (NOISE_ERROR) through uncapped."""
    norm_rel = base.norm_rel + OWN_ERROR_MULTIPLE * norm_err
    if not (noise and norm_err >= NOISE_ERROR):
        norm_rel = min(max(base.norm_rel, NORM_CEILING), norm_rel)
    return Tolerance(norm_rel, base.elem_rtol, base.elem_atol_rel + OWN_ERROR_MULTIPLE * row_err)


def shape_rules(
    metas: Sequence[Mapping[str, Any]],
    overrides: Mapping[str, float] | None,
    own_errors: Sequence[Sequence[Sequence[float]] | None],
    policy: TolerancePolicy,
    noise: bool = False,
) -> tuple[Rule | None, ...]:
    """One rule per output of a shape. `own_errors`: per trial, the reference's own error per
    output as [normwise, largest over its row's max] (None where it ran no oracle); the
    largest over the trials widens the bound (`noise`: uncapped where the reference's answer is
    its rounding noise, for one distribution's trials only). Under `kernelbench` the problem's
    overrides do not apply: KernelBench has none."""
    rules: list[Rule | None] = []
    for i, meta in enumerate(metas):
        dtype = meta["dtype"]
        if policy == TolerancePolicy.KERNELBENCH:
            tol = KERNELBENCH_TOLERANCE.get(dtype)
            elements = math.prod(meta["shape"])
            rules.append(None if tol is None else AllClose(tol, tol, tol * math.sqrt(elements)))
            continue
        base = tolerance_for(dtype, overrides)
        measured = [trial[i] for trial in own_errors if trial is not None and i < len(trial)]
        if base is None or not measured:
            rules.append(base)
            continue
        rules.append(widened(base, max(m[0] for m in measured), max(m[1] for m in measured), noise))
    return tuple(rules)


def timed_rules(
    metas: Sequence[Mapping[str, Any]],
    overrides: Mapping[str, float] | None,
    own_errors: Sequence[Sequence[Sequence[float]] | None],
    distributions: Sequence[str],
    policy: TolerancePolicy,
) -> tuple[Rule | None, ...]:
    """The rule a shape's timed calls are held to: widened by the reference's own error on the
    trials of the distributions those calls draw from (bot.core.distributions.timed_mix), the
    loosest of their rules, capped. A distribution they never draw ('zeros', where the problem's
    answer can be its rounding noise) loosens none of their bounds."""
    timed = set(timed_mix(tuple(dict.fromkeys(distributions))))
    drawn = [errors for dist, errors in zip(distributions, own_errors, strict=True) if dist in timed]
    return shape_rules(metas, overrides, drawn, policy)


def distribution_rules(
    metas: Sequence[Mapping[str, Any]],
    overrides: Mapping[str, float] | None,
    own_errors: Sequence[Sequence[Sequence[float]] | None],
    distributions: Sequence[str],
    policy: TolerancePolicy,
) -> dict[str, tuple[Rule | None, ...]]:
    """The rules a shape's trials are held to, per input distribution: each widened by the
    reference's own error on that distribution's trials only (`distributions[k]` is trial k's),
    so a float32 GEMM that cancels to nothing on 'limits' inputs loosens no bound of the
    'standard' trial, where a candidate wrong on a few elements is then caught. Timed calls,
    whose inputs are other draws, are held to timed_rules, the loosest of theirs. A distribution
    on which the problem's answer is its rounding noise has no normwise cap (NOISE_ERROR)."""
    return {
        dist: shape_rules(metas, overrides, errors, policy, noise=True)
        for dist, errors in _by_distribution(own_errors, distributions).items()
    }


def _by_distribution(
    own_errors: Sequence[Sequence[Sequence[float]] | None], distributions: Sequence[str]
) -> dict[str, list[Sequence[Sequence[float]] | None]]:
    by_distribution: dict[str, list[Sequence[Sequence[float]] | None]] = {}
    for dist, errors in zip(distributions, own_errors, strict=True):
        by_distribution.setdefault(dist, []).append(errors)
    return by_distribution


def noise_notes(
    metas: Sequence[Mapping[str, Any]],
    own_errors: Sequence[Sequence[Sequence[float]] | None],
    distributions: Sequence[str],
) -> list[str]:
    """One line per output and distribution where the problem's own answer is its rounding
    noise (NOISE_ERROR), and what its trials there are held to instead."""
    notes = []
    for dist, trials in _by_distribution(own_errors, distributions).items():
        for i, meta in enumerate(metas):
            errors = [t[i][0] for t in trials if t is not None and i < len(t)]
            if not errors or max(errors) < NOISE_ERROR or meta["dtype"] not in DEFAULT_TOLERANCES:
                continue
            note = (
                f"output {i} ({meta['dtype']}) on {dist} inputs: the problem's own answer is its rounding noise "
                f"(its error {max(errors):.3g} times the oracle's answer): its trials there are held to "
                f"{OWN_ERROR_MULTIPLE:g}x that noise elementwise, not normwise"
            )
            if dist not in NOT_TIMED:
                note += f"; its timed calls draw such inputs and stay capped (norm_rel {NORM_CEILING:g})"
            notes.append(note)
    return notes


def widening_notes(
    metas: Sequence[Mapping[str, Any]], overrides: Mapping[str, float] | None, rules: Sequence[Rule | None]
) -> list[str]:
    """One line per output whose bound the reference's own error widened by more than the
    default itself (rounding to a half-precision output widens each a little, on every problem),
    with both figures; and where the ceiling cut it, that the baseline may fail and why."""
    notes = []
    for i, (meta, rule) in enumerate(zip(metas, rules)):
        base = tolerance_for(meta["dtype"], overrides)
        if not isinstance(rule, Tolerance) or base is None:
            continue
        if rule.norm_rel <= 2 * base.norm_rel and rule.elem_atol_rel <= 2 * base.elem_atol_rel:
            continue
        what = f"output {i} ({meta['dtype']})"
        notes.append(
            f"{what}: the problem's own result is off its oracle, so candidates are held to "
            f"{_figures(rule)} instead of {_figures(base)} "
            f"({OWN_ERROR_MULTIPLE:g}x its error plus the default)"
        )
        if rule.norm_rel > base.norm_rel and rule.norm_rel == max(base.norm_rel, NORM_CEILING):
            notes.append(
                f"{what}: the problem's own error reaches the ceiling (norm_rel {NORM_CEILING:g}): the "
                "bound stops there and its baseline may fail the values check; a result this far "
                "from its oracle is no answer to hold candidates to (REFERENCE_PRECISION = "
                "'native', or --tolerance kernelbench)"
            )
    return notes


def _figures(tol: Tolerance) -> str:
    return ", ".join(f"{f.name} {getattr(tol, f.name):.3g}" for f in fields(tol) if f.name != "elem_rtol")


def rule_to_wire(rule: Rule | None) -> dict[str, float] | None:
    """A rule as a request carries it to the reference that compares outputs where they lie
    (bot.protocol.messages.Judge); its fields name its kind."""
    return None if rule is None else {f.name: float(getattr(rule, f.name)) for f in fields(rule)}


def rule_from_wire(wire: Mapping[str, Any] | None) -> Rule | None:
    """The rule `rule_to_wire` wrote (ValueError on anything else)."""
    if wire is None:
        return None
    for kind in (Tolerance, AllClose):
        names = {f.name for f in fields(kind)}
        if set(wire) == names:
            return kind(**{name: float(wire[name]) for name in names})
    raise ValueError(f"not a rule: {sorted(wire)}")
