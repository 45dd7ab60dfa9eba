"""GPU lanes with fake devices: one queue, least-loaded lanes, verdicts independent of lanes."""

from __future__ import annotations

import threading
import time

from bot import cores
from bot.candidates import default_baseline, load_candidate
from bot.evaluate import evaluate
from bot.lanes import Lanes, run_problems
from bot.problems import load_problem
from conftest import CANDIDATES, PROBLEMS


def _problems(n):
    base = load_problem(PROBLEMS / "scale_add.py")
    return [type(base)(**{**base.__dict__, "name": f"p{i}"}) for i in range(n)]


def test_work_queue_spreads_problems_over_lanes_and_keeps_order():
    lanes = Lanes([0, 1])
    running: dict[int, int] = {0: 0, 1: 0}
    peak: dict[int, int] = {0: 0, 1: 0}
    guard = threading.Lock()

    def work(problem, gpu):
        with guard:
            running[gpu] += 1
            peak[gpu] = max(peak[gpu], running[gpu])
        time.sleep(0.05)
        with guard:
            running[gpu] -= 1
        return problem.name, gpu

    results = run_problems(_problems(8), work, jobs=2, lanes=lanes, progress=lambda _: None)
    assert [name for name, _ in results] == [f"p{i}" for i in range(8)]
    used = [gpu for _, gpu in results]
    assert used.count(0) >= 2 and used.count(1) >= 2  # both lanes take work from the queue
    assert peak == {0: 1, 1: 1}  # with two jobs, one problem per lane at a time


def test_each_lane_reserves_its_own_timing_core(monkeypatch):
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: set(range(16)))
    cores.set_lanes([0, 1])
    try:
        assert {cores.timing_core(0), cores.timing_core(1)} == {14, 15}
        assert cores.worker_cores() == set(range(14))
        monkeypatch.setattr(cores.os, "sched_getaffinity", lambda _: {0, 1})
        assert cores.timing_core(0) is None and cores.worker_cores() == {0, 1}
    finally:
        cores.set_lanes([None])


def test_verdicts_do_not_depend_on_the_number_of_lanes(quick_options):
    problem = load_problem(PROBLEMS / "scale_add.py")
    names = ["honest", "cheat_low_precision", "cheat_stale_after_warmup"]
    verdicts = []
    for devices in ([None], [None, None]):
        lanes = Lanes(devices)

        def work(prob, gpu):
            result = evaluate(prob, [load_candidate(CANDIDATES / f"{n}.py") for n in names],
                              default_baseline(prob), quick_options(gpu_index=gpu))
            return {o.candidate.name: o.verdict.status for o in result.candidates}
        verdicts.append(run_problems([problem, problem], work, jobs=len(devices), lanes=lanes,
                                     progress=lambda _: None))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] == {"honest": "accepted", "cheat_low_precision": "rejected",
                              "cheat_stale_after_warmup": "rejected"}
