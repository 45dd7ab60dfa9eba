"""The scheduler's admission and the host memory limit, with fake memory figures."""

from __future__ import annotations

import os
import threading

import pytest

from bot.core.memory import (
    GIB,
    HOST_FLOOR_BYTES,
    Demand,
    admit,
    contenders_at_once,
    host_limit_bytes,
    margin_bytes,
    problem_demand,
)
from bot.engine.workspace.memory_budget import DoesNotFit, MemoryBudget, host_memory

H100_TOTAL = 80 * GIB
MARGIN = margin_bytes(H100_TOTAL)  # 8 GiB


def test_the_margin_is_a_tenth_of_the_device_and_at_least_one_gib():
    assert MARGIN == 8 * GIB
    assert margin_bytes(4 * GIB) == GIB


def test_problems_of_different_footprints_run_while_they_fit_and_the_rest_wait_in_order():
    waiting = [Demand("softmax", 30 * GIB), Demand("gelu", 25 * GIB), Demand("relu", 20 * GIB), Demand("tiny", GIB)]
    first = admit(waiting, free_bytes=79 * GIB, held_bytes=0, margin=MARGIN)
    # 71 GiB usable: softmax and gelu (55 GiB); relu would make 75; tiny waits behind relu.
    assert first.run == ("softmax", "gelu") and first.wait == ("relu", "tiny") and not first.refused
    later = admit(waiting[2:], free_bytes=79 * GIB, held_bytes=25 * GIB, margin=MARGIN)  # softmax finished
    assert later.run == ("relu", "tiny") and not later.wait


def test_a_problem_that_fits_only_alone_waits_for_the_others_then_runs_alone():
    big = Demand("sum_reduction", 60 * GIB)
    beside = admit([big, Demand("small", GIB)], free_bytes=79 * GIB, held_bytes=20 * GIB, margin=MARGIN)
    assert beside.run == () and beside.wait == ("sum_reduction", "small")  # nothing overtakes it
    alone = admit([big, Demand("small", 15 * GIB)], free_bytes=79 * GIB, held_bytes=0, margin=MARGIN)
    assert alone.run == ("sum_reduction",) and alone.wait == ("small",)


def test_a_problem_that_fits_nowhere_is_refused_with_one_line_and_does_not_block_the_rest():
    verdict = admit([Demand("huge", 75 * GIB), Demand("ok", 10 * GIB)], 79 * GIB, 0, MARGIN)
    assert verdict.run == ("ok",) and not verdict.wait
    ((name, reason),) = verdict.refused
    assert name == "huge"
    assert reason == "needs 75.0 GiB, the device has 79.0 GiB free (8.0 GiB of it kept as a margin)"


def test_contenders_at_once_fill_what_the_reference_leaves_and_never_drop_below_one():
    ctx = 512 << 20
    # Reference 18 GiB; each contender 12 GiB + context: (71 - 18.5) // 12.5 = 4 of the 15 wanted.
    assert contenders_at_once(18 * GIB, 12 * GIB, 15, 71 * GIB, ctx) == 4
    assert contenders_at_once(18 * GIB, 12 * GIB, 2, 71 * GIB, ctx) == 2
    assert contenders_at_once(60 * GIB, 12 * GIB, 15, 71 * GIB, ctx) == 1
    assert problem_demand(18 * GIB, 12 * GIB, 4, ctx) == 18 * GIB + ctx + 4 * (12 * GIB + ctx)


def test_the_host_limit_scales_with_the_footprint_between_the_floor_and_the_machine():
    machine = 128 * GIB
    assert host_limit_bytes(GIB, machine) == HOST_FLOOR_BYTES
    # Sum_reduction_over_a_dimension: 8.6 GB input; inputs, outputs and float64 copies ~ 3x.
    footprint = 3 * int(8.6e9)
    assert host_limit_bytes(footprint, machine) == 2 * footprint > 16469 << 20
    assert host_limit_bytes(100 * GIB, machine) == machine - margin_bytes(machine)
    # A lowered floor, as a test machine's would be.
    assert host_limit_bytes(1 << 20, machine, floor_bytes=64 << 20) == 64 << 20


