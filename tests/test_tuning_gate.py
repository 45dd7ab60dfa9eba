"""Code that tunes by timing: its compilation beside other trials, its timing of kernel
variants with the GPU to itself (bot.harness.tuning_gate in the worker,
bot.engine.workers.gpulock.GpuHandover and bot.engine.verification.trials in the bot)."""

from __future__ import annotations

import contextlib
import random
import threading
import time

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.engine.verification import tuning_note
from bot.engine.verification.trials import DeviceHolds, TrialRun, run_trials
from bot.engine.workers.client import WorkerClient, WorkerFailure
from bot.engine.workers.gpulock import GpuHandover, _RWLock
from bot.engine.workspace.problems import load_problem
from bot.harness.tuning_gate import TuningGate
from bot.sandbox import Limits, WorkerLaunch
from bot.sandbox.process import ProcessSandbox

PROBLEM = PROBLEMS / "scale_add.py"


class _Channel:
    """The worker's end of the channel, answering as the bot would."""

    def __init__(self, answer="granted"):
        self.said: list[str] = []
        self.answer = answer

    def send(self, frame):
        self.said.append(frame["gate"])

    def recv(self):
        return {"gate": self.answer}


def test_the_gate_asks_once_per_gated_call_before_its_first_timing():
    channel, synced = _Channel(), []
    gate = TuningGate(channel, lambda: synced.append(len(channel.said)))
    timing = gate.wrap(lambda: "timed")
    assert timing() == "timed" and channel.said == []  # not in a gated call: a timing call, say
    with gate.gated_call():
        assert gate.account() is None  # nothing timed yet
        time.sleep(0.05)
        assert [timing() for _ in range(5)] == ["timed"] * 5  # an autotuner times many variants
    assert channel.said == ["want"] and synced == [0]  # once; its queued kernels done first
    first, last, count = gate.account()
    assert count == 5 and 0.05 <= first <= last < 5  # its own account: seconds from the call's start
    assert timing() == "timed" and channel.said == ["want"]  # the call over, no more asking
    assert gate.account()[2] == 5  # a timing outside a gated call is not its account's
    with gate.gated_call():  # the next shape's first call tunes again
        timing()
    assert channel.said == ["want", "want"] and gate.account()[2] == 1


def test_the_gate_refuses_to_go_on_after_a_wrong_answer():
    gate = TuningGate(_Channel("no"), lambda: None)
    with gate.gated_call(), pytest.raises(RuntimeError, match="the bot answered"):
        gate.wrap(lambda: None)()


def test_the_gate_hooks_inductors_benchmarker_and_tritons_autotuner_once():
    from torch._inductor.runtime import benchmarking

    before = benchmarking.Benchmarker.benchmark_gpu
    try:
        gate = TuningGate(_Channel(), lambda: None)
        hooks = gate.install()
        assert "Benchmarker.benchmark_gpu" in hooks and "InductorBenchmarker.benchmark_gpu" in hooks
        assert "triton Autotuner._bench" in hooks
        hooked = benchmarking.Benchmarker.benchmark_gpu
        assert TuningGate(_Channel(), lambda: None).install() == hooks  # a second gate wraps nothing again
        assert benchmarking.Benchmarker.benchmark_gpu is hooked
    finally:
        benchmarking.Benchmarker.benchmark_gpu = before


def test_a_handover_never_holds_shared_and_exclusive_at_once():
    events: list[str] = []

    def hold(kind):
        @contextlib.contextmanager
        def held():
            events.append(f"{kind} taken")
            yield
            events.append(f"{kind} given back")

        return held

    with GpuHandover(hold("shared"), hold("exclusive")) as handover:
        assert handover("want") == "granted"
        assert handover("later") == "unknown request 'later'"
        events.append("the rest of the call")
    assert events == [
        "shared taken",
        "shared given back",
        "exclusive taken",
        "the rest of the call",
        "exclusive given back",
    ]


def test_a_handover_counts_how_long_it_held_the_gpu_alone():
    def hold():
        return contextlib.nullcontext()

    with GpuHandover(hold, hold) as untuned:
        time.sleep(0.05)
    assert untuned.alone_s == 0.0  # never asked: shared throughout
    with GpuHandover(hold, hold) as tuned:
        time.sleep(0.05)  # compiling, shared
        tuned("want")
        time.sleep(0.2)  # timing variants, and the rest of the call
    assert 0.2 <= tuned.alone_s < 1.0


def _worker(tmp_path, name, candidate=None):
    """A real worker on the CPU, built: a candidate's, or without one the float64 reference."""
    readable = (PROBLEM, PROBLEMS) + ((candidate,) if candidate else ())
    client = WorkerClient(
        ProcessSandbox(),
        name,
        WorkerLaunch(
            workdir=tmp_path / f"w-{name}",
            cache_dir=tmp_path / "c",
            readable=readable,
            device="cpu",
            limits=Limits(call_timeout_s=60),
        ),
        threads=1,
    )
    client.request(
        {
            "op": "load",
            "problem": str(PROBLEM),
            "module": str(candidate) if candidate else None,
            "class_name": "ModelNew" if candidate else "Model",
            "precision": "native" if candidate else "float64",
        },
        120,
        "import",
    )
    client.request({"op": "construct", "overrides": {}, "seed": 3}, 60, "construct")
    return client


