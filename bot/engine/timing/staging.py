"""A batch's inputs staged in a contender's worker, inside its window: on the CPU copied in
from the reference's while the contender is frozen (bot.sandbox.memory), elsewhere drawn by the
worker itself with the parent's clock on it (docs/verifier.md, "Timed calls")."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.engine.timing.batch_run import Run
from bot.engine.timing.harness_cost import timed_exchange
from bot.engine.workers.client import WorkerClient, ask
from bot.protocol.batches import Stage, StageInto
from bot.sandbox import memory


@dataclass(frozen=True)
class Staged:
    """What staging a batch took that the batch's sample leaves out or accounts apart."""

    # Within the batch's span, the time that was none of the contender's: the reference drawing
    # the inputs (the contender idle, waiting for its request) and the parent copying them in
    # while the contender was frozen; 0 where the worker drew them itself.
    others_us: float
    # Where the worker drew its inputs itself: the parent's wall time of that (hidden time).
    drawn_us: float | None


def stage(run: Run, worker: WorkerClient, seeds: list[int], filled: list | None = None) -> Staged:
    """Stage a batch's inputs in `worker`, inside its window (every other contender frozen).
    Filled from outside where it can be: the reference draws them, the worker allocates empty
    buffers (on the parent's clock: it runs its own code there, bot.engine.timing.outside_clock), and
    the parent copies them in while it is frozen. Otherwise the worker draws them itself, on the
    parent's clock too. Inputs filled from outside add (the bytes the parent wrote, the worker's
    regions) to `filled`, for the parent to check against what it reads back after the calls
    (bot.engine.timing.outside_checks)."""
    timeout_s = run.call_timeout_s * len(seeds)
    drawn = Stage(seeds=seeds)
    if run.harness.fills_from_outside:
        exposed = Stage(seeds=seeds, expose=True)
        ref, drawing_us = timed_exchange(run.reference, exposed, timeout_s, "problem")
        if ref.layout is None:
            run.harness.stop_filling(f"inputs staged in each worker: {ref.why}")
        else:
            got = ask(worker, StageInto(layout=ref.layout), timeout_s, "call")
            try:
                frozen_us, written = _fill(run.reference, worker, ref.regions, got.regions)
                if filled is not None:
                    filled.append((written, got.regions))
                return Staged(others_us=drawing_us + frozen_us, drawn_us=None)
            except PermissionError as exc:
                run.harness.stop_filling(f"inputs staged in each worker: {exc}")
    return Staged(others_us=0.0, drawn_us=timed_exchange(worker, drawn, timeout_s, "call")[1])


class StagingRefused(Exception):
    """The worker's buffers do not take the batch's inputs (their sizes, or their addresses)."""


def _fill(reference: WorkerClient, worker: WorkerClient, source: list, target: object) -> tuple[float, list[bytearray]]:
    """The reference's staged bytes read, then written into the worker's buffers while it is
    frozen; the parent's time from the read to the thaw, in us, and the bytes, region by region
    (kept, the reference's copy need not be read again to check the worker's after the batch)."""
    if (
        not isinstance(target, list)
        or len(target) != len(source)
        or any(
            not isinstance(t, list)
            or len(t) != len(s)
            or any(not isinstance(r, list) or len(r) != 2 or r[1] != q[1] for r, q in zip(t, s))
            for t, s in zip(target, source)
        )
    ):
        raise StagingRefused("the worker's buffers are not the batch's layout")
    if reference.running.pid is None or worker.running.pid is None:
        raise PermissionError("no process id to copy between")
    started = time.perf_counter()
    try:
        data = memory.read(reference.running.pid, [(int(s[0]), int(s[1])) for ss in source for s in ss])
        worker.running.freeze()
        try:
            memory.write(worker.running.pid, [(int(t[0]), d) for t, d in zip((t for ts in target for t in ts), data)])
        finally:
            worker.running.thaw()
    except memory.MemoryCopyError as exc:
        raise StagingRefused(str(exc)) from exc
    return (time.perf_counter() - started) * 1e6, data