def _budget() -> MemoryBudget:
    return MemoryBudget(free_bytes=79 * GIB, total_bytes=80 * GIB, where="GPU 0", context_bytes=512 << 20)


def test_a_budget_grows_a_problem_to_the_contenders_that_fit_beside_the_others():
    budget = _budget()  # 71 GiB usable
    first = budget.start("softmax", workers=16)  # 8 GiB of contexts
    assert first.nbytes == 8 * GIB
    assert budget.grow(first, 18 * GIB, 12 * GIB, wanted=15) == 4  # (71 - 18.5) // 12.5
    assert first.nbytes == 18 * GIB + (512 << 20) + 4 * (12 * GIB + (512 << 20))  # 68.5 GiB
    budget.release(first)
    first = budget.start("softmax", workers=3)
    assert budget.grow(first, 18 * GIB, 12 * GIB, wanted=2) == 2  # 43.5 GiB
    second = budget.start("relu", workers=16)  # its 8 GiB of contexts fit beside
    # One relu contender beside its reference needs 25.5 + 5.5 GiB; 27.5 are left beside
    # softmax: relu waits until softmax is done, then takes what it leaves.
    done = threading.Event()
    got: list[int] = []

    def relu() -> None:
        got.append(budget.grow(second, 25 * GIB, 5 * GIB, wanted=15))
        done.set()

    thread = threading.Thread(target=relu)
    thread.start()
    assert not done.wait(0.5)  # waiting, not out of memory beside softmax
    budget.release(first)
    assert done.wait(5)
    thread.join()
    assert got == [8]  # (71 - 25.5) // 5.5 of the 15 wanted
    budget.release(second)
    assert budget.held_bytes() == 0


def test_a_problem_that_fits_nowhere_is_refused_in_one_line_and_holds_nothing():
    budget = _budget()
    held = budget.start("huge", workers=4)
    with pytest.raises(DoesNotFit) as refused:
        budget.grow(held, 60 * GIB, 20 * GIB, wanted=4)
    assert str(refused.value) == (
        "huge: needs 81.0 GiB with one contender beside its reference, GPU 0 has 79.0 GiB free "
        "(8.0 GiB of it kept as a margin)"
    )
    budget.release(held)
    with pytest.raises(DoesNotFit, match="its 200 workers needs 100.0 GiB"):
        budget.start("many", workers=200)
    assert budget.held_bytes() == 0


def test_problems_whose_contexts_do_not_fit_beside_others_start_in_turn():
    budget = _budget()
    a = budget.start("a", workers=100)  # 50 GiB of contexts
    started = threading.Event()
    thread = threading.Thread(target=lambda: (budget.start("b", workers=60), started.set()))
    thread.start()
    assert not started.wait(0.5)
    budget.release(a)
    assert started.wait(5)
    thread.join()


def test_host_memory_is_meminfo_within_the_cgroups_limit(tmp_path):
    meminfo = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n"
    assert host_memory(meminfo, tmp_path) == (20000000 * 1024, 24000000 * 1024)  # no memory.max: unlimited
    (tmp_path / "memory.max").write_text(f"{8 * GIB}\n")
    (tmp_path / "memory.current").write_text(f"{3 * GIB}\n")
    assert host_memory(meminfo, tmp_path) == (5 * GIB, 8 * GIB)
    (tmp_path / "memory.max").write_text("max\n")
    assert host_memory(meminfo, tmp_path)[1] == 24000000 * 1024


def test_the_gpu_budget_is_read_without_cuda_in_the_bot(tmp_path, monkeypatch):
    """nvidia-smi's figures, for torch's device index as CUDA_VISIBLE_DEVICES maps it; the bot's
    own process never starts CUDA for them."""
    import torch

    from bot.engine.workspace import device_name
    from bot.engine.workspace.memory_budget import device_budget

    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "$@" > "$0.args"\necho "81559, 81559"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert device_name.gpu_memory_bytes(1) == (81559 << 20, 81559 << 20)
    assert "--id=5" in (tmp_path / "nvidia-smi.args").read_text()

    def no_cuda_here(*_args):
        raise AssertionError("the bot's process started CUDA")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_cuda_here)
    budget = device_budget("cuda", 0)
    assert budget.where == "GPU 0" and budget.free_bytes == 81559 << 20


