"""GPU lanes with fake devices: one queue, least-loaded lanes, verdicts independent of lanes."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.errors import BotError, GpuOutOfMemory, HarnessError, ProblemError
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.loop.lanes import Lanes, run_problems
from bot.engine.workers.client import WorkerFailure
from bot.engine.workers.failures import problem_failure
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import load_problem
from bot.sandbox import cores

pytestmark = pytest.mark.timing  # asserts what real timing claims: run alone, not beside other tests


def _problems(n):
    base = load_problem(PROBLEMS / "scale_add.py")
    return [type(base)(**{**base.__dict__, "name": f"p{i}"}) for i in range(n)]


def test_work_queue_spreads_problems_over_lanes_and_keeps_order():
    lanes = Lanes([0, 1])
    running: dict[int, int] = {0: 0, 1: 0}
    peak: dict[int, int] = {0: 0, 1: 0}
    guard = threading.Lock()

    def work(problem, gpu, beside_others):
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

        def work(prob, gpu, beside_others):
            result = evaluate(
                prob,
                [load_candidate(CANDIDATES / f"{n}.py") for n in names],
                default_baseline(prob),
                quick_options(gpu_index=gpu),
            )
            return {o.candidate.name: o.verdict.status for o in result.candidates}

        verdicts.append(run_problems([problem, problem], work, jobs=len(devices), lanes=lanes, progress=lambda _: None))
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][0] == {
        "honest": "accepted",
        "cheat_low_precision": "rejected",
        "cheat_stale_after_warmup": "rejected",
    }


def test_a_problem_out_of_gpu_memory_beside_others_runs_again_alone_after_them():
    # The H200 sweep lost its last problems this way: swiglu's reference worker ran out of
    # memory beside 56 other workers and the whole `bot optimize` stopped with exit code 2.
    calls: list[tuple[str, int]] = []  # (problem, problems running at that moment)
    told: list[tuple[str, bool]] = []  # (problem, beside_others as work was told)
    running = [0]
    guard = threading.Lock()

    def work(problem, gpu, beside_others):
        with guard:
            running[0] += 1
            calls.append((problem.name, running[0]))
            told.append((problem.name, beside_others))
        try:
            time.sleep(0.05)
            if problem.name == "p1" and sum(name == "p1" for name, _ in calls) == 1:
                raise GpuOutOfMemory(f"{problem.name}: reference worker ran out of GPU memory")
            return problem.name
        finally:
            with guard:
                running[0] -= 1

    seen: list[str] = []
    results = run_problems(
        _problems(4), work, jobs=4, lanes=Lanes([0]), progress=lambda event: seen.append(event.line())
    )
    assert results == ["p0", "p1", "p2", "p3"]
    assert [name for name, _ in calls].count("p1") == 2
    assert calls[-1] == ("p1", 1)  # the second time last, and alone
    # ... and told so: there a contender short of memory is short of memory by itself.
    assert told[-1] == ("p1", False) and all(beside for _, beside in told[:-1])
    assert any("ran out of GPU memory beside others" in line for line in seen)
    # Said when it happens, before the others finish (a sweep cut off at its time limit has it).
    failed = next(i for i, line in enumerate(seen) if line.startswith("[2/4] failed: p1: "))
    assert "runs again alone" in seen[failed]
    assert failed < next(i for i, line in enumerate(seen) if "running them again" in line)


def test_one_problems_error_does_not_stop_the_others_and_is_raised_after_them():
    finished: list[str] = []

    def work(problem, gpu, beside_others):
        if problem.name in ("p0", "p2"):
            raise ProblemError(f"{problem.name}: get_inputs() must return a list")
        time.sleep(0.02)
        finished.append(problem.name)
        return problem.name

    seen: list[str] = []
    with pytest.raises(BotError) as raised:
        run_problems(_problems(4), work, jobs=2, lanes=Lanes([None]), progress=lambda event: seen.append(event.line()))
    assert sorted(finished) == ["p1", "p3"]
    assert {line for line in seen if "failed" in line} == {
        "[1/4] failed: p0: get_inputs() must return a list",
        "[3/4] failed: p2: get_inputs() must return a list",
    }
    assert "2 of 4 problems failed" in str(raised.value)
    assert "p0: get_inputs()" in str(raised.value) and "p2: get_inputs()" in str(raised.value)

    def bug(problem, gpu, beside_others):
        if problem.name == "p1":
            raise KeyError("a bug, not an input error")
        return problem.name

    with pytest.raises(KeyError):  # a bug keeps its own type and traceback
        run_problems(_problems(3), bug, jobs=2, lanes=Lanes([None]), progress=lambda _: None)


def test_a_reference_out_of_gpu_memory_is_not_called_a_broken_problem():
    problem = load_problem(PROBLEMS / "scale_add.py")
    oom = problem_failure(problem, WorkerFailure("problem", "OutOfMemoryError: CUDA out of memory. Tried"))
    assert isinstance(oom, GpuOutOfMemory) and "ran out of GPU memory" in str(oom)
    broken = problem_failure(problem, WorkerFailure("problem", "TypeError: get_inputs() returned a dict"))
    assert isinstance(broken, ProblemError) and not isinstance(broken, GpuOutOfMemory)


def test_a_reference_that_died_says_its_last_words_and_its_out_of_memory_is_seen_there():
    problem = load_problem(PROBLEMS / "scale_add.py")
    tail = "loading\nTraceback (most recent call last):\n  x = conv(y)\nRuntimeError: CUDA error: out of memory\n"
    died = problem_failure(problem, WorkerFailure("problem", "worker exited with code 1 without a result", tail))
    assert isinstance(died, GpuOutOfMemory), died  # said only in what the worker wrote
    assert str(died).endswith(
        "without a result (its last words: Traceback (most recent call last): | x = conv(y) | "
        "RuntimeError: CUDA error: out of memory)"
    )
    said = problem_failure(problem, WorkerFailure("call", "ValueError: bad", "Traceback\nValueError: bad"))
    assert isinstance(said, HarnessError) and str(said).endswith("reference worker failed: ValueError: bad")
    # A harness fault whose reason the exception's own line says, module-qualified there: the
    # frames above it are not quoted (66_Matmul_Dropout_Softmax's one-line reason).
    frames = (
        'File "/work/bot/harness/checked.py", line 299, in _same_answer\nraise fault(\n'
        "bot.harness.checked.DrawsInForward: the problem's own Model answered differently"
    )
    reason = "DrawsInForward: the problem's own Model answered differently"
    drew = problem_failure(problem, WorkerFailure("problem", reason, frames))
    assert isinstance(drew, ProblemError) and str(drew).endswith(f": {reason}"), drew
    # Where the last line says something else, the last words stay.
    other = problem_failure(problem, WorkerFailure("problem", reason, frames + "\nKeyError: 'x'"))
    assert str(other).endswith("| KeyError: 'x')"), other


def test_jobs_auto_is_one_problem_per_core_on_a_cpu_and_one_per_gpu():
    from bot.engine.loop.lanes import resolve_jobs

    assert resolve_jobs(None, "cpu", problems=10, lanes=1, cores=2) == 2
    assert resolve_jobs(None, "cuda", problems=10, lanes=1, cores=16) == 1  # one problem per GPU
    assert resolve_jobs(None, "cuda", problems=10, lanes=4, cores=16) == 4
    assert resolve_jobs(None, "cuda", problems=3, lanes=4, cores=16) == 3  # never more than the problems
    assert resolve_jobs(2, "cuda", problems=10, lanes=4, cores=2) == 4  # never fewer than the lanes
    assert resolve_jobs(3, "cuda", problems=10, lanes=1, cores=16) == 3  # an explicit --jobs N stays N


def test_jobs_option_takes_auto_or_a_positive_number_and_refuses_the_rest():
    import click
    from click.testing import CliRunner

    from bot.cli.options import JOBS

    @click.command()
    @JOBS
    def show(jobs):
        click.echo(repr(jobs))

    runner = CliRunner()
    assert runner.invoke(show, []).output.strip() == "None"  # the default: auto
    assert runner.invoke(show, ["--jobs", "AUTO"]).output.strip() == "None"
    assert runner.invoke(show, ["--jobs", "4"]).output.strip() == "4"
    for bad in ("0", "-1", "many"):
        result = runner.invoke(show, ["--jobs", bad])
        assert result.exit_code == 2 and "expected 'auto' or a number of problems, 1 or more" in result.output