def test_a_self_tuning_contender_runs_beside_the_others_and_times_with_the_gpu_to_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(tuning_note, "ALONE_NOTE_S", 1e-9)  # every hold alone said, however short
    problem = load_problem(PROBLEM)
    lock, state, log = _RWLock(), {"readers": 0}, []
    guard = threading.Lock()

    def shared():
        @contextlib.contextmanager
        def held():
            with lock.shared():
                with guard:
                    state["readers"] += 1
                yield
                with guard:
                    state["readers"] -= 1

        return held()

    @contextlib.contextmanager
    def exclusive():
        with lock.exclusive():
            log.append(("exclusive", state["readers"]))
            yield

    reference = _worker(tmp_path, "reference")
    contenders = {
        "plain": _worker(tmp_path, "plain", CANDIDATES / "honest.py"),
        "tuned": _worker(tmp_path, "tuned", CANDIDATES / "tunes_by_timing.py"),
    }
    said: list[str] = []
    try:
        _, checks, _ = run_trials(
            TrialRun(problem, problem.shapes_for("cpu")[0], reference, random.Random(0), 1, (60.0, 60.0), 2),
            contenders,
            lambda event: said.append(event.line()),
            DeviceHolds(alone=frozenset({"tuned"}), shared=shared, exclusive=exclusive),
        )
    finally:
        for worker in (reference, *contenders.values()):
            worker.close()
    assert all(c.passed for found in checks.values() for c in found), checks
    # One timing of variants (the first call's), with no trial beside it; no series of trials alone.
    assert log == [("exclusive", 0)]
    assert any("1 of them timing their kernel variants with the GPU to themselves" in s for s in said)
    assert not any("one at a time" in s for s in said)
    # Where the others' time went: the tuning contender's hold alone, said once, by its name.
    alone = [s for s in said if "with the GPU to itself for" in s]
    assert len(alone) == 1 and "]: tuned timed its kernel variants" in alone[0], said
    # With what the worker says it spent timing: the fixture times once, at its first call.
    assert "; by its own account it timed 1 variant(s) from 0 s to 0 s of the call" in alone[0], alone


def test_the_note_of_a_hold_alone_quotes_the_workers_account_within_bounds():
    from bot.engine.verification.tuning_note import ALONE_NOTE_S, alone_note

    assert alone_note("mm", ALONE_NOTE_S / 2, 60.0, [1.0, 2.0, 3.0]) is None  # too short to say
    line = alone_note("mm", 41.2, 74.0, [33.4, 52.0, 240.0])
    assert line == (
        "mm timed its kernel variants with the GPU to itself for 41 s of its 74 s call: other work on this "
        "GPU waited meanwhile; by its own account it timed 240 variant(s) from 33 s to 52 s of the call"
    )
    assert alone_note("mm", 41.2, 74.0, None).endswith("waited meanwhile")
    # A worker's figures are its own: absurd ones are clipped, never a line of 300 digits.
    wild = alone_note("mm", 6.0, 7.0, [-5.0, 1e300, 1e300])
    assert wild is not None and len(wild) < 250 and "from 0 s to 1000000000 s" in wild


def test_self_tuning_contenders_asking_at_once_take_turns_without_deadlock(tmp_path):
    # Three contenders at once, two of them asking for the GPU while the others hold it shared:
    # each timing waits for the shared holds to end, and every trial still finishes.
    problem = load_problem(PROBLEM)
    lock, granted = _RWLock(), []

    @contextlib.contextmanager
    def exclusive():
        with lock.exclusive():
            granted.append(threading.current_thread().name)
            yield

    reference = _worker(tmp_path, "reference")
    contenders = {
        "plain": _worker(tmp_path, "plain", CANDIDATES / "honest.py"),
        "tuned1": _worker(tmp_path, "tuned1", CANDIDATES / "tunes_by_timing.py"),
        "tuned2": _worker(tmp_path, "tuned2", CANDIDATES / "tunes_by_timing.py"),
    }
    outcome: dict = {}

    def trials():
        outcome["checks"] = run_trials(
            TrialRun(problem, problem.shapes_for("cpu")[0], reference, random.Random(0), 1, (60.0, 60.0), 3),
            contenders,
            lambda _: None,
            DeviceHolds(alone=frozenset({"tuned1", "tuned2"}), shared=lock.shared, exclusive=exclusive),
        )[1]

    runner = threading.Thread(target=trials, daemon=True)
    try:
        runner.start()
        runner.join(timeout=180)
        assert not runner.is_alive(), "the trials did not finish: a deadlock between the holds"
    finally:
        for worker in (reference, *contenders.values()):
            worker.close()
    assert all(c.passed for found in outcome["checks"].values() for c in found)
    assert len(granted) == 2  # one timing of variants each, in turn


def test_a_worker_asking_for_the_gpu_outside_a_gated_trial_is_failed(tmp_path):
    client = _worker(tmp_path, "tuned", CANDIDATES / "tunes_by_timing.py")
    try:
        assert client.request({"op": "gate"}, 60, "call")["hooks"]
        with pytest.raises(WorkerFailure) as failure:
            client.request({"op": "run", "seed": 1, "gate": True}, 60, "call")
        assert failure.value.phase == "channel" and "outside a gated trial" in failure.value.reason
    finally:
        client.close()
