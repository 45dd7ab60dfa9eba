"""The interleaved timing protocol, with stand-in workers: how many batches, when it stops."""

from __future__ import annotations

import contextlib
import random
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import PROBLEMS

from bot.core.domain import CheckResult
from bot.engine.timing.batch_run import no_window
from bot.engine.timing.harness_cost import HarnessCost
from bot.engine.timing.interleaved import TimedShape, TimingHooks, screened_out, time_interleaved
from bot.engine.timing.records import TimingOptions
from bot.engine.verification import verify
from bot.engine.verification.trials import ReferenceInfo
from bot.engine.workspace.problems import load_problem
from bot.protocol.measures import hash_tensor

INFO = ReferenceInfo(meta=[{"type": "Tensor", "dtype": "float32", "shape": [2], "device": "cpu"}], nbytes=8)
OUT = torch.ones(2)  # every stand-in call's output, and the reference's
DIGEST = hash_tensor(OUT)


class _ParentClock:
    """The parent's clock as the stand-ins move it: 1 us a request, and each call's `call_us`
    (the stand-ins also sleep, so caps and deadlines run in real time). The samples are the
    parent's spans (bot.engine.timing.outside_clock), which a loaded test machine would otherwise
    scatter by milliseconds a batch."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def perf_counter(self) -> float:
        return self.now_s

    def advance(self, us: float) -> None:
        self.now_s += us / 1e6


CLOCK = _ParentClock()


@pytest.fixture(autouse=True)
def parent_clock(monkeypatch):
    from bot.engine.timing import harness_cost, staging, timed_batch

    for module in (timed_batch, harness_cost, staging):
        monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=CLOCK.perf_counter))
    return CLOCK


class _Worker:
    """Answers the protocol's requests; each call really takes `call_us` of wall time.
    Like the real worker on CUDA, mode "throughput" answers with one host/stream pair per batch.
    As the reference (ops "fingerprints" and the calibration's stub batches) it answers at once."""

    def __init__(self, call_us: float, reports: float = 1.0):
        self.call_us = call_us
        self.reported_us = call_us * reports  # what it says a call took (below 1: it lies)
        self.batches: list[int] = []
        self.modes: set[str] = set()
        self.staged = 0
        self.device = "cpu"
        self.running = SimpleNamespace(freeze=lambda: None)  # frozen after each batch, in a window

    def pin(self, timed: bool) -> None:
        pass

    def threads_seen(self, reported):
        return reported  # no process of its own to count threads in from outside

    def request(self, message, timeout_s, phase):
        op = message["op"]
        CLOCK.advance(1.0)
        if op == "fingerprints":
            return {
                "ok": True,
                "fingerprints": [None for _ in message["seeds"]],
                "outputs": [[OUT] for _ in message["seeds"]],
            }
        if op == "stage":
            self.staged = len(message["seeds"])
            return {"ok": True}
        if op == "outputs":
            return {"ok": True, "outputs": [[OUT] for _ in message["picks"]]}
        n = self.staged
        if message.get("stub"):
            return {
                "ok": True,
                "host_us": [0.0] * n,
                "event_us": None,
                "fingerprints": [[DIGEST]] * n,
                "new_threads": [],
            }
        time.sleep(n * self.call_us / 1e6)
        CLOCK.advance(n * self.call_us)
        self.batches.append(n)
        self.modes.add(message["mode"])
        prints = [[DIGEST] for _ in range(n)]
        if message["mode"] == "throughput":
            return {
                "ok": True,
                "host_us": [n * self.reported_us + 5.0],
                "event_us": [self.reported_us] * n,
                "batch_span_us": n * self.reported_us,
                "fingerprints": prints,
                "new_threads": [],
            }
        return {
            "ok": True,
            "host_us": [self.reported_us + 5.0] * n,
            "event_us": [self.reported_us] * n,
            "fingerprints": prints,
            "new_threads": [],
        }


def _time(
    contenders: dict[str, _Worker | tuple[_Worker, ...]],
    options: TimingOptions,
    keep: frozenset[str] = frozenset(),
    stop=None,
    window=no_window,
):
    """Times the contenders; a tuple is one contender's workers, the first one timed from the
    start and the others added by `replicate` before the final rounds."""
    problem = load_problem(PROBLEMS / "scale_add.py")
    first = {n: w[0] if isinstance(w, tuple) else w for n, w in contenders.items()}
    more = {n: w for n, w in contenders.items() if isinstance(w, tuple)}
    return time_interleaved(
        TimedShape(problem, problem.shapes_for("cpu")[0], _Worker(1.0), INFO, options, 10.0, random.Random(0)),
        first,
        TimingHooks(
            progress=lambda _: None,
            keep=keep,
            replicate=lambda chosen: {n: more.get(n, (w,)) for n, w in chosen.items()},
            stop=stop,
            window=window,
        ),
    )


def test_noisy_contenders_get_at_least_min_batches_within_the_cap():
    records = _time(
        {"a": _Worker(200.0), "b": _Worker(200.0)}, TimingOptions(time_cap_s=5.0, min_batches=6, batch_target_us=2_000)
    )
    for record in records.values():
        m = record.measurement()
        assert len(m.batch_sizes) >= 6 and sum(m.batch_sizes) == m.n


def test_the_cap_waits_for_a_second_batch_of_a_slow_contender_but_not_forever():
    slow = _Worker(60_000.0)  # 60 ms a call: one call per batch
    records = _time(
        {"fast": _Worker(100.0), "slow": slow}, TimingOptions(time_cap_s=0.01, min_batches=6, batch_target_us=1_000)
    )
    assert len(records["slow"].batch_sizes) == 2  # the cap had passed after the first
    started = time.monotonic()
    records = _time({"slow": _Worker(60_000.0)}, TimingOptions(time_cap_s=0.01, min_batches=50, target_rel_se=0.0))
    assert time.monotonic() - started < 1.0  # ten times the cap, then it stops


def test_screening_keeps_the_baseline_and_the_fastest():
    medians = {"base": 500.0, "a": 100.0, "b": 300.0, "c": 200.0, "d": 900.0}
    assert screened_out(medians, frozenset({"base"}), 2) == {"b", "d"}
    assert screened_out(medians, frozenset(), 10) == set()


def test_many_contenders_are_screened_then_the_finalists_get_precise_medians():
    workers = {"base": _Worker(400.0), **{f"c{i}": _Worker(100.0 + 100 * i) for i in range(8)}}
    records = _time(
        workers,
        TimingOptions(time_cap_s=3.0, min_batches=6, finalists=2, batch_target_us=2_000),
        keep=frozenset({"base"}),
    )
    batches = {n: len(r.batch_sizes) for n, r in records.items()}
    assert batches["base"] >= 6 and batches["c0"] >= 6 and batches["c1"] >= 6
    assert all(batches[f"c{i}"] == 2 for i in range(2, 8))  # screened out after two rounds


def test_finalists_get_their_own_cap_when_screening_took_longer_than_it():
    # 20 ms a call, one call a batch: two screening rounds of 9 contenders take 0.36 s, past
    # the 0.3 s cap; the baseline and the two finalists must still reach min_batches.
    workers = {"base": _Worker(20_000.0), **{f"c{i}": _Worker(20_000.0 + 1_000 * i) for i in range(8)}}
    records = _time(
        workers,
        TimingOptions(time_cap_s=0.3, min_batches=6, min_samples=1, finalists=2, batch_target_us=1_000),
        keep=frozenset({"base"}),
    )
    batches = {n: len(r.batch_sizes) for n, r in records.items()}
    assert sorted(n for n, b in batches.items() if b >= 6) == ["base", "c0", "c1"], batches
    assert all(batches[f"c{i}"] == 2 for i in range(2, 8)), batches


def test_the_mode_reaches_the_worker_and_stream_pairs_follow_it():
    for mode in ("latency", "throughput"):
        worker = _Worker(300.0)
        record = _time({"a": worker}, TimingOptions(time_cap_s=0.2, min_batches=3, mode=mode, batch_target_us=1_500))[
            "a"
        ]
        assert worker.modes == {mode}
        pairs = len(record.batch_sizes) if mode == "throughput" else len(record.samples_us)
        assert len(record.host_us) == len(record.event_us) == pairs
        assert len(record.samples_us) == sum(record.batch_sizes)


def test_every_replica_of_a_contender_is_visited_each_round_and_its_batches_are_marked():
    first, second = _Worker(100.0), _Worker(150.0)
    records = _time(
        {"a": (first, second), "b": _Worker(120.0)}, TimingOptions(time_cap_s=0.5, min_batches=6, batch_target_us=1_000)
    )
    record = records["a"]
    assert len(first.batches) == len(second.batches) >= 4  # a warm-up and three rounds at least
    assert sorted(set(record.batch_workers)) == [0, 1]
    assert record.batch_workers.count(0) == record.batch_workers.count(1)
    m = record.measurement()
    # Each worker's median is its own calls' time on the parent's clock: 100 and 150 us a call.
    assert m.workers == 2 and m.worker_medians == pytest.approx((100.0, 150.0), abs=0.01)
    assert records["b"].measurement().workers == 1


def test_a_contender_whose_first_kept_batch_left_the_gpu_busy_is_timed_again(monkeypatch):
    # On the H100 the look after a contender's first kept batch found the GPU busy: that batch
    # was dropped, the round ended with no measurement of it, and the stop rule read its median.
    looks = iter(range(1_000))
    first_kept = 1 + 2  # the look before the first window, then one after each warm-up batch

    def look(self):
        n = next(looks)
        busy = n == first_kept
        return CheckResult("GPU left busy", not busy, "busy" if busy else "", {"wall_us": 6e3 if busy else 3e3})

    monkeypatch.setattr(HarnessCost, "gpu_left_busy", look)
    records = _time(
        {"a": _Worker(100.0), "b": _Worker(120.0)},
        TimingOptions(time_cap_s=0.3, min_batches=4, batch_target_us=1_000),
        window=lambda worker: None,
    )
    assert not any(r.failed for r in records.values())
    dropped = [n for n, r in records.items() if r.busy_batches]
    assert len(dropped) == 1
    record = records[dropped[0]]
    assert any(c.name == verify.BUSY_RETIMED and c.passed for c in record.checks)
    assert record.measurement() is not None and len(record.batch_sizes) >= 4
    other = records[({"a", "b"} - set(dropped)).pop()]
    assert len(record.batch_sizes) == len(other.batch_sizes) - 1  # one round's batch of it not kept


def test_a_failed_batch_on_any_replica_ends_the_contender():
    class _WrongAfterWarmUp(_Worker):
        def request(self, message, timeout_s, phase):
            reply = super().request(message, timeout_s, phase)
            if message["op"] == "time" and len(self.batches) > 1:
                reply["fingerprints"] = [[hash_tensor(OUT + 1)] for _ in reply["fingerprints"]]
            return reply

    records = _time(
        {"a": (_Worker(100.0), _WrongAfterWarmUp(100.0)), "b": _Worker(100.0)},
        TimingOptions(time_cap_s=0.3, min_batches=6, batch_target_us=1_000),
    )
    assert records["a"].failed and not records["b"].failed
    assert any(not c.passed for c in records["a"].checks)


@pytest.mark.parametrize(
    "forge",
    [
        lambda reply: reply.pop("fingerprints"),  # a field left out
        lambda reply: reply.update(host_us="fast"),  # a field of the wrong type
        lambda reply: reply.update(fingerprints=reply["fingerprints"][:-1]),  # one call's commitment short
        lambda reply: reply.update(fingerprints=[[[1.0, 2.0, 3.0]] for _ in reply["fingerprints"]]),  # not digests
    ],
)
def test_a_malformed_reply_fails_its_contender_and_the_others_carry_on(forge):
    # The worker is the candidate's process: what it replies is the candidate's to forge.
    class _Forger(_Worker):
        def request(self, message, timeout_s, phase):
            reply = super().request(message, timeout_s, phase)
            if message["op"] == "time" and len(self.batches) > 1:
                forge(reply)
            return reply

    records = _time(
        {"a": _Forger(100.0), "b": _Worker(100.0)}, TimingOptions(time_cap_s=0.3, min_batches=6, batch_target_us=1_000)
    )
    assert records["a"].failed and not records["b"].failed
    failed = [c for c in records["a"].checks if not c.passed]
    assert [c.name for c in failed] == ["protocol"]
    assert "malformed reply to op 'time'" in failed[0].evidence
    assert records["b"].measurement().n >= 6


def _screened_field():
    """A baseline and six candidates (enough to screen with two finalists), a second worker
    for each, and an `exclusive()` whose `held` list says whether a timing phase is on."""
    workers = {"base": _Worker(400.0), **{f"c{i}": _Worker(100.0 + 100 * i) for i in range(6)}}
    seconds = {n: _Worker(w.call_us) for n, w in workers.items()}
    held: list[bool] = []

    @contextlib.contextmanager
    def exclusive():
        held.append(True)
        yield
        held.pop()

    return workers, seconds, held, exclusive


def test_only_the_finalists_get_replicas_and_they_are_built_outside_the_exclusive_phases():
    problem = load_problem(PROBLEMS / "scale_add.py")
    workers, seconds, held, exclusive = _screened_field()
    asked = []

    def replicate(chosen):
        asked.append((sorted(chosen), bool(held)))
        return {n: (w, seconds[n]) for n, w in chosen.items()}

    records = time_interleaved(
        TimedShape(
            problem,
            problem.shapes_for("cpu")[0],
            _Worker(1.0),
            INFO,
            TimingOptions(time_cap_s=0.5, min_batches=6, finalists=2, batch_target_us=1_000),
            10.0,
            random.Random(0),
        ),
        workers,
        TimingHooks(progress=lambda _: None, keep=frozenset({"base"}), replicate=replicate, exclusive=exclusive),
    )
    assert asked == [(["base", "c0", "c1"], False)]
    assert all(seconds[n].batches for n in ("base", "c0", "c1"))
    assert not any(seconds[f"c{i}"].batches for i in range(2, 6))
    assert set(records["c0"].batch_workers) == {0, 1} and set(records["c5"].batch_workers) == {0}


def test_workers_are_retired_once_when_screened_out_and_the_rest_when_timing_ends():
    # On the H200 15 workers holding swiglu's finished prefill timing ran its decode trials out
    # of GPU memory beside another problem: a worker's memory goes back when its timing is over.
    problem = load_problem(PROBLEMS / "scale_add.py")
    workers, seconds, held, exclusive = _screened_field()
    events = []
    name_of = {id(w): n for n, w in workers.items()} | {id(w): n + "-r2" for n, w in seconds.items()}

    def replicate(chosen):
        events.append(("replicate", sorted(chosen)))
        return {n: (w, seconds[n]) for n, w in chosen.items()}

    def retire(done):
        assert not held, "retired inside an exclusive timing phase"
        events.append(("retire", sorted(name_of[id(w)] for w in done)))

    time_interleaved(
        TimedShape(
            problem,
            problem.shapes_for("cpu")[0],
            _Worker(1.0),
            INFO,
            TimingOptions(time_cap_s=0.3, min_batches=4, finalists=2, batch_target_us=1_000),
            10.0,
            random.Random(0),
        ),
        workers,
        TimingHooks(
            progress=lambda _: None, keep=frozenset({"base"}), replicate=replicate, exclusive=exclusive, retire=retire
        ),
    )
    assert events == [
        ("retire", ["c2", "c3", "c4", "c5"]),
        ("replicate", ["base", "c0", "c1"]),
        ("retire", ["base", "base-r2", "c0", "c0-r2", "c1", "c1-r2"]),
    ]


def test_few_contenders_are_retired_together_when_timing_ends():
    retired = []
    problem = load_problem(PROBLEMS / "scale_add.py")
    workers = {"a": _Worker(100.0), "b": _Worker(100.0)}
    time_interleaved(
        TimedShape(
            problem,
            problem.shapes_for("cpu")[0],
            _Worker(1.0),
            INFO,
            TimingOptions(time_cap_s=0.2, min_batches=2, batch_target_us=500),
            10.0,
            random.Random(0),
        ),
        workers,
        TimingHooks(progress=lambda _: None, retire=lambda done: retired.append(sorted(map(id, done)))),
    )
    assert retired == [sorted(map(id, workers.values()))]


def test_the_parents_clock_shows_the_time_a_worker_leaves_out_of_its_report():
    from bot.engine.timing import hidden

    for mode in ("latency", "throughput"):  # calls timed one by one, and batches back to back
        options = TimingOptions(time_cap_s=0.3, min_batches=6, batch_target_us=4_000, mode=mode)
        records = _time(
            {"base": _Worker(400.0), "honest": _Worker(400.0), "liar": _Worker(800.0, reports=0.25)},
            options,
            keep=frozenset({"base"}),
        )
        for name in records:
            assert (
                len(records[name].unexplained_us)
                == len(records[name].reported_us)
                == len(records[name].batch_sizes)
                >= 4
            )
        # The stand-in's own work per call is nil: what is unexplained is what the liar hid (600 us).
        assert min(records["liar"].unexplained_us) > 500, mode
        assert max(records["liar"].reported_us) < 300, mode
        found = hidden.hidden_time_checks(records, "base")
        checks = {n: hidden.check_hidden_time(f, rejects=True) for n, f in found.items()}
        assert set(checks) == {"base", "honest", "liar"}
        assert checks["honest"].passed, (mode, checks["honest"].details)
        assert not checks["liar"].passed and "tampered" in checks["liar"].evidence, checks["liar"].details