def test_while_a_reference_measures_its_shape_no_other_problem_measures_or_grows_beside_it():
    budget = _budget()  # 71 GiB usable
    a, b, c = (budget.start(name, workers=4) for name in "abc")  # 2 GiB of contexts each
    events = {name: threading.Event() for name in ("b sized", "b may finish", "c grew")}
    grown: list[tuple[int, bool]] = []  # (contenders at once, whether b was measuring then)

    def b_measures() -> None:
        with budget.sizing(b):
            events["b sized"].set()
            events["b may finish"].wait(5)

    def c_grows() -> None:
        at_once = budget.grow(c, 10 * GIB, 5 * GIB, wanted=4)
        grown.append((at_once, b.sizing_bytes > 0))
        events["c grew"].set()

    with budget.sizing(a):
        # a may allocate everything no one holds; contexts still start beside it.
        assert a.sizing_bytes == 71 * GIB - 6 * GIB
        late = budget.start("late", workers=2)
        threads = [threading.Thread(target=b_measures), threading.Thread(target=c_grows)]
        for thread in threads:
            thread.start()
        assert not events["b sized"].wait(0.5) and not events["c grew"].is_set()
    # a has measured: b measures, or c grows, whichever comes first; never c beside b measuring.
    assert a.sizing_bytes == 0
    assert events["b sized"].wait(5) or events["c grew"].is_set()
    if not events["c grew"].is_set():  # then b measures, and c waits for it
        assert not events["c grew"].wait(0.5)
    events["b may finish"].set()
    assert events["c grew"].wait(5)
    for thread in threads:
        thread.join()
    assert grown == [(4, False)] and b.sizing_bytes == 0
    for reservation in (a, b, c, late):
        budget.release(reservation)
    assert budget.held_bytes(sizing=True) == 0


def _session(split, budget):
    from types import SimpleNamespace

    from bot.engine.evaluation.worker_pool import Session

    session = SimpleNamespace(split=split, options=SimpleNamespace(memory=budget))
    return lambda peak, nbytes, contenders: Session._unless_too_large_together(session, peak, nbytes, contenders)


def test_a_shape_too_large_for_all_its_contenders_at_once_is_split_before_any_trial():
    """KernelBench's 19_ReLU on an H100: 6 GiB in and 6 GiB out, the reference's trial 36 GiB;
    ten contenders together ran the reference out of memory (55 s lost before the split)."""
    from bot.engine.evaluation.worker_pool import Split, TooLargeTogether

    check = _session(Split(finalists=4, replicas=2), _budget())  # 71 GiB usable
    with pytest.raises(TooLargeTogether, match=r"10 contenders together would hold up to 1\d\d\.\d GiB") as relu:
        check(36 * GIB, 12 * GIB, 10)
    assert relu.value.fits == 1  # the reference's trial and two calls' worth: one at a time
    # 47_Sum's 8 GiB input: three contenders (the baseline and two candidates) fit at once.
    with pytest.raises(TooLargeTogether) as reduction:
        check(24 * GIB, 8 * GIB, 10)
    assert reduction.value.fits == 3
    # 40_LayerNorm's 1 GiB in and out: all ten fit, in its trials and its timing's ten workers.
    check(6 * GIB, 2 * GIB, 10)
    # One candidate and its baseline are what a split would run anyway: never raised.
    _session(None, _budget())(36 * GIB, 12 * GIB, 10)


def test_together_the_timing_phase_can_be_the_larger():
    from bot.core.memory import together_bytes

    ctx = 512 << 20
    # A small reference peak, many timed workers: the timing's workers hold the most.
    assert together_bytes(3 * GIB, 2 * GIB, 3, 10, ctx) == 12 * 2 * GIB + 11 * ctx
    # The reference's float64 trial beside every waiting contender: the trials hold the most.
    assert together_bytes(40 * GIB, 2 * GIB, 3, 4, ctx) == 46 * GIB + 5 * ctx


