"""Contenders that ran out of GPU memory beside others get a second evaluation, alone."""

from __future__ import annotations

import time

import pytest
from conftest import PROBLEMS

import bot.engine.evaluation.evaluate as ev
from bot.core.conclusive import conclusion
from bot.core.domain import CandidateSource, CheckResult, Environment, Origin, Verdict
from bot.core.errors import GpuOutOfMemory
from bot.core.outcomes import ContenderOutcome, Evaluation
from bot.core.progress import Note
from bot.engine.evaluation.options import EvalOptions
from bot.engine.evaluation.worker_pool import TooLargeTogether
from bot.engine.loop.attempts import Attempt
from bot.engine.workers.failures import ran_out_of_gpu_memory
from bot.engine.workspace.problems import load_problem

REFERENCE_SHORT = {"the reference"}  # scripted: the reference itself runs out of memory
TOO_LARGE = {"all together"}  # scripted: the shape's contenders cannot all be held at once; two can
THREE_FIT = {"three fit"}  # scripted: as TOO_LARGE, where three contenders can
ONE_FITS = {"all, one fits"}  # scripted: as TOO_LARGE, where the baseline alone can
OOM = CheckResult("call", False, "OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB.")
ENV = Environment("cuda", "H200", "2.11", None, None, None, "3.12")


def _outcome(cand: CandidateSource, ok: bool, role: str = "candidate") -> ContenderOutcome:
    return ContenderOutcome(cand, role, Verdict("accepted" if ok else "rejected", () if ok else (OOM,)), ())


@pytest.fixture
def setup(monkeypatch):
    problem = load_problem(PROBLEMS / "scale_add.py")
    base, a, b = (CandidateSource(n, f"# {n}", Origin("search")) for n in ("base", "a", "b"))
    calls = []

    def fake(problem_, cands, baseline, options, progress):
        calls.append(([c.name for c in cands], options.parallel))
        short = scripted.pop(0)
        if short in (TOO_LARGE, THREE_FIT, ONE_FITS):
            message = "its 3 contenders together would hold up to 168.0 GiB of GPU 0's 71.0 GiB"
            raise TooLargeTogether(message, 3 if short == THREE_FIT else 1 if short == ONE_FITS else 2)
        if short == REFERENCE_SHORT:
            raise GpuOutOfMemory(f"{problem_.path}: reference worker ran out of GPU memory: OutOfMemoryError")
        return Evaluation(
            problem_,
            ENV,
            _outcome(baseline, "base" not in short, "baseline"),
            tuple(_outcome(c, c.name not in short) for c in cands),
        )

    scripted: list[set[str]] = []
    monkeypatch.setattr(ev, "_evaluate_once", fake)
    return problem, base, a, b, calls, scripted


def test_a_candidate_short_of_memory_beside_others_is_evaluated_again_alone(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"b"}, set()]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, parallel=8))
    assert calls == [(["a", "b"], 8), (["b"], 1)]
    assert [o.verdict.accepted for o in result.candidates] == [True, True]


def test_candidates_short_of_memory_are_evaluated_again_each_beside_the_baseline_alone(setup):
    # Fewer at once is not enough where every waiting contender's worker holds memory (its
    # CUDA graphs' buffers): each short candidate runs with the reference and the baseline only.
    problem, base, a, b, calls, scripted = setup
    scripted += [{"a", "b"}, set(), {"b"}]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, parallel=8))
    assert calls == [(["a", "b"], 8), (["a"], 1), (["b"], 1)]
    assert [o.verdict.accepted for o in result.candidates] == [True, False]


def test_a_baseline_short_of_memory_is_taken_from_a_rerun_where_it_fit(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"base"}, {"base"}, set()]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False))
    assert calls[1:] == [(["a"], 1), (["b"], 1)]
    assert result.baseline.verdict.accepted


def test_one_that_needs_more_than_the_gpu_fails_again_alone(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"b"}, {"b"}]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False))
    assert [o.verdict.accepted for o in result.candidates] == [True, False]
    assert "out of memory" in result.candidates[1].verdict.reasons[0]


def test_a_baseline_short_of_memory_means_everything_again(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"base", "a"}, set(), set()]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, parallel=4))
    assert calls == [(["a", "b"], 4), (["a"], 1), (["b"], 1)]  # each beside the baseline alone
    assert result.baseline.verdict.accepted


