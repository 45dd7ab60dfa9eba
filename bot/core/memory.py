"""Memory rules, pure: which work fits a device's free memory now (the scheduler's admission),
how many of a problem's contenders run at once, and a worker's host memory limit.

Figures are bytes. "Free" is what the device (or the host) had free when none of the bot's own
work held any of it: the driver's count (nvidia-smi) on a GPU, MemAvailable or the cgroup's limit on
the host (bot.engine.workspace.memory_budget reads them). docs/scale-out.md states the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.core.settings import Device

GIB = 1 << 30
# Kept free on every device: allocator fragmentation, cuBLAS and cuDNN workspaces and a late
# worker's CUDA context are not in any footprint. 10 % of an 80 GB H100 is 7.9 GiB.
MARGIN_FRACTION = 0.10
MARGIN_MIN_BYTES = 1 * GIB
# A worker's CUDA context and torch's kernels, which torch.cuda.max_memory_allocated does not
# count: about 500 MiB a process on an H100 with torch 2.x.
CONTEXT_BYTES = 512 << 20
# What every timed worker on a GPU reads before each call to flush the L2 (bot.harness.timing),
# held from its first timed batch on: larger than the 60 MB L2 of an H200, as in KernelBench.
FLUSH_BYTES = 256 << 20
# A contender may hold twice the eager model's peak: a CUDA graph's private pool beside the
# eager tensors, or the outputs of one call while the next is made.
CONTENDER_FACTOR = 2
# Host memory: a worker's limit is twice the problem's host footprint (its inputs and outputs,
# and the reference's float64 copies of them: three times their bytes), the outputs' copy into
# a message and the parent's staging buffer on top; never under the floor, never over what
# the machine has less its margin.
HOST_FLOOR_BYTES = 16 * GIB
HOST_FACTOR = 2


def margin_bytes(total_bytes: int) -> int:
    """The memory kept free on a device (or host) of `total_bytes`."""
    return max(MARGIN_MIN_BYTES, int(total_bytes * MARGIN_FRACTION))


def gib(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f} GiB"


@dataclass(frozen=True)
class Demand:
    """What one piece of work (a problem's workers for a shape) needs to hold at once."""

    name: str
    nbytes: int


@dataclass(frozen=True)
class Admission:
    run: tuple[str, ...]  # starts now
    wait: tuple[str, ...]  # fits once what runs has finished
    refused: tuple[tuple[str, str], ...]  # (name, one line): fits nowhere, not even alone


def admit(waiting: Sequence[Demand], free_bytes: int, held_bytes: int, margin: int) -> Admission:
    """In order: each demand runs now where it fits in `free_bytes` less `margin`, less what
    running work holds (`held_bytes`) and what is admitted before it. The first that does not
    fit waits, and everything after it waits too, so small work never overtakes large work
    forever: one that fits only alone runs once the others have finished. One larger than
    the free memory less the margin is refused with its reason."""
    usable = free_bytes - margin
    run: list[str] = []
    wait: list[str] = []
    refused: list[tuple[str, str]] = []
    held = held_bytes
    for demand in waiting:
        if demand.nbytes > usable:
            refused.append(
                (
                    demand.name,
                    f"needs {gib(demand.nbytes)}, the device has {gib(free_bytes)} free "
                    f"({gib(margin)} of it kept as a margin)",
                )
            )
        elif not wait and held + demand.nbytes <= usable:
            run.append(demand.name)
            held += demand.nbytes
        else:
            wait.append(demand.name)
    return Admission(tuple(run), tuple(wait), tuple(refused))


def problem_demand(reference_bytes: int, contender_bytes: int, contenders: int, context_bytes: int) -> int:
    """A problem's workers for a shape: the reference and `contenders` contenders at once,
    each with its own context."""
    return reference_bytes + context_bytes + contenders * (contender_bytes + context_bytes)


def contenders_at_once(
    reference_bytes: int, contender_bytes: int, wanted: int, usable_bytes: int, context_bytes: int
) -> int:
    """How many contenders may run their trials at once beside the reference in `usable_bytes`
    (the free memory less the margin): at most `wanted`, at least 1 (whether one fits at all
    is the admission's to say)."""
    room = usable_bytes - reference_bytes - context_bytes
    each = max(1, contender_bytes + context_bytes)
    return max(1, min(wanted, room // each))


def together_bytes(reference_peak: int, nbytes: int, contenders: int, timed_workers: int, context_bytes: int) -> int:
    """What a problem's workers may hold at once with all its `contenders` in one evaluation,
    the larger of its two phases (every worker with its context):

    - trials: the reference at its peak beside every contender holding one call's inputs and
      outputs (`nbytes`) while it waits, as a CUDA graph's static buffers are held;
    - timing: `timed_workers` workers (every contender while they are screened, the finalists'
      replicas after) each holding its staged inputs and its last call's outputs, one call's
      outputs beyond that, and the reference holding a call's inputs and outputs to check the
      picked calls against.

    Where this exceeds the device, contenders are evaluated in groups that fit, from the start."""
    trials = reference_peak + contenders * nbytes
    timing = (timed_workers + 2) * nbytes
    return max(trials, timing) + (1 + max(contenders, timed_workers)) * context_bytes


def timing_bytes(
    reference: int, contenders: Sequence[int], replicas: int, finalists: int, call_in: int, call_out: int
) -> int:
    """What a shape's timing may hold at once on a GPU, from what its workers hold after its
    trials, as the driver counts each process (a CUDA graph's static buffers included, which
    only the candidate's code decides):

    - `reference`: the reference worker at its most (its trial's peak with its context, or what
      it holds now where that is more): it answers for every timed call in float64;
    - `contenders`: each contender's worker now; the finalists' further replicas (the
      `finalists` and the baseline, the largest holders counted) hold what their first does;
    - every timed worker (TimingOptions.finalists, bot.engine.timing.interleaved) holds its last
      call's outputs (`call_out`, kept to see outputs reused across batches) and its L2 flush;
    - the active call's inputs and new outputs beside them."""
    n = len(contenders)
    kept = min(n, finalists + 1)
    timed = max(n, kept * replicas)
    largest = sorted(contenders, reverse=True)[:kept]
    held = sum(contenders) + (replicas - 1) * sum(largest)
    return reference + held + timed * (call_out + FLUSH_BYTES) + call_in + call_out


def replicas_that_fit(fits: Callable[[int], bool], replicas: int) -> int:
    """The most replicas per contender, `replicas` at most and 1 at least, whose timing `fits`."""
    return next((r for r in range(replicas, 1, -1) if fits(r)), 1)


def host_limit_bytes(footprint_bytes: int, machine_bytes: int, floor_bytes: int = HOST_FLOOR_BYTES) -> int:
    """A worker's resident-memory limit for a problem whose host footprint (inputs, outputs
    and the reference's float64 copies) is `footprint_bytes`, on a machine of `machine_bytes`."""
    ceiling = machine_bytes - margin_bytes(machine_bytes)
    return min(max(floor_bytes, HOST_FACTOR * footprint_bytes), max(ceiling, floor_bytes))


def problem_footprints(
    device: str, nbytes: int, native_peak: int | None, peak: int | None, host_peak: int | None
) -> tuple[int, int]:
    """(reference, each contender) bytes of one shape, from the reference trial: on a GPU its
    peak device memory with the float64 copies, and CONTENDER_FACTOR times its eager model's
    (three times, once, the shape's bytes `nbytes` where a figure is missing); on the host the
    reference's peak resident memory for both (an upper bound: it holds the float64 copies)."""
    if device == Device.CUDA:
        return peak or 3 * nbytes, CONTENDER_FACTOR * (native_peak or nbytes)
    return host_peak or 3 * nbytes, host_peak or nbytes


def host_footprint_bytes(nbytes: int) -> int:
    """A shape's host footprint: its inputs, outputs and parameters (`nbytes`) and the
    reference's float64 copies of them (twice a float32 tensor's bytes; a bfloat16 one's
    travel in float32, twice too)."""
    return 3 * nbytes