def test_a_second_shape_counts_each_contender_once_however_many_replicas_it_has():
    from types import SimpleNamespace

    from bot.engine.evaluation.worker_pool import Session

    labels = ["reference", "c0", "c1", "c10", "c0-r2", "c1-r2", "c10-r2", "c10-r3"]
    session = SimpleNamespace(workers=[SimpleNamespace(label=label) for label in labels])
    assert Session.contenders(session) == 3


def test_the_timing_keeps_two_workers_per_contender_only_where_they_fit():
    """By what each worker holds after the trials: on KernelBench's 19_ReLU on an H100 (6 GiB in
    and out, the reference's trial 36 GiB) the baseline and one plain candidate, two workers
    each, would hold 77.5 GiB in the timing (each timed worker its last 6 GiB output); one each,
    63 GiB. 47_Sum's 8 GiB input with a scalar-sized output keeps two beside two candidates."""
    from bot.core.memory import replicas_that_fit, timing_bytes

    usable = 71 * GIB

    def fits(reference: int, contenders: list[int], call_in: int, call_out: int) -> int:
        need = lambda r: timing_bytes(reference, contenders, r, 4, call_in, call_out)  # noqa: E731
        return replicas_that_fit(lambda r: need(r) <= usable, 2)

    relu = (36 * GIB + (512 << 20), [GIB, GIB], 6 * GIB, 6 * GIB)
    assert timing_bytes(*relu[:2], 2, 4, *relu[2:]) == int(77.5 * GIB)
    assert timing_bytes(*relu[:2], 1, 4, *relu[2:]) == 63 * GIB
    assert fits(*relu) == 1
    assert fits(24 * GIB, [GIB, GIB, GIB], 8 * GIB, 4 << 20) == 2
    # A candidate that holds its CUDA graphs' 12 GiB of static buffers: not even one each fits,
    # and one is what the timing gets (the out-of-memory fallback judges the rest).
    assert fits(relu[0], [GIB, 13 * GIB], *relu[2:]) == 1

    # Asked for four, the most that fit: 30.5, 43, 55.5 and 68 GiB for one to four, 50 GiB free.
    def four(r: int) -> int:
        return timing_bytes(10 * GIB, [2 * GIB, 2 * GIB], r, 4, 4 * GIB, 4 * GIB)

    assert [four(r) / GIB for r in (1, 2, 3, 4)] == [30.5, 43, 55.5, 68]
    assert replicas_that_fit(lambda r: four(r) <= 50 * GIB, 4) == 2