def test_no_second_evaluation_on_cpu(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"b"}]
    ev.evaluate(problem, [a, b], base, EvalOptions(device="cpu", use_cache=False))
    assert len(calls) == 1


def test_still_short_beside_other_problems_hands_the_problem_back_to_run_alone(setup):
    # On the H200 swiglu's contenders ran out of memory beside three other problems; re-run
    # one at a time they were still beside them, and a rejection there would blame them for
    # the others' memory. bot.engine.loop.lanes runs a GpuOutOfMemory problem again after the rest, alone.
    problem, base, a, b, calls, scripted = setup
    scripted += [{"b"}, {"b"}]
    with pytest.raises(GpuOutOfMemory, match=r"1 contender\(s\) ran out of GPU memory even one at a time.*\(b\)"):
        ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, beside_others=True))
    assert calls[-1] == (["b"], 1)


def test_a_baseline_still_short_beside_other_problems_hands_it_back_too(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"base"}, {"base"}, {"base"}]
    with pytest.raises(GpuOutOfMemory, match=r"\(base\)"):
        ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, beside_others=True))


def test_beside_other_problems_a_rerun_that_fits_is_kept(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"a", "b"}, set(), set()]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, beside_others=True))
    assert [o.verdict.accepted for o in result.candidates] == [True, True]


# What the H200 printed for swiglu's contenders out of memory beside rmsnorm's 31 workers.
NVML_REPORT = (
    "call: RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT "
    'FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":1135, please report a bug to PyTorch. '
)


@pytest.mark.parametrize(
    "evidence, short",
    [
        (NVML_REPORT, True),
        (OOM.evidence, True),
        # the same assertion elsewhere (peer access, expandable segments) is not an allocation failure
        (
            "RuntimeError: NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at "
            '"/pytorch/aten/src/ATen/cuda/PeerToPeerAccess.cpp":83',
            False,
        ),
        ("RuntimeError: shape mismatch", False),
    ],
)
def test_an_allocation_failure_whose_memory_report_could_not_start_nvml_counts_as_out_of_memory(evidence, short):
    cand = CandidateSource("a", "# a", Origin("search"))
    outcome = ContenderOutcome(cand, "candidate", Verdict("rejected", (CheckResult("call", False, evidence),)), ())
    assert ran_out_of_gpu_memory(outcome) is short


def test_a_baseline_rejected_after_a_round_that_accepted_it_keeps_the_rounds_before(setup):
    from bot.core.errors import ProblemError
    from bot.engine.loop.optimize import refuse_rejected_baseline

    problem, base, a, _b, _calls, _scripted = setup
    rejected = Evaluation(problem, ENV, _outcome(base, False, "baseline"), (_outcome(a, True),))
    with pytest.raises(ProblemError, match="the baseline base was rejected by the verifier.*out of memory"):
        refuse_rejected_baseline(problem, rejected, True, lambda _: None)
    said: list[str] = []
    refuse_rejected_baseline(
        problem, rejected, False, lambda event: said.append(event.line())
    )  # a later round: the machine's
    assert len(said) == 1 and "its candidates have no speedups" in said[0]
    accepted = Evaluation(problem, ENV, _outcome(base, True, "baseline"), (_outcome(a, True),))
    refuse_rejected_baseline(problem, accepted, True, lambda event: said.append(event.line()))
    assert len(said) == 1


@pytest.mark.parametrize("cached,given_back", [(8192, True), (1024, False)])
def test_a_worker_gives_back_what_its_allocator_holds_unused_past_the_threshold(monkeypatch, cached, given_back):
    # A worker waits between its ops while other processes need the GPU: what its allocator
    # caches unused (a dropped batch, the reference's float64 temporaries) goes back, past
    # RELEASE_OVER_BYTES; less stays, so that small shapes allocate nothing anew.
    import torch

    import bot.harness.worker as worker

    emptied: list[int] = []
    monkeypatch.setattr(worker, "RELEASE_OVER_BYTES", 4096)
    monkeypatch.setattr(worker.shared, "cuda_sync", lambda: None)
    monkeypatch.setattr(worker.shared, "cuda_reserved", lambda: cached + 512)
    monkeypatch.setattr(worker.shared, "cuda_allocated", lambda: 512)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    h = worker.Harness(None, "cpu", 1)
    h.give_back_cache()
    assert emptied == []  # nothing cached by a CPU worker
    h.device = "cuda"  # after start-up, which would make a CUDA context
    h.give_back_cache()
    assert emptied == ([1] if given_back else [])


