"""The check list: pure functions from observations to `CheckResult`s, and `judge`.

Nothing here runs candidate code or times anything; the observations come from workers
(see `bot.engine.trials` and `bot.engine.timing`), the reference from a different process.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from bot.core.domain import CheckResult, Verdict
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


def check_output_meta(expected: Sequence[Mapping[str, Any]], got: Sequence[Mapping[str, Any]]) -> CheckResult:
    """Exact `torch.Tensor` type, number of outputs, shape, dtype and device."""
    if len(expected) != len(got):
        return CheckResult("output structure", False, f"returned {len(got)} outputs, expected {len(expected)}")
    for i, (e, g) in enumerate(zip(expected, got)):
        if g.get("type") != "Tensor":
            return CheckResult(
                "output structure", False, f"output {i} is a {g.get('type')}, expected exactly torch.Tensor"
            )
        for key in ("shape", "dtype", "device"):
            if e.get(key) != g.get(key):
                return CheckResult(
                    "output structure", False, f"output {i} {key} is {g.get(key)}, expected {e.get(key)}"
                )
    return CheckResult("output structure", True)


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


def check_inputs_unchanged(
    reference_hashes: Sequence[str], before: Sequence[str], after: Sequence[str], label: str
) -> CheckResult:
    name = "inputs unchanged"
    if list(before) != list(reference_hashes):
        return CheckResult(
            name,
            False,
            f"{label}: the worker's inputs differ from the reference's "
            "before the call (get_inputs() was tampered with?)",
        )
    changed = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    if changed:
        return CheckResult(name, False, f"{label}: input(s) {changed} were modified by the call")
    return CheckResult(name, True)


def check_threads(new_threads: Sequence[str], where: str) -> CheckResult:
    if new_threads:
        return CheckResult(
            "no new threads",
            False,
            f"{len(new_threads)} thread(s) alive after {where} that the harness did not start: "
            f"{', '.join(new_threads[:5])}",
        )
    return CheckResult("no new threads", True)


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


def check_stream_timing(host_us: Sequence[float], event_us: Sequence[float], overhead_us: float) -> CheckResult:
    """Device-wide synchronised time must agree with event time on the current stream."""
    name = "stream timing"
    gap = statistics.median(h - e for h, e in zip(host_us, event_us))
    ev = statistics.median(event_us)
    allowed = 2 * overhead_us + 0.25 * ev + 10.0
    details = {"median_gap_us": gap, "allowed_us": allowed, "median_event_us": ev}
    if gap > allowed:
        return CheckResult(
            name,
            False,
            f"device-synchronised time exceeds event time by {gap:.1f} us "
            f"(allowed {allowed:.1f} us, event median {ev:.1f} us): work on another "
            "stream or left running after the call?",
            details,
        )
    return CheckResult(name, True, details=details)


def check_roofline(median_us: float, floor_us: float | None) -> CheckResult:
    name = "roofline"
    if floor_us is None:
        return CheckResult(name, True, "no roofline known for this device", {"floor_us": None})
    if median_us < floor_us:
        return CheckResult(
            name,
            False,
            f"median {median_us:.2f} us is below the physical floor "
            f"{floor_us:.2f} us (bytes / peak bandwidth, flops / peak rate): implausible",
            {"floor_us": floor_us},
        )
    return CheckResult(name, True, details={"floor_us": floor_us})


def check_wall_clock(reported_us: float, parent_wall_us: float) -> CheckResult:
    """The worker's own timings cannot exceed what the parent saw pass (timer patching)."""
    name = "wall clock"
    if reported_us > parent_wall_us * 1.02 + 100.0:
        return CheckResult(
            name,
            False,
            f"worker reported {reported_us:.0f} us of calls within {parent_wall_us:.0f} us of the parent's wall clock",
        )
    return CheckResult(name, True)


# A look at the GPU (the reference's row of spin kernels, bot.engine.harness_cost) may take this much longer
# than on an idle GPU, or wait this much between two of its kernels, for the GPU's switch from
# another process's context: on an H100, up to 250 us after an honest batch of memory-bound
# work; a kernel left running costs a time slice instead (2.4 ms).
GPU_SWITCH_US = 1500.0
GPU_GAP_US = 1000.0


def check_gpu_quiet(wall_us: float, idle_wall_us: float, intervals_us: Sequence[float]) -> CheckResult:
    """Right before a window, with every contender frozen, the GPU must be the reference's: GPU
    work a contender left running after its own window (a kernel on a stream of its own, its
    synchronise rebound) would run on in the next contender's. Frozen processes queue no new
    work, so what the look finds was left by the contender timed last."""
    name = "GPU left busy"
    typical = statistics.median(intervals_us) if intervals_us else 0.0
    longest = max(intervals_us, default=0.0)
    details = {"wall_us": wall_us, "idle_wall_us": idle_wall_us, "longest_gap_us": longest, "typical_gap_us": typical}
    if wall_us > idle_wall_us + GPU_SWITCH_US or longest > typical + GPU_GAP_US:
        return CheckResult(
            name,
            False,
            f"after this contender's batch the GPU was still busy: a "
            f"look at it took {wall_us:.0f} us against {idle_wall_us:.0f} us idle, "
            f"waiting up to {longest:.0f} us between kernels: work left running "
            "into the next contender's window?",
            details,
        )
    return CheckResult(name, True, details=details)


