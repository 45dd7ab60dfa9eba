"""The one judge (bot.core.judge): what a contender's numbers claim against the thresholds, and
the one meaning of "improved" every reader takes from it."""

from __future__ import annotations

from bot.core.judge import Judgement, Thresholds, judge, problem_outcome
from bot.core.measurement import Measurement
from bot.core.results import ProblemResult, Results
from bot.core.results_contenders import BestResult, ContenderResult
from bot.core.results_shapes import MeasurementResult, ShapeResult
from bot.report import data as rd

BARS = Thresholds(1.05, 100.0)


def _shape(
    name: str,
    ci: tuple[float, float] | None,
    significance: str | None = None,
    median_us: float = 10.0,
    floor_us: float | None = None,
    ratio: float | None = None,
) -> ShapeResult:
    measured = MeasurementResult(Measurement((median_us,) * 3, (3,), (0,)), median_us)
    if ratio is None and ci is not None:
        ratio = (ci[0] * ci[1]) ** 0.5
    return ShapeResult(
        name, measurement=measured, speedup=ratio, speedup_ci=ci, significance=significance, floor_us=floor_us
    )


def _attempt(*shapes: ShapeResult, accepted: bool = True, not_timed: str | None = None) -> ContenderResult:
    cis = [s.speedup_ci for s in shapes]
    ci = None
    if shapes and all(c is not None for c in cis):
        low = high = 1.0
        for c in cis:
            low, high = low * c[0], high * c[1]  # type: ignore[index]
        ci = (low ** (1 / len(cis)), high ** (1 / len(cis)))
    speedup = None if ci is None else (ci[0] * ci[1]) ** 0.5
    return ContenderResult(
        "cand",
        shapes,
        accepted=accepted,
        status="accepted" if accepted else "rejected",
        speedup=speedup,
        speedup_ci=ci,
        not_timed=not_timed,
        round=0,
    )


def test_an_interval_exactly_at_the_bar_is_significant_and_one_holding_one_is_not():
    at_bar = judge(_attempt(_shape("main", (1.05, 1.2), "faster")), BARS)
    assert at_bar.significant and at_bar.claimed and at_bar.plausible
    just_under = judge(_attempt(_shape("main", (1.0499, 1.2))), BARS)
    assert not just_under.significant and not just_under.claimed and just_under.plausible
    crossing_one = judge(_attempt(_shape("main", (0.9, 1.3), "no significant difference")), BARS)
    assert not crossing_one.significant and crossing_one.slower_shapes == ()


def test_a_clear_loss_on_one_shape_refuses_a_gain_on_another():
    verdict = judge(_attempt(_shape("decode", (4.0, 4.4), "faster"), _shape("prefill", (0.8, 0.9), "slower")), BARS)
    assert verdict.slower_shapes == ("prefill",) and not verdict.significant and not verdict.claimed


def test_a_rejected_contender_is_never_significant_whatever_its_numbers():
    verdict = judge(_attempt(_shape("main", (2.0, 2.2), "faster"), accepted=False), BARS)
    assert verdict == Judgement(False, False, (), None, None)
    # Its acceptance is read where stage 1 wrote it: `accepted`, else `status`.
    by_status = ContenderResult(
        "cand", (_shape("main", (2.0, 2.2), "faster"),), status="rejected", speedup_ci=(2.0, 2.2)
    )
    assert not judge(by_status, BARS).significant


def test_above_the_plausible_bound_or_under_the_floor_is_significant_but_never_claimed():
    huge = judge(_attempt(_shape("main", (140.0, 160.0), "faster")), BARS)
    assert huge.significant and not huge.claimed and not huge.plausible
    assert huge.implausible is not None and "above the 100x bound" in huge.implausible.evidence
    assert judge(_attempt(_shape("main", (140.0, 160.0), "faster")), Thresholds(1.05, 200.0)).claimed
    assert judge(_attempt(_shape("main", (95.0, 105.0), "faster", ratio=100.0)), BARS).claimed  # at the bound
    under_floor = judge(_attempt(_shape("main", (2.0, 2.2), "faster", median_us=1.0, floor_us=4.0)), BARS)
    assert not under_floor.claimed and "below the roofline floor" in under_floor.implausible.evidence


def test_without_a_baseline_there_is_nothing_to_claim_and_nothing_implausible():
    verdict = judge(_attempt(_shape("main", None), _shape("wide", None)), BARS)
    assert verdict.accepted and not verdict.significant and verdict.implausible is None and verdict.plausible
    assert not judge(_attempt(), BARS).significant  # no shapes at all


def test_not_timed_contenders_or_problems_show_no_ratio():
    simulated = judge(_attempt(_shape("main", None), not_timed="runs in a simulator"), BARS)
    assert not simulated.plausible and not simulated.claimed
    # A problem whose baseline ran under a simulator: none of its numbers say anything.
    timed = _attempt(_shape("main", (2.0, 2.2), "faster"))
    assert not judge(timed, BARS, not_timed="its baseline runs in a simulator").claimed


def _best(attempt: ContenderResult) -> BestResult:
    assert attempt.speedup is not None and attempt.speedup_ci is not None
    return BestResult(
        attempt.name, "class ModelNew: pass\n", "0" * 64, attempt.speedup, attempt.speedup_ci, attempt.shapes
    )


def test_improved_has_one_meaning_a_claimed_best_for_the_document_and_the_reports():
    fine = _attempt(_shape("main", (2.0, 2.2), "faster"))
    huge = _attempt(_shape("main", (140.0, 160.0), "faster"))
    problems = (
        ProblemResult("fine", "improved", attempts=(fine,), best=_best(fine), min_speedup=1.05),
        # A document that was not re-derived (`bot merge` of a tampered shard) may name any best.
        ProblemResult("huge", "improved", attempts=(huge,), best=_best(huge), min_speedup=1.05),
        ProblemResult("strict", "improved", attempts=(fine,), best=_best(fine), min_speedup=3.0),
        ProblemResult(
            "simulated", "improved", attempts=(fine,), best=_best(fine), min_speedup=1.05, not_timed="a simulator"
        ),
        ProblemResult("none", "no significant improvement", attempts=(fine,), min_speedup=1.05),
    )
    results = Results(problems)
    assert [p.problem for p in results.improved] == ["fine"]
    assert [p.problem for p in rd.improved(results)] == ["fine"]
    assert results.best_speedup == problems[0].best.speedup
    assert problems[1].thresholds == Thresholds(1.05, 100.0)
    assert not rd.plausible(problems[1], huge) and rd.plausible(problems[0], fine)


def test_a_problems_outcome_is_one_word_in_order_failed_improved_not_timed_implausible():
    fine = _attempt(_shape("main", (2.0, 2.2), "faster"))
    flag = judge(_attempt(_shape("main", (140.0, 160.0), "faster")), BARS).implausible
    assert flag is not None

    def outcome(error=None, best=None, not_timed=None, implausible=()):
        return problem_outcome(error=error, best=best, not_timed=not_timed, implausible=implausible)

    assert outcome(error="get_inputs() returned int", best=_best(fine)) == "failed"
    assert outcome(best=_best(fine), not_timed="a simulator", implausible=(flag,)) == "improved"
    assert outcome(not_timed="a simulator", implausible=(flag,)) == "not timed"
    assert outcome(implausible=(flag,)) == "implausible"
    assert outcome() == outcome(error="") == "no significant improvement"