def test_no_cache_is_given_back_inside_an_op_the_parents_clock_measures():
    # Staging, the timed calls and the reference's look at the GPU are on the parent's clock:
    # giving memory back there would move time into one contender's sample and not another's.
    import bot.harness.worker as worker

    assert {"stage", "time", "quiet"} <= worker.ON_THE_PARENTS_CLOCK
    assert not {"run", "outputs", "judge", "lend", "release", "fingerprints"} & worker.ON_THE_PARENTS_CLOCK


def test_a_reference_short_of_memory_beside_many_contenders_evaluates_each_beside_the_baseline(setup):
    # KernelBench's 19_ReLU on the H100: three contenders' CUDA graphs held 12.8 GiB each while
    # the reference needed 12 GiB for a trial; each candidate beside the baseline alone fits.
    problem, base, a, b, calls, scripted = setup
    scripted += [REFERENCE_SHORT, set(), set()]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, parallel=8))
    assert calls == [(["a", "b"], 8), (["a"], 1), (["b"], 1)]
    assert [o.verdict.accepted for o in result.candidates] == [True, True] and result.baseline.verdict.accepted


def test_a_candidate_beside_which_the_reference_still_runs_out_is_rejected_for_memory(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [REFERENCE_SHORT, set(), REFERENCE_SHORT]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False))
    assert [o.candidate.name for o in result.candidates] == ["a", "b"]
    assert result.candidates[0].verdict.accepted and ran_out_of_gpu_memory(result.candidates[1])
    assert "beside the baseline alone, the reference ran out" in result.candidates[1].verdict.reasons[0]


def test_a_reference_that_runs_out_beside_every_candidate_alone_fails_the_problem(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [REFERENCE_SHORT] * 3
    with pytest.raises(GpuOutOfMemory, match="beside every candidate alone"):
        ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False))


def test_a_reference_short_beside_other_problems_is_handed_back_at_once(setup):
    # bot.engine.loop.lanes runs the problem again after the others, alone on the GPU.
    problem, base, a, b, calls, scripted = setup
    scripted += [REFERENCE_SHORT]
    with pytest.raises(GpuOutOfMemory):
        ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False, beside_others=True))
    assert len(calls) == 1


def test_a_shape_too_large_together_goes_one_at_a_time_even_beside_other_problems(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [TOO_LARGE, set(), set()]
    notes = []
    options = EvalOptions(device="cuda", use_cache=False, parallel=8, beside_others=True)
    result = ev.evaluate(problem, [a, b], base, options, notes.append)
    assert calls == [(["a", "b"], 8), (["a"], 1), (["b"], 1)]
    assert [o.verdict.accepted for o in result.candidates] == [True, True]
    texts = [n.text for n in notes if isinstance(n, Note)]
    assert any("168.0 GiB" in t and "each candidate beside the baseline alone" in t for t in texts), texts
    assert not any("even that exceeds it" in t for t in texts), texts  # two fit: the baseline and one


def test_a_split_that_the_estimate_says_cannot_fit_even_one_candidate_says_so(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [ONE_FITS, set(), set()]
    notes = []
    ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False), notes.append)
    assert [names for names, _ in calls] == [["a", "b"], ["a"], ["b"]]
    texts = [n.text for n in notes if isinstance(n, Note)]
    assert any("each candidate beside the baseline alone (by this estimate even that exceeds it)" in t for t in texts)


def test_one_at_a_time_the_budget_stops_new_candidates_after_the_first(setup):
    problem, base, a, b, calls, scripted = setup
    c = CandidateSource("c", "# c", Origin("search"))
    scripted += [TOO_LARGE, set(), set(), set()]
    past = time.monotonic() - 1
    options = EvalOptions(device="cuda", use_cache=False, deadline=past)
    result = ev.evaluate(problem, [a, b, c], base, options)
    assert [names for names, _ in calls] == [["a", "b", "c"], ["a"]]  # at least one is evaluated
    assert [o.candidate.name for o in result.candidates] == ["a"]
    assert [x.name for x in result.not_evaluated] == ["b", "c"]


