"""The options of a timing run and what it records of each contender, batch by batch."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.core.domain import CheckResult
from bot.core.measurement import Measurement
from bot.core.settings import DEFAULTS, TimingMode


@dataclass(frozen=True)
class TimingOptions:
    time_cap_s: float = DEFAULTS.time_cap_s  # per shape, all contenders together
    target_rel_se: float = 0.01  # stop once every median is known to 1%
    min_samples: int = 10
    # Each contender's samples come from at least this many interleaved visits, so that no
    # single moment (a clock change, a busy host) decides a median.
    min_batches: int = 6
    # Many contenders: after two screening rounds only the baseline and this many fastest
    # go on, so the cap buys precise intervals where a choice is being made.
    finalists: int = 4
    # CUDA only: "latency" synchronises before each call (host launch path + GPU work, back
    # to back); "throughput" times back-to-back calls; "graph" times CUDA-graph replays of
    # each call, the GPU's time alone (bot/harness/worker.py, op_time).
    mode: TimingMode = DEFAULTS.timing
    # Worker processes per contender when contenders are compared, visited in turn: each
    # process carries an offset of its own (on the H200, 5 % between fresh processes on a
    # 5 us kernel), which only a second process of the same code can reveal (bench.speedup).
    replicas: int = DEFAULTS.replicas
    batch_target_us: float = 10_000.0  # calls per batch chosen to fill about this long
    max_batch: int = 50
    warmup_batches: int = 1
    checks_per_batch: int = 1  # timed calls re-checked against the reference, chosen afterwards


@dataclass
class TimingRecord:
    # Per call of each kept batch: the batch's time per call on the parent's clock, one
    # measurement per batch (bot.engine.timing.outside_clock), so batches are the units of every statistic.
    samples_us: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)  # calls in each kept batch
    batch_workers: list[int] = field(default_factory=list)  # which replica took each batch
    # Pairs for the stream check: device-synchronised host time and the event time on the
    # current stream, per call ("latency") or per batch ("throughput", "graph").
    host_us: list[float] = field(default_factory=list)
    event_us: list[float] = field(default_factory=list)
    # Per kept batch, per call: the host time the worker reported (the calls' own, or on CUDA in
    # "throughput" and "graph" its whole batch's), and the parent's wall time it leaves
    # unexplained beyond the harness's measured work (HarnessCost; bot.engine.timing.hidden.check_hidden_time).
    reported_us: list[float] = field(default_factory=list)
    unexplained_us: list[float] = field(default_factory=list)
    harness_us: list[float] = field(default_factory=list)  # per kept batch, per call: HarnessCost's median
    noise_us: list[float] = field(default_factory=list)  # and its spread
    # Per kept batch, per call: where the worker drew its own inputs, the parent's time of that
    # beyond the reference's drawing of as many, and that drawing's spread (0 where the parent
    # filled them from outside).
    staging_us: list[float] = field(default_factory=list)
    staging_noise_us: list[float] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    # Per kept batch: the parent's wall time of the timed exchange, and the worker's own time for
    # its op (TimeReply.op_us): where a window's unexplained time went, for diagnosis only.
    wall_us: list[float] = field(default_factory=list)
    op_us: list[float] = field(default_factory=list)
    # Per kept batch, the parent's sample, which sizes the next batch (next_batch_size).
    sizing_us: list[float] = field(default_factory=list)
    # On CUDA, set once timing is done: hidden time per call counted into the samples.
    counted_us: float = 0.0
    batch: int = 1  # calls in the next batch, drawn by the parent (next_batch_size)
    busy_batches: int = 0  # batches after which a look found the GPU busy (verify.settle_busy_look)
    failed: bool = False

    def window_figures(self) -> list[tuple[float | None, ...]]:
        """Per kept batch, what the hidden-time check weighed (for diagnosis, `bot -v`): its
        calls, its replica, the parent's wall time of the timed exchange, the worker's own time
        for its op (None where it sent none), and per call the worker's report, the time left
        unexplained, the harness's measured work and the staging's time beyond the reference's,
        in us."""
        ops = self.op_us if len(self.op_us) == len(self.wall_us) else [None] * len(self.wall_us)
        per_batch = zip(self.wall_us, ops, self.reported_us, self.unexplained_us, self.harness_us, self.staging_us)
        return [
            (n, replica, *(None if x is None else round(x, 1) for x in figures))
            for n, replica, figures in zip(self.batch_sizes, self.batch_workers, per_batch)
        ]

    def measurement(self) -> Measurement | None:
        """The samples, each with `counted_us` added (on CUDA: the time per call the parent's clock
        saw and the worker's events left out, bot.engine.timing.hidden; 0 on the CPU, whose samples are
        the parent's own)."""
        if not self.samples_us:
            return None
        workers = tuple(self.batch_workers) if len(set(self.batch_workers)) > 1 else ()
        return Measurement(tuple(s + self.counted_us for s in self.samples_us), tuple(self.batch_sizes), workers)
