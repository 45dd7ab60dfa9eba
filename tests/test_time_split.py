"""Where a problem's wall time goes: the pure split of overlapping phases, the parent's phase
clock, results.json's `time_split`, its rendering, and a real `bot optimize` run whose parts add
up to its wall time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
from conftest import PROBLEMS, ROOT
from stage_two_artifacts import honest_results

from bot.core.results import Results
from bot.core.time_split import PARTS, Segment, TimeSplit, covered_s, run_line, split_wall_time
from bot.engine.workers import phase_clock
from bot.engine.workers.phase_clock import PhaseClock, current, part_of, recording
from bot.protocol.messages import Construct, Fingerprints, ReferenceRun, Release, Run

pytestmark = pytest.mark.timing  # asserts what real timing claims: run alone, not beside other tests


def test_overlapping_parts_share_each_instant_and_add_up_to_the_wall_time():
    split = split_wall_time(
        [
            Segment("compile", 0.0, 4.0),  # alone 0-2, beside verify 2-4
            Segment("verify", 2.0, 6.0),  # beside compile 2-4, alone 4-6
            Segment("verify", 3.0, 5.0),  # a second contender verifying: the same part, counted once
            Segment("timing", 8.0, 20.0),  # clipped to the window's end at 10
        ],
        0.0,
        10.0,
    )
    assert (split.compile_s, split.verify_s, split.timing_s) == (3.0, 3.0, 2.0)
    assert split.other_s == 2.0 and split.wall_s == 10.0  # 6 to 8: nothing ran
    assert sum(split.parts().values()) == pytest.approx(split.wall_s)


def test_waits_for_the_device_are_their_union_beside_the_parts(monkeypatch):
    # Two threads waiting at once count once; a wait is not a part: the parts still add up.
    assert covered_s([(1.0, 3.0), (2.0, 4.0), (6.0, 7.0), (9.0, 12.0)], 0.0, 10.0) == 5.0  # 1-4, 6-7, 9-10
    assert covered_s([(5.0, 6.0), (0.0, 1.0)], 0.5, 10.0) == 1.5  # clipped, in any order
    assert covered_s([(12.0, 15.0), (-3.0, -1.0), (2.0, 3.0)], 0.0, 10.0) == 1.0  # outside: nothing
    fake = FakeTime()
    monkeypatch.setattr(phase_clock.time, "monotonic", fake.monotonic)
    clock = PhaseClock()
    clock.waited(101.0, 104.0)  # a trial's hold behind another problem's timing
    clock.waited(103.0, 105.0)  # another contender's, at the same time
    clock.waited(106.0, 106.0)  # no wait at all
    with clock.phase("verify"):
        fake.now = 110.0
    split = clock.split(end=110.0)
    assert split.device_wait_s == 4.0 and split.verify_s == 10.0
    assert sum(split.parts().values()) == pytest.approx(split.wall_s)
    assert split.line().endswith("; waiting for the device 4.0 s")
    assert "waiting" not in TimeSplit(5.0, verify_s=5.0).line()


def test_an_unknown_part_is_an_error():
    with pytest.raises(ValueError, match="unknown part 'llm'"):
        split_wall_time([Segment("llm", 0.0, 1.0)], 0.0, 1.0)
    with pytest.raises(ValueError, match="unknown part"):
        with PhaseClock().phase("llm"):
            pass


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_nested_phases_count_the_innermost_and_threads_keep_their_own(monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(phase_clock.time, "monotonic", fake.monotonic)
    clock = PhaseClock()
    inside, leave = threading.Event(), threading.Event()

    def compile_elsewhere() -> None:
        with clock.phase("compile"):
            inside.set()
            leave.wait(5)

    with clock.phase("timing"):  # 100 to 110, less the oracle's 103 to 105
        fake.now = 103.0
        with clock.phase("oracle"):
            fake.now = 105.0
        fake.now = 110.0
    fake.now = 112.0
    other = threading.Thread(target=compile_elsewhere)
    other.start()
    inside.wait(5)
    fake.now = 114.0
    with clock.phase("verify"):  # this thread's phase does not close the other thread's compile
        fake.now = 116.0
    leave.set()
    other.join(5)
    split = clock.split(end=120.0)
    assert split.timing_s == 8.0 and split.oracle_s == 2.0
    assert split.compile_s == 3.0 and split.verify_s == 1.0  # 114 to 116 shared
    assert split.other_s == 6.0 and split.wall_s == 20.0


def test_a_thread_with_no_current_clock_records_nothing():
    clock = PhaseClock()
    seen: list[PhaseClock] = []
    with recording(clock):
        assert current() is clock
        worker = threading.Thread(target=lambda: seen.append(current()))
        worker.start()
        worker.join(5)
        with seen[0].phase("compile"):
            pass
    assert seen[0] is not clock and not seen[0].segments()
    assert current() is not clock


def test_only_the_references_own_work_is_the_oracles():
    reference, contender = SimpleNamespace(trusted=True), SimpleNamespace(trusted=False)
    assert part_of(reference, Construct(seed=1)) == "oracle"
    assert part_of(reference, ReferenceRun(seed=1)) == "oracle"
    assert part_of(reference, Fingerprints(seeds=[1], fp_seed=2)) == "oracle"
    assert part_of(reference, Release()) is None  # the reference's other work is its phase's
    assert part_of(contender, Construct(seed=1)) is None  # a contender's construction is compile
    assert part_of(contender, Run(seed=1)) is None


def test_results_json_carries_the_split_and_older_documents_still_read():
    doc = honest_results()
    split = Results.from_json(doc).problems[0].time_split
    assert split == TimeSplit(12.5, 2.0, 3.0, 1.5, 2.5, 3.0, 0.5)
    assert "device_wait_s" not in doc["problems"][0]["time_split"]  # not recorded: not written
    assert split.device_wait_s is None  # and read as unknown, not as no wait
    doc["problems"][0]["time_split"]["device_wait_s"] = 4.25
    assert Results.from_json(doc).problems[0].time_split == TimeSplit(12.5, 2.0, 3.0, 1.5, 2.5, 3.0, 0.5, 4.25)
    assert Results.from_json(doc).to_json() == doc
    del doc["problems"][0]["time_split"]["device_wait_s"]
    del doc["problems"][0]["time_split"]
    older = Results.from_json(doc)
    assert older.problems[0].time_split is None and older.to_json() == doc


def test_the_line_per_problem_and_the_runs_sum():
    a = TimeSplit(41.2, 6.0, 12.4, 5.0, 8.0, 9.0, 0.8)
    assert a.line() == "time: 41 s (start 6.0 s, compile 12 s, oracle 5.0 s, verify 8.0 s, timing 9.0 s, other 0.8 s)"
    total = run_line([a, None, a])
    assert total is not None and total.startswith("run time: 82 s (start 12 s, compile 25 s")
    assert "summed over 2 problem(s)" in total
    assert run_line([None]) is None
    # Waits sum over the problems that recorded one; none recorded is unknown, not zero.
    waited = TimeSplit(10.0, verify_s=10.0, device_wait_s=2.5)
    assert TimeSplit.total([a, waited, waited]).device_wait_s == 5.0
    assert TimeSplit.total([a, a]).device_wait_s is None
    assert run_line([a, waited]).endswith(
        "; waiting for the device 2.5 s, summed over 2 problem(s) (problems run side by side add up)"
    )


def test_reports_show_the_split(tmp_path):
    from bot.report.markdown import render_step_summary

    summary = render_step_summary(Results.from_json(honest_results()))
    assert (
        "stopped: done; time: 12 s (start 2.0 s, compile 3.0 s, oracle 1.5 s, verify 2.5 s, timing 3.0 s, other 0.5 s)"
        in summary
    )
    assert "Run time: 12 s" in summary and "summed over 1 problem(s)" in summary


def _check_a_real_run(tmp_path, *options: str) -> TimeSplit:
    """`bot optimize` of scale_add with `options`; its split, checked as every run's must be."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bot", "optimize", str(PROBLEMS / "scale_add.py"), *options]
    run = subprocess.run(
        [*command, "--no-cache", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (problem,) = Results.from_json(json.loads((out / "results.json").read_text())).problems
    split = problem.time_split
    assert split is not None and problem.wall_s is not None
    parts = split.parts()
    assert all(seconds >= 0 for seconds in parts.values())
    assert split.wall_s == pytest.approx(problem.wall_s, abs=0.01)
    # The parts share overlapping instants instead of counting them twice: they add up.
    assert sum(parts.values()) == pytest.approx(split.wall_s, rel=0.01)
    assert all(parts[p] > 0 for p in PARTS), parts  # every phase of a search ran and was seen
    assert parts["other"] < 0.5 * split.wall_s, parts  # the phases cover most of the time
    shown = re.compile(
        r"^  time: [\d.]+ s \(start [\d.]+ s, compile [\d.]+ s, oracle [\d.]+ s, verify [\d.]+ s, "
        r"timing [\d.]+ s, other [\d.]+ s\)(; waiting for the device [\d.]+ s)?$",
        re.M,
    )
    assert shown.search(run.stdout), run.stdout[-2000:]
    return split


def test_a_real_optimize_run_splits_its_wall_time(tmp_path):
    """On 2 shared vCPUs this run takes about a minute: scale_add's main shape, the search's
    torch.compile default against eager, one worker each."""
    options = ["--device", "cpu", "--shapes", "main", "--exclude", "compile-max-autotune*", "--replicas", "1"]
    _check_a_real_run(tmp_path, *options, "--time-cap-s", "0.3")


@pytest.mark.gpu
def test_a_real_optimize_run_on_a_gpu_splits_its_wall_time(tmp_path):
    """The whole search on both GPU shapes: gated trials, replicas and the oracle's
    fingerprints of timed calls are seen too."""
    split = _check_a_real_run(tmp_path, "--device", "cuda", "--strategy", "search", "--time-cap-s", "1")
    assert split.oracle_s < split.wall_s / 2  # two small shapes: the reference is not most of it


def test_a_problem_that_fails_still_says_where_its_time_went(tmp_path):
    broken = tmp_path / "broken_inputs.py"
    broken.write_text((PROBLEMS / "scale_add.py").read_text() + "\n\ndef get_inputs():\n    return 3\n")
    out = tmp_path / "out"
    run = subprocess.run(
        [sys.executable, "-m", "bot", "optimize", str(broken), "--device", "cpu", "--exclude", "*"]
        + ["--replicas", "1", "--no-cache", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 2 and "get_inputs() returned int" in run.stderr, run.stderr[-2000:]
    (problem,) = Results.from_json(json.loads((out / "results.json").read_text())).problems
    assert problem.failed and problem.time_split is not None
    assert problem.time_split.wall_s > 0 and problem.wall_s == pytest.approx(problem.time_split.wall_s, abs=0.01)
    assert problem.time_split.start_s > 0  # its workers started before the reference failed
    assert "== broken_inputs: FAILED" in run.stdout and "  time: " in run.stdout