def test_after_the_budget_a_group_short_of_memory_stops_new_ones_too(setup):
    # On the H100 each of 46_Average_Pooling_3D's nine groups ran its reference out of memory
    # beside the baseline and one candidate, about 33 s each, 300 s past a 60 s budget.
    problem, base, a, b, calls, scripted = setup
    c = CandidateSource("c", "# c", Origin("search"))
    scripted += [TOO_LARGE, REFERENCE_SHORT, set(), set()]
    options = EvalOptions(device="cuda", use_cache=False, deadline=time.monotonic() - 1)
    with pytest.raises(GpuOutOfMemory, match=r"beside each of the 1 candidate\(s\) tried before the budget ran out"):
        ev.evaluate(problem, [a, b, c], base, options)
    assert [names for names, _ in calls] == [["a", "b", "c"], ["a"]]


def test_within_the_budget_every_group_short_of_memory_is_tried(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [TOO_LARGE, REFERENCE_SHORT, REFERENCE_SHORT]
    options = EvalOptions(device="cuda", use_cache=False, deadline=time.monotonic() + 3600)
    with pytest.raises(GpuOutOfMemory, match="beside every candidate alone"):
        ev.evaluate(problem, [a, b], base, options)
    assert [names for names, _ in calls] == [["a", "b"], ["a"], ["b"]]


def test_the_budget_note_counts_those_a_groups_own_split_left_out(setup):
    # On the H100 47_Sum's groups of two ran the reference out of memory, split one at a time,
    # and the budget ran out in both: "1 candidate(s) not evaluated", then "5", for 6 in all.
    problem, base, a, b, calls, scripted = setup
    c, d = (CandidateSource(n, f"# {n}", Origin("search")) for n in ("c", "d"))
    scripted += [THREE_FIT, REFERENCE_SHORT, set()]
    notes = []
    options = EvalOptions(device="cuda", use_cache=False, deadline=time.monotonic() - 1)
    result = ev.evaluate(problem, [a, b, c, d], base, options, notes.append)
    assert [names for names, _ in calls] == [["a", "b", "c", "d"], ["a", "b"], ["a"]]
    assert [x.name for x in result.not_evaluated] == ["b", "c", "d"]
    texts = [n.text for n in notes if isinstance(n, Note) and "budget" in n.text]
    assert texts == [
        "the budget ran out: 1 candidate(s) not evaluated",
        "the budget ran out: 2 more candidate(s) not evaluated (3 in all)",
    ], texts


def test_candidates_not_evaluated_are_not_cached_and_stay_named(setup, tmp_path):
    problem, base, a, b, calls, scripted = setup
    scripted += [TOO_LARGE, set()]
    options = EvalOptions(device="cuda", use_cache=True, cache_root=tmp_path, deadline=time.monotonic() - 1)
    result = ev.evaluate(problem, [a, b], base, options)
    assert [o.candidate.name for o in result.candidates] == ["a"]
    assert [x.name for x in result.not_evaluated] == ["b"]


def test_a_candidate_the_budget_left_out_is_reported_as_skipped_with_why(monkeypatch):
    import bot.engine.loop.optimize as optimize_module
    from bot.engine.loop.attempts import OptimizeOptions

    problem = load_problem(PROBLEMS / "scale_add.py")
    baseline = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    deadlines = []

    def fake_evaluate(problem_, cands, baseline_, options, progress=None):
        deadlines.append(options.deadline)
        first = _outcome(cands[0], True)
        return Evaluation(problem_, ENV, _outcome(baseline_, True, "baseline"), (first,), tuple(cands[1:]))

    monkeypatch.setattr(optimize_module, "evaluate", fake_evaluate)
    options = OptimizeOptions(budget_s=60, evaluation=EvalOptions(device="cuda", use_cache=False))
    began = time.monotonic()
    run = optimize_module.optimize(problem, baseline, options)
    assert deadlines and all(began + 59 < d < time.monotonic() + 61 for d in deadlines)
    left = [s for s in run.result.skipped if s.reason == optimize_module.NOT_EVALUATED]
    attempted = {a.name for a in run.result.attempts}
    assert left and attempted.isdisjoint(s.transformation for s in left)


def test_a_shape_too_large_together_goes_as_many_at_a_time_as_fit(setup):
    problem, base, a, b, calls, scripted = setup
    c = CandidateSource("c", "# c", Origin("search"))
    scripted += [THREE_FIT, set(), set()]
    notes = []
    result = ev.evaluate(
        problem, [a, b, c], base, EvalOptions(device="cuda", use_cache=False, parallel=8), notes.append
    )
    assert calls == [(["a", "b", "c"], 8), (["a", "b"], 8), (["c"], 1)]  # the baseline and two, then one
    assert [o.candidate.name for o in result.candidates] == ["a", "b", "c"]
    assert any("2 candidates at a time" in n.text for n in notes if isinstance(n, Note))


def test_a_group_still_too_large_or_short_goes_one_at_a_time(setup):
    problem, base, a, b, calls, scripted = setup
    c = CandidateSource("c", "# c", Origin("search"))
    scripted += [THREE_FIT, TOO_LARGE, set(), {"b"}, set()]
    result = ev.evaluate(problem, [a, b, c], base, EvalOptions(device="cuda", use_cache=False))
    assert [names for names, _ in calls] == [["a", "b", "c"], ["a", "b"], ["a"], ["b"], ["c"]]
    assert [o.verdict.accepted for o in result.candidates] == [True, False, True]


def test_a_candidate_short_of_memory_that_the_budget_leaves_out_is_not_evaluated_not_rejected(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [{"a", "b"}, set()]
    options = EvalOptions(device="cuda", use_cache=False, deadline=time.monotonic() - 1)
    result = ev.evaluate(problem, [a, b], base, options)
    assert [names for names, _ in calls] == [["a", "b"], ["a"]]
    assert [(o.candidate.name, o.verdict.accepted) for o in result.candidates] == [("a", True)]
    assert [x.name for x in result.not_evaluated] == ["b"]


def test_a_candidate_whose_run_lost_its_baseline_says_why_it_has_no_speedup(setup):
    problem, base, a, b, calls, scripted = setup
    scripted += [TOO_LARGE, set(), {"base"}]
    result = ev.evaluate(problem, [a, b], base, EvalOptions(device="cuda", use_cache=False))
    assert result.baseline.verdict.accepted  # the first run's
    first, second = result.candidates
    assert first.verdict.checks == () and second.verdict.accepted and second.not_timed is None
    line = Attempt(0, second).reason
    assert line.startswith("accepted (not timed against a baseline; its baseline failed beside it: call:")
    assert "CUDA out of memory" in line
    # Not a conclusion: the cache times it again rather than keep "no speedup".
    assert not conclusion(second, 1.05).conclusive


def test_groups_after_one_that_accepted_the_baseline_do_not_trial_it_again(setup, monkeypatch):
    problem, base, a, b, calls, scripted = setup
    c = CandidateSource("c", "# c", Origin("search"))
    trialled = []
    scripted_once = ev._evaluate_once

    def recording(problem_, cands, baseline, options, progress):
        trialled.append(options.baseline_trialled)
        return scripted_once(problem_, cands, baseline, options, progress)

    monkeypatch.setattr(ev, "_evaluate_once", recording)
    # a's run loses its baseline (out of memory): b's run trials it again and accepts it; c's need not.
    scripted += [TOO_LARGE, {"base"}, set(), set()]
    result = ev.evaluate(problem, [a, b, c], base, EvalOptions(device="cuda", use_cache=False))
    assert [names for names, _ in calls] == [["a", "b", "c"], ["a"], ["b"], ["c"]]
    assert trialled == [False, False, False, True]
    assert result.baseline is not None and result.baseline.verdict.accepted


def test_a_baseline_trialled_in_an_earlier_run_is_built_and_timed_without_trials(quick_options):
    from conftest import CANDIDATES

    from bot.core.progress import TrialsStarted
    from bot.engine.workspace.candidates import default_baseline, load_candidate

    problem = load_problem(PROBLEMS / "scale_add.py")
    candidate = load_candidate(CANDIDATES / "honest.py")
    for trialled, contenders in ((False, 2), (True, 1)):
        events = []
        result = ev._evaluate_once(
            problem, [candidate], default_baseline(problem), quick_options(baseline_trialled=trialled), events.append
        )
        started = [e for e in events if isinstance(e, TrialsStarted)]
        assert started and all(e.contenders == contenders for e in started), started
        base = result.baseline
        assert base is not None and base.verdict.accepted, (trialled, base.verdict.reasons)
        # Timed against it: the candidate has a speedup on every shape.
        shapes = result.candidates[0].shapes
        assert shapes and all(s.speedup is not None for s in shapes), shapes