# Time per call the parent's clock saw beyond the report, the harness's measured work and the
# yardstick's, before a contender is rejected for it: half its reported time, a quarter of the
# harness's work (a real call leaves the caches colder for the work after it than the
# calibration's do-nothing call: 8 us of gelu's 62 us on a 2-vCPU CPU), and three times the
# noise of the medians compared. Less than that is counted into its times instead: honest code
# also leaves work for after its return (an interpreted Triton kernel's garbage, 3.9 ms on a
# 68 ms call), and counting never rejects it while still charging a cheat for what it hid.
HIDDEN_SHARE = 0.5
HARNESS_SHARE = 0.25


@dataclass(frozen=True)
class HiddenTime:
    """Time per call that the parent's clock saw and a contender's report left out."""

    hidden_us: float  # median over batches, beyond the harness's work and the yardstick's
    claimed_us: float  # the worker's reported time per call (median over batches)
    harness_us: float
    noise_us: float  # of `hidden_us`, for rejection: calibration and batch-to-batch scatter
    allowed_us: float
    counted_us: float  # added to the contender's samples: `hidden_us` where it is out of the calibration's noise

    def details(self) -> dict[str, float]:
        return {
            "hidden_us_per_call": self.hidden_us,
            "allowed_us": self.allowed_us,
            "claimed_us": self.claimed_us,
            "harness_us": self.harness_us,
            "noise_us": self.noise_us,
            "counted_us": self.counted_us,
        }


def spread(values: Sequence[float]) -> float:
    """A standard deviation robust to outliers: the median absolute deviation, scaled."""
    centre = statistics.median(values)
    return statistics.median(abs(v - centre) for v in values) * 1.4826


def _scatter(values: Sequence[float]) -> float:
    """How far the median of `values` may be off: their spread over the root of their count."""
    return spread(values) / math.sqrt(len(values))


def hidden_time(
    unexplained_us: Sequence[float],
    reported_us: Sequence[float],
    harness_us: Sequence[float],
    noise_us: Sequence[float],
    yardstick_us: Sequence[float] = (),
) -> HiddenTime:
    """Per kept batch, per call: the window's wall time less the calls' reported time less the
    harness's own work for such a batch, as measured on the reference with calls that do nothing
    (`unexplained_us`), that work (`harness_us`) and its measurement's spread (`noise_us`). The
    baseline's own `unexplained_us` is the yardstick for the other contenders: real calls in worker
    processes timed in turn with them (on a loaded 2-vCPU machine such processes sat up to 60 us
    a call above the calibration's). The contender's own scatter widens the rejection bound,
    never what is counted."""
    usual = statistics.median(yardstick_us) if yardstick_us else 0.0
    hidden = statistics.median(unexplained_us) - usual
    claimed = statistics.median(reported_us)
    harness = statistics.median(harness_us) if harness_us else 0.0
    calibration = statistics.median(noise_us) / math.sqrt(len(noise_us)) if noise_us else 0.0
    noise = math.hypot(calibration, _scatter(unexplained_us), _scatter(yardstick_us) if yardstick_us else 0.0)
    allowed = HIDDEN_SHARE * claimed + HARNESS_SHARE * harness + 3 * noise
    counted = hidden if hidden > 3 * calibration else 0.0
    return HiddenTime(hidden, claimed, harness, noise, allowed, max(counted, 0.0))


def check_hidden_time(found: HiddenTime) -> CheckResult:
    """The parent's wall clock must account for a worker's calls. The harness reads clocks it
    captured before the candidate was imported, but the candidate runs in that process and can
    rebind them (`bot.harness.shared.perf_ns`); the time it hides from its own report is still on
    the parent's clock. Gross hiding rejects; what it hides below that bound is counted in its
    times (`HiddenTime.counted_us`)."""
    name = "hidden time"
    if found.hidden_us > found.allowed_us:
        return CheckResult(
            name,
            False,
            f"the parent's clock saw {found.hidden_us:.1f} us per call more "
            f"than this worker reported ({found.claimed_us:.1f} us a call) beyond the "
            f"harness's own {found.harness_us:.1f} us (allowed {found.allowed_us:.1f} us): "
            "the worker's clocks were tampered with?",
            found.details(),
        )
    return CheckResult(name, True, details=found.details())


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


def hidden_time_checks(records: Mapping[str, Any], baseline: str | None) -> dict[str, HiddenTime]:
    """`hidden_time` of every contender with kept batches (TimingRecord-like objects), each but
    the baseline against the baseline's unexplained time where the baseline was timed (the
    baseline against the calibration alone)."""
    yardstick = records[baseline].unexplained_us if baseline in records else ()
    found = {
        n: hidden_time(r.unexplained_us, r.reported_us, r.harness_us, r.noise_us, () if n == baseline else yardstick)
        for n, r in records.items()
        if r.unexplained_us
    }
    if baseline in found:  # the yardstick counts nothing into its own times: what it hides makes
        # it faster, which no candidate's claim can gain from
        found[baseline] = replace(found[baseline], counted_us=0.0)
    return found


def judge(checks: Sequence[CheckResult]) -> Verdict:
    """Accepted only when every check passed and the values were actually compared."""
    merged: dict[str, CheckResult] = {}
    for check in checks:
        prior = merged.get(check.name)
        if prior is None or (prior.passed and not check.passed):
            merged[check.name] = check
    ok = bool(merged) and all(c.passed for c in merged.values()) and "values" in merged
    return Verdict("accepted" if ok else "rejected", tuple(merged.values()))
