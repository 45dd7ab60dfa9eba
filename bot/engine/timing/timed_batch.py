"""One timed batch of one contender: inputs staged, the calls timed inside the parent's own
window, the calls the parent picks afterwards checked against the reference in full."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.core.domain import CheckResult
from bot.core.settings import Device
from bot.engine.timing.batch_run import Run, no_window
from bot.engine.timing.harness_cost import timed_exchange
from bot.engine.timing.lent_picks import LentPick, judged, sizes_and_fds
from bot.engine.timing.outside_clock import FLOOR_US, batch_sample_us, next_batch_size, per_call_estimate
from bot.engine.timing.records import TimingRecord
from bot.engine.timing.staging import StagingRefused, stage
from bot.engine.verification import verify
from bot.engine.verification.compare import check_commitment, compare_outputs
from bot.engine.verification.trials import failure_check, timed_seeds
from bot.engine.workers.client import WorkerClient, WorkerFailure, ask
from bot.protocol.batches import Outputs, Time, TimeReply
from bot.protocol.channel import close_fds
from bot.protocol.messages import Fingerprints


@dataclass(frozen=True)
class Picked:
    """The calls the parent picked after a batch, and how their full outputs came: revealed
    over the channel, written into blocks the reference lent, or neither (their fingerprints
    alone; `lending` holds the reference's wherever it was asked to lend)."""

    calls: list[int]
    revealed: list | None
    lending: list[LentPick]


def one_batch(run: Run, worker: WorkerClient, replica: int, record: TimingRecord, keep: bool) -> None:
    """One batch: inputs staged, the calls timed inside the parent's own window, then calls the
    parent picks checked against the reference in full (docs/verifier.md, "timed calls")."""
    seeds = timed_seeds(run.problem, run.rng, record.batch)
    fp_seed = run.rng.getrandbits(40)
    try:
        # Every other contender's processes frozen from here on. The staging is inside this
        # window too and on the parent's clock: the worker holds the inputs from then on, and
        # work it does with them before the calls (their answers, ahead of time) counts.
        run.window(worker)
        run.harness.settle_before_first_window()
        filled: list = []  # inputs the parent wrote from outside: then it checks the batch from outside too
        started = time.perf_counter()  # the sample's span: from here to the calls' reply
        staged = stage(run, worker, seeds, filled)
        reply, wall_us = timed_exchange(
            worker,
            Time(
                fp_seed=fp_seed,
                mode=run.options.mode,
                outside=bool(filled),
                calls=len(seeds),
                outputs=len(run.dtypes),
                digests=run.harness.commits_by_digest,
            ),
            run.call_timeout_s * len(seeds),
            "call",
        )
        span_us = (time.perf_counter() - started) * 1e6 - staged.others_us
        # Picked after the batch, from calls the worker had to commit to (fingerprints) inside
        # the window: what it returns now cannot change what it computed then.
        picked = run.rng.sample(range(len(seeds)), min(run.options.checks_per_batch, len(seeds)))
        read = run.outside.read(run, worker, reply, filled[0]) if filled else None
    except WorkerFailure as exc:
        record.checks.append(failure_check(exc))
        record.failed = True
        return
    except StagingRefused as exc:
        record.checks.append(
            CheckResult(
                "staged inputs",
                False,
                f"the parent could not write the batch's inputs into the buffers this worker named: {exc}",
            )
        )
        record.failed = True
        return
    full = run.harness.reveals_in_full and read is None
    # Too large to reveal on CUDA: compared in full where they lie (bot.engine.timing.lent_picks).
    # The reference's failure here is the problem's, as its fingerprints' are below.
    timeout_s = run.call_timeout_s * 20
    lends = read is None and not full and run.picks.on
    looks: list[CheckResult | None] = []  # at the GPU after the batch, every contender frozen
    if lends and run.window is not no_window:
        # Unmapping the lent blocks waits for all of the contender's GPU work (as a free does):
        # work it left running after its batch would drain there, unseen. The look comes first.
        worker.running.freeze()
        looks.append(run.harness.gpu_left_busy())
    lending = run.picks.lend(run.reference, [seeds[i] for i in picked], fp_seed, timeout_s) if lends else []
    into, fds = sizes_and_fds(lending)
    try:
        hold = run.outside.hold_calls(run.harness.meta) if read is not None else 0
        got = ask(
            worker,
            Outputs(picks=picked if full or into else [], hold_calls=hold, into=into),
            timeout_s,
            "call",
            fds=fds,
        )
        if run.window is not no_window:
            # Frozen from its last reply until its next window (which thaws it): work it would
            # do for its next batch between batches, off every clock, never runs. What it left
            # running on the GPU is its own: the look comes now, before anyone else's window.
            worker.running.freeze()
            looks.append(run.harness.gpu_left_busy())
    except WorkerFailure as exc:
        run.picks.free(run.reference, lending, timeout_s)
        record.checks.append(failure_check(exc))
        record.failed = True
        return
    finally:
        close_fds(fds)
    samples = reply.samples
    results = [verify.check_wall_clock(sum(samples), wall_us), verify.check_threads(reply.new_threads, "timed calls")]
    if read is not None:  # every call's outputs and inputs, from outside (bot.engine.timing.outside_checks)
        results.extend(
            read.failed or run.outside.against_reference(run, seeds, picked, read, f"shape {run.shape.name}")
        )
    else:
        picks = Picked(picked, got.outputs if full else None, lending)
        results.extend(_picked_against_reference(run, seeds, picks, fp_seed, reply, record))
    record.checks.extend(results)
    if not all(r.passed for r in results):
        record.failed = True
        return
    keep = _kept_after_looks(record, [found for found in looks if found is not None], keep)
    if record.failed:
        return
    parent_us = batch_sample_us(span_us, run.harness.span_of(len(seeds))[0], len(seeds))
    # On CUDA the parent's span cannot resolve a call under the harness's own work per call (a
    # 256 MiB L2 flush, ~90 us on an H100, beside gelu decode's 5 us: A/A runs came out far from 1
    # and samples fell to the floor): the sample is the batch's mean of the worker's event times,
    # which no spreading within the batch can move, bounded from outside by the parent's clock
    # (`hidden time` rejects gross hiding and counts the rest into it: TimingRecord.counted_us).
    cuda = run.reference.device == Device.CUDA
    sample_us = max(sum(samples) / len(seeds), FLOOR_US) if cuda else parent_us
    if keep:
        record.samples_us.extend([sample_us] * len(seeds))
        record.batch_sizes.append(len(seeds))
        record.batch_workers.append(replica)
        record.host_us.extend(reply.host_us)
        if reply.batch_span_us is not None:  # back to back: one host/stream pair for the whole batch
            record.event_us.append(reply.batch_span_us)
        else:
            record.event_us.extend(reply.event_us or [])
        reported = sum(reply.host_us)
        usual, noise = run.harness.of(len(seeds))
        # Drawn in the worker, its staging is on the parent's clock too: beyond the reference's
        # drawing of as many (bot.engine.timing.hidden judges it apart from the window's).
        drawn_us, staging_noise = 0.0, 0.0
        if staged.drawn_us is not None:
            usual_staging, staging_noise = run.harness.staging_of(len(seeds))
            drawn_us = staged.drawn_us - usual_staging
        record.staging_us.append(drawn_us / len(seeds))
        record.staging_noise_us.append(staging_noise / len(seeds))
        record.wall_us.append(wall_us)
        if reply.op_us is not None:
            record.op_us.append(reply.op_us)
        record.reported_us.append(reported / len(seeds))
        record.unexplained_us.append((wall_us - reported - usual) / len(seeds))
        # The allowance grows with the window's harness work only, never with input generation.
        record.harness_us.append(usual / len(seeds))
        record.noise_us.append(noise / len(seeds))
    # The next batch's size, from the parent's own samples (the warm-up's alone at first), on
    # CUDA too: never from the worker's report of a call it can slow.
    if keep:
        record.sizing_us.append(parent_us)
    per_call = per_call_estimate(record.sizing_us) if keep else parent_us
    cap = min(run.options.max_batch, run.harness.max_batch)
    record.batch = next_batch_size(per_call, run.options.batch_target_us, cap, run.rng)


def _picked_against_reference(
    run: Run,
    seeds: list[int],
    picks: Picked,
    fp_seed: int,
    reply: TimeReply,
    record: TimingRecord,
) -> list[CheckResult]:
    """Where the parent cannot read the batch from outside (CUDA, inputs staged by the worker):
    the picked calls' commitments, and their full outputs where they came, against the
    reference's. On the CPU calls commit by digest: the reference's fingerprints are not needed."""
    picked, revealed, lending = picks.calls, picks.revealed, picks.lending
    timeout_s = run.call_timeout_s * 20 * max(len(picked), 1)
    if lending:
        prints = [pick.prints for pick in lending]
    else:
        fingerprinted = not run.harness.commits_by_digest
        want = ("both" if revealed is not None else "fingerprint") if fingerprinted else "outputs"
        request = Fingerprints(seeds=[seeds[i] for i in picked], fp_seed=fp_seed, want=want)
        ref = ask(run.reference, request, timeout_s, "problem")
        prints = ref.fingerprints
    results = []
    dtypes, rules = run.dtypes, run.rules
    for n, i in enumerate(picked):
        label = f"shape {run.shape.name}, timed call {len(record.samples_us) + i + 1}"
        shown = revealed[n] if revealed is not None else []
        later = reply.fingerprints[i + 1 :]  # a reused output buffer holds one of these
        committed = check_commitment(reply.fingerprints[i], shown, prints[n], dtypes, rules, label, later)
        results.append(committed)
        if lending and lending[n].lent is not None:
            results.extend(judged(run.reference, lending[n], committed, dtypes, rules, label, timeout_s))
        elif revealed is not None:
            results.extend(compare_outputs(ref.outputs[n], shown, dtypes, rules, label, committed))
    return results


def _kept_after_looks(record: TimingRecord, looks: list[CheckResult], keep: bool) -> bool:
    """Whether the batch's figures are kept, after the looks at the GPU that followed it: where
    one found the GPU busy the batch is timed again, within verify.settle_busy_look's allowance;
    past it the contender fails."""
    busy = next((found for found in looks if not found.passed), None)
    if busy is None:
        record.checks.extend(looks)
        return keep
    settled = verify.settle_busy_look(busy, record.busy_batches, len(record.batch_sizes))
    record.busy_batches += 1
    if settled.check is not None:
        record.checks.append(settled.check)
    record.failed = settled.failed
    return keep and settled.kept