def test_a_session_times_in_fewer_workers_by_what_the_driver_counts_and_says_why(monkeypatch):
    from types import SimpleNamespace

    import bot.engine.evaluation.worker_pool as pool
    from bot.engine.timing.records import TimingOptions
    from bot.engine.verification.trials import ReferenceInfo

    def worker(*pids):
        return SimpleNamespace(holder=lambda: SimpleNamespace(pids=pids))

    meta = [{"shape": [4096, 393216], "dtype": "float32"}]
    info = ReferenceInfo(meta=meta, nbytes=12 * GIB, peak_bytes=36 * GIB)
    budget = _budget()
    passed = {"c0": worker(11), "c1": worker(12, 13)}
    reference, rejected = worker(10), worker(14)
    session = SimpleNamespace(
        options=SimpleNamespace(device="cuda", memory=budget, gpu_index=0, timing=TimingOptions()),
        reservation=None,
        workers=[reference, *passed.values(), rejected],
    )
    used = {10: 30 * GIB, 11: GIB, 12: GIB // 2, 13: GIB // 2, 14: 2 * GIB, 99: 5 * GIB}  # 99: not the bot's
    monkeypatch.setattr(pool, "gpu_process_memory", lambda gpu: used)
    count, why = pool.Session.timing_replicas(session, info, reference, passed, 2)
    assert count == 1
    # 77.5 GiB for the timing's own, and the rejected contender's worker, still alive, 2 GiB.
    assert why is not None and "not 2" in why and "79.5 GiB" in why and "other workers 2.0 GiB" in why
    assert "do not carry" in why
    # A shape whose outputs are small keeps its replicas, without a word.
    small = ReferenceInfo(meta=[{"shape": [1024, 1024], "dtype": "float32"}], nbytes=8 << 20, peak_bytes=GIB)
    assert pool.Session.timing_replicas(session, small, reference, passed, 2) == (2, None)
    # Where the driver cannot say, as before.
    monkeypatch.setattr(pool, "gpu_process_memory", lambda gpu: None)
    assert pool.Session.timing_replicas(session, info, reference, passed, 2) == (2, None)


def test_a_shape_timed_in_fewer_workers_says_so_in_every_timed_contenders_checks(monkeypatch, quick_options):
    from conftest import CANDIDATES, PROBLEMS

    import bot.engine.evaluation.evaluate as ev
    import bot.engine.evaluation.worker_pool as pool
    from bot.engine.evaluation.shape_run import REPLICAS
    from bot.engine.workspace.candidates import default_baseline, load_candidate
    from bot.engine.workspace.problems import load_problem

    why = "timed in 1 worker(s) per contender, not 2: (the figures)"
    asked = []

    def one(self, info, reference, passed, wanted):
        asked.append(wanted)
        return 1, why

    monkeypatch.setattr(pool.Session, "timing_replicas", one)
    problem = load_problem(PROBLEMS / "scale_add.py")
    result = ev.evaluate(
        problem, [load_candidate(CANDIDATES / "honest.py")], default_baseline(problem), quick_options()
    )
    assert asked and set(asked) == {2}  # the settings' two, asked again for every shape
    for outcome in (result.baseline, *result.candidates):
        assert outcome is not None and outcome.verdict.accepted, outcome
        said = [c for c in outcome.verdict.checks if c.name == REPLICAS]
        assert said and said[0].passed and said[0].evidence == why
        # Every batch from the contender's one worker (two would number theirs 0 and 1).
        assert all(set(s.measurement.batch_workers) <= {0} for s in outcome.shapes if s.measurement)
    assert all(s.speedup is not None for s in result.candidates[0].shapes)


def _in_thread(call):
    """`call` on a thread of its own; (its result list, the event set when it returned, the thread)."""
    got: list = []
    done = threading.Event()
    thread = threading.Thread(target=lambda: (got.append(call()), done.set()))
    thread.start()
    return got, done, thread


def test_a_timing_widens_its_reservation_waiting_for_room_that_running_problems_hold():
    """KernelBench's shards on an H100: a problem's timing held more than its trials reserved,
    and another problem's reference, measuring its shape in that room, ran out of memory."""
    budget = _budget()  # 71 GiB usable
    a, b = budget.start("a", workers=2), budget.start("b", workers=2)
    budget.grow(a, 30 * GIB, 5 * GIB, wanted=1)  # 36 GiB
    budget.grow(b, 10 * GIB, 5 * GIB, wanted=1)  # 16 GiB
    waits: list[tuple[float, float]] = []
    got, done, thread = _in_thread(lambda: budget.widen(b, 40 * GIB, lambda began, at: waits.append((began, at))))
    assert not done.wait(0.5)  # 40 GiB beside a's 36 do not fit: b waits, holding its 16
    assert b.nbytes == 16 * GIB and b.waiting
    # Meanwhile a problem measures its shape in what no one holds (b goes on only after it).
    c = budget.start("c", workers=1)
    with budget.sizing(c):
        assert c.sizing_bytes == 71 * GIB - budget.held_bytes()
    budget.release(a)
    assert done.wait(5)
    thread.join()
    assert got == [True] and b.nbytes == 40 * GIB and not b.waiting
    ((began, at),) = waits
    assert at - began >= 0.5  # the wait, told to the problem's clock
    for reservation in (b, c):
        budget.release(reservation)


def test_problems_that_only_wait_for_each_other_never_deadlock():
    budget = _budget()  # 71 GiB usable
    a, b = budget.start("a", workers=2), budget.start("b", workers=2)
    budget.grow(a, 30 * GIB, 5 * GIB, wanted=1)
    budget.grow(b, 20 * GIB, 5 * GIB, wanted=1)  # 36 and 26 GiB
    # a widens past what fits beside b, which runs: a waits.
    a_got, a_done, a_thread = _in_thread(lambda: budget.widen(a, 50 * GIB))
    assert not a_done.wait(0.5)
    # b widens too: the only other problem waits itself (for b to end), so b goes on,
    # holding its figure though it does not fit; then a, once b is done.
    b_got, b_done, b_thread = _in_thread(lambda: budget.widen(b, 40 * GIB))
    assert b_done.wait(5) and b_got == [False] and b.nbytes == 40 * GIB
    assert not a_done.wait(0.3)
    budget.release(b)
    assert a_done.wait(5) and a_got == [True]
    for thread in (a_thread, b_thread):
        thread.join()
    # A problem waiting to grow (its second shape) beside one that widens: the widening goes
    # on, since the waiting one frees nothing before it; the grow waits for it to end.
    c = budget.start("c", workers=2)
    budget.grow(c, 10 * GIB, 5 * GIB, wanted=1)  # beside a's 50: 66.5 GiB
    c_got, c_done, c_thread = _in_thread(lambda: budget.grow(c, 30 * GIB, 5 * GIB, wanted=1))
    assert not c_done.wait(0.5)
    assert budget.widen(a, 60 * GIB) is False  # c waits: a goes on without waiting for it
    budget.release(a)
    assert c_done.wait(5) and c_got == [1]
    c_thread.join()
    budget.release(c)
    assert budget.held_bytes(sizing=True) == 0


def test_a_session_holds_its_timings_figure_and_counts_its_waits_for_memory(monkeypatch):
    from types import SimpleNamespace

    import bot.engine.evaluation.worker_pool as pool
    from bot.core.memory import timing_bytes
    from bot.engine.timing.records import TimingOptions
    from bot.engine.verification.trials import ReferenceInfo
    from bot.engine.workers.phase_clock import PhaseClock

    def worker(*pids):
        return SimpleNamespace(holder=lambda: SimpleNamespace(pids=pids))

    budget = _budget()
    clock = PhaseClock()
    reference, passed = worker(10), {"c0": worker(11), "c1": worker(12)}
    session = SimpleNamespace(
        options=SimpleNamespace(device="cuda", memory=budget, gpu_index=0, timing=TimingOptions()),
        problem=SimpleNamespace(name="relu"),
        clock=clock,
        workers=[reference, *passed.values()],
    )
    session._waits = lambda what, budget: pool.Session._waits(session, what, budget)
    session.reservation = budget.start("relu", workers=3, waited=session._waits("its workers' start", budget))
    budget.grow(session.reservation, 36 * GIB, 12 * GIB, wanted=1)
    other = budget.start("other", workers=1)
    budget.grow(other, 20 * GIB, GIB, wanted=1)  # 21.5 GiB: 49.5 left, the timing needs more
    used = {10: 37 * GIB, 11: GIB, 12: GIB}
    monkeypatch.setattr(pool, "gpu_process_memory", lambda gpu: used)
    info = ReferenceInfo(meta=[{"shape": [4096, 393216], "dtype": "float32"}], nbytes=12 * GIB, peak_bytes=36 * GIB)
    figure = timing_bytes(37 * GIB, [GIB, GIB], 1, TimingOptions().finalists, 6 * GIB, 6 * GIB)
    assert figure > 49.5 * GIB
    got, done, thread = _in_thread(lambda: pool.Session.timing_replicas(session, info, reference, passed, 2))
    assert not done.wait(0.5)  # waiting for the other problem's room
    budget.release(other)
    assert done.wait(5)
    thread.join()
    assert got[0][0] == 1 and session.reservation.nbytes == figure
    split = clock.split()
    assert split.device_wait_s is not None and split.device_wait_s >= 0.5
