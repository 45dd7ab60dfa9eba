"""The input distributions every trial draws from, and a problem's opt-outs (stdlib only).

Each distribution transforms the floating-point tensors of one `get_inputs()` draw; integer
tensors (indices, positions, labels) stay as drawn. The transforms are in bot/harness/inputs.py
(inside the workers); docs/verifier.md says why each exists and which test checks it.
"""

from __future__ import annotations

from collections.abc import Mapping

# In trial order: the first trial (which may compile) is "standard".
DISTRIBUTIONS: tuple[str, ...] = ("standard", "shifted", "large", "zeros", "rows", "limits", "offset", "mixed")

DESCRIPTIONS: Mapping[str, str] = {
    "standard": "standard normal",
    "shifted": "shifted and scaled",
    "large": "large magnitude",
    "zeros": "all zero",
    "rows": "rows of mixed scale from 0 to 128",
    "limits": "near the dtype's range",
    "offset": "rows whose mean is 128 to 8192 times their spread",
    "mixed": "values near zero mixed with large ones",
}

# The report's max abs err speaks of "standard" inputs: no problem may skip it.
REQUIRED = "standard"
# Timed calls draw from the problem's mix as trials do, except these. zeros: on the H200 a bf16
# matmul ran 13 % faster on zeros, which would time a kernel on inputs no workload has. offset:
# an honest float32 product's own error there depends on the draw (where the offsets along the
# inner dimension cancel): 1e-6 normwise typically, 1e-4 in 1 draw of 300 (128x4096x4096 on the
# CPU), beyond a bound widened by the problem's own error on the one offset trial; a trial is
# judged with the problem's own error on its own draw, a timed call is not.
NOT_TIMED: frozenset[str] = frozenset({"zeros", "offset"})


def seed_for(distribution: str, draw: int) -> int:
    """The seed of a call in `distribution`: requests carry only a seed, and the worker that
    draws the inputs derives the distribution from it (distribution_of). `draw` is the parent's
    secret random number (at most 58 bits, so the seed stays below 2^62)."""
    return (draw & (2**58 - 1)) * len(DISTRIBUTIONS) + DISTRIBUTIONS.index(distribution)


def distribution_of(seed: int) -> str:
    """The distribution a seed from seed_for names."""
    return DISTRIBUTIONS[seed % len(DISTRIBUTIONS)]


def timed_mix(kept: tuple[str, ...]) -> tuple[str, ...]:
    """The distributions a problem's timed calls draw from: its trials' less NOT_TIMED."""
    return tuple(name for name in kept if name not in NOT_TIMED) or (REQUIRED,)


class DistributionError(ValueError):
    """A problem's distribution metadata that cannot be used (one line, for ProblemError)."""


def skipped_distributions(declared: object, skips: object) -> dict[str, str]:
    """Each distribution a problem leaves out, with the reason it states.

    `declared` is its DISTRIBUTIONS (the ones it keeps; None: all), `skips` its
    SKIP_DISTRIBUTIONS ({name: reason}; None: none)."""
    found: dict[str, str] = {}
    if skips is not None:
        if not isinstance(skips, dict) or not skips:
            raise DistributionError("SKIP_DISTRIBUTIONS must be a non-empty dict of name -> reason")
        for name, reason in skips.items():
            _known(name, "SKIP_DISTRIBUTIONS")
            if not isinstance(reason, str) or not reason.strip():
                raise DistributionError(f"SKIP_DISTRIBUTIONS[{name!r}] must state a reason (a non-empty string)")
            found[name] = " ".join(reason.split())
    if declared is not None:
        if not isinstance(declared, (tuple, list)) or not declared:
            raise DistributionError(f"DISTRIBUTIONS must be a non-empty subset of {DISTRIBUTIONS}")
        for name in declared:
            _known(name, "DISTRIBUTIONS")
        both = sorted(set(declared) & set(found))
        if both:
            raise DistributionError(f"{both} both kept by DISTRIBUTIONS and skipped by SKIP_DISTRIBUTIONS")
        for name in DISTRIBUTIONS:
            if name not in declared:
                found.setdefault(name, "not listed in the problem's DISTRIBUTIONS")
    if REQUIRED in found:
        where = "SKIP_DISTRIBUTIONS" if skips and REQUIRED in skips else "DISTRIBUTIONS"
        raise DistributionError(f"{where} leaves out {REQUIRED!r}, which cannot be skipped: reports speak of it")
    return {name: found[name] for name in DISTRIBUTIONS if name in found}


def kept_distributions(skipped: Mapping[str, str]) -> tuple[str, ...]:
    """The distributions a problem's trials draw from, in trial order."""
    return tuple(name for name in DISTRIBUTIONS if name not in skipped)


def _known(name: object, where: str) -> None:
    if name not in DISTRIBUTIONS:
        raise DistributionError(
            f"{where} names {name!r}, which is not a distribution (known: {', '.join(DISTRIBUTIONS)})"
        )
