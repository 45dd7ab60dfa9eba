"""A replica's first call is made beside other work, holding the device shared as a trial call
does, and not in the timing's exclusive warm-up, where every other problem waits for it."""

from __future__ import annotations

import contextlib
import logging

from conftest import CANDIDATES, PROBLEMS

from bot.engine.evaluation import shape_run as shape_run_module
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.timing.records import TimingOptions
from bot.engine.workers import phase_clock
from bot.engine.workers.client import WorkerClient
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem


def test_a_replicas_first_call_is_made_under_the_shared_hold_before_the_timing(quick_options, monkeypatch):
    held: list[str] = []
    seen: list[tuple[str, str, tuple[str, ...]]] = []

    def holding(kind, real):
        @contextlib.contextmanager
        def hold(key, *waited):
            with real(key, *waited):
                held.append(kind)
                try:
                    yield
                finally:
                    held.pop()

        return hold

    monkeypatch.setattr(shape_run_module, "gpu_shared", holding("shared", shape_run_module.gpu_shared))
    monkeypatch.setattr(shape_run_module, "gpu_exclusive", holding("exclusive", shape_run_module.gpu_exclusive))
    request = WorkerClient.request

    def spy(self, message, *args, **kwargs):
        if message.get("op") in ("run", "time"):
            seen.append((self.label, message["op"], tuple(held)))
        return request(self, message, *args, **kwargs)

    monkeypatch.setattr(WorkerClient, "request", spy)

    problem = load_problem(PROBLEMS / "scale_add.py")
    timing = TimingOptions(time_cap_s=0.3, min_samples=5, replicas=2)
    result = evaluate(
        problem,
        [load_candidate(CANDIDATES / "honest.py")],
        load_candidate(CANDIDATES / "honest.py"),
        quick_options(timing=timing),
    )
    assert result.candidates[0].verdict.accepted, result.candidates[0].verdict.reasons
    for replica in ("c0-r2", "c1-r2"):
        calls = [(op, hold) for label, op, hold in seen if label == replica]
        assert calls[0] == ("run", ("shared",)), calls[:3]  # compiled beside others, not in the timing
        assert all(hold == ("exclusive",) for op, hold in calls if op == "time")
        assert sum(op == "run" for op, _ in calls) == len(problem.shapes_for("cpu"))  # once per shape


def test_each_kind_of_hold_logs_its_wait_for_the_device(quick_options, monkeypatch, caplog):
    # Which waits a problem's time goes to, for a -v run to tell (the split has only their union).
    monkeypatch.setattr(phase_clock, "WAIT_LOGGED_S", 0.0)  # every wait logged, however short
    caplog.set_level(logging.DEBUG, logger=phase_clock.__name__)
    problem = load_problem(PROBLEMS / "scale_add.py")
    honest = load_candidate(CANDIDATES / "honest.py")
    evaluate(problem, [honest], honest, quick_options(timing=TimingOptions(time_cap_s=0.3, min_samples=5, replicas=2)))
    waits = [r.getMessage() for r in caplog.records if "for the device" in r.getMessage()]
    for what in ("a trial call", "a replica's first call", "a timing"):
        assert any(m.startswith(f"{problem.name} [") and f"]: {what} waited " in m for m in waits), (what, waits)
