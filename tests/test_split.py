"""Splitting shapes by input size: launch-bound shapes on one path, large ones on another."""

from __future__ import annotations

import pytest
import torch
from conftest import ROOT

from bot.core.domain import CandidateSource, Environment, Origin, Verdict
from bot.core.judge import Thresholds, significant
from bot.core.measurement import Speedup
from bot.core.outcomes import ContenderOutcome, Evaluation, ShapeOutcome
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.loop.attempts import Attempt
from bot.engine.loop.optimize import split_candidates
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.problems import load_problem
from bot.propose.derive import Base
from bot.propose.split import Split, input_bytes, plan_split, split_candidate

pytestmark = pytest.mark.timing  # asserts what real timing claims: run alone, not beside other tests

DECODE, PREFILL = "bfloat16[32, 4096], bfloat16[4096]", "bfloat16[8192, 4096], bfloat16[4096]"


def test_input_bytes_reads_the_shape_description():
    assert input_bytes(DECODE) == 32 * 4096 * 2 + 4096 * 2
    assert input_bytes("float32[4], int64[2, 3]") == 16 + 48
    assert input_bytes("notadtype[4]") is None


def test_split_where_small_and_large_shapes_have_different_winners():
    sizes = [100, 10_000, 1_000_000]
    split = plan_split(
        sizes, {"cuda-graph": [2.0, 1.8, 0.5], "compile:default": [1.2, 1.1, 3.0], "eager": [1.0, 1.0, 1.0]}
    )
    assert split is not None and (split.small, split.large) == ("cuda-graph", "compile:default")
    assert 10_000 <= split.threshold < 1_000_000
    # geomean 2.0*1.8*3.0 against the best single path (compile: 1.2*1.1*3.0)
    assert abs(split.gain - (2.0 * 1.8 / (1.2 * 1.1)) ** (1 / 3)) < 1e-9


def test_no_split_when_one_path_wins_everywhere_or_sizes_cannot_separate():
    assert plan_split([100, 1_000_000], {"compile:default": [1.5, 3.0], "cuda-graph": [1.4, 0.5]}) is None
    assert plan_split([500, 500], {"a": [2.0, 1.0], "b": [1.0, 2.0]}) is None
    assert plan_split([100, 1000], {"a": [1.01, 1.0], "b": [1.0, 1.01]}) is None  # gain under 3 %
    assert plan_split([100, 1000], {"a": [2.0, None], "b": [1.0, 2.0]}) is None  # a was not timed


def _speedup(r: float, spread: float = 0.02, min_speedup: float = 1.05) -> Speedup:
    low, high = r * (1 - spread), r * (1 + spread)
    verdict = "faster" if low >= min_speedup else "slower" if high <= 1 / min_speedup else "no significant difference"
    return Speedup(r, low, high, 0.95, verdict)


def _outcome(name: str, ratios: list[float], accepted: bool = True, spread: float = 0.02) -> ContenderOutcome:
    shapes = tuple(
        ShapeOutcome(shape, inputs, "bfloat16", None, _speedup(r, spread), None, None, None)
        for (shape, inputs), r in zip([("decode", DECODE), ("prefill", PREFILL)], ratios)
    )
    return ContenderOutcome(
        CandidateSource(name, "", Origin("search")),
        "candidate",
        Verdict("accepted" if accepted else "rejected", ()),
        shapes,
    )


def test_split_candidates_come_from_the_search_round_of_the_same_base():
    problem = load_problem(ROOT / "problems" / "gelu.py", root=ROOT)
    baseline = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    searched = [
        Attempt(0, _outcome("cuda-graph-reference", [2.5, 0.45])),
        Attempt(0, _outcome("compile-default-reference", [1.3, 1.6])),
        Attempt(0, _outcome("compile-max-autotune-reference", [9.0, 9.0], accepted=False)),
    ]
    evaluation = Evaluation(
        problem, Environment("cuda", "H200", "2.11", None, None, None, "3.12"), _outcome("reference", [1.0, 1.0]), ()
    )
    [cand] = split_candidates(problem, baseline, searched, evaluation)
    assert cand.name == "split-reference" and cand.origin.strategy == "search"
    assert "CUDA graph replay for inputs up to" in cand.origin.detail
    assert "torch.compile(mode='default') above" in cand.origin.detail
    assert "_KernelBotGraphs(super().forward)" in cand.source
    compile(cand.source, "split.py", "exec")  # a whole module


def _two_size_problem(tmp_path):
    path = tmp_path / "sized.py"
    path.write_text(
        (ROOT / "tests/fixtures/problems/scale_add.py")
        .read_text()
        .replace(
            'SHAPES = {"main": {"N": 64, "D": 128}, "wide": {"N": 16, "D": 512}}',
            'SHAPES = {"small": {"N": 4, "D": 128}, "large": {"N": 512, "D": 128}}',
        )
    )
    return load_problem(path, root=tmp_path)


def test_split_module_takes_each_path_by_input_size(tmp_path):
    problem = _two_size_problem(tmp_path)
    cand = split_candidate(
        Base("reference", problem.source, "Model"), Split("eager", "compile:default", 4 * 128 * 4, 1.1)
    )
    namespace: dict = {}
    exec(compile(cand.source, "split.py", "exec"), namespace)  # test code, not the bot
    model = namespace["ModelNew"](128)
    taken = []
    small, large = model._kernel_bot_small, model._kernel_bot_large
    model._kernel_bot_small = lambda *x: taken.append("small") or small(*x)
    model._kernel_bot_large = lambda *x: taken.append("large") or large(*x)
    model(torch.randn(4, 128))
    model(torch.randn(512, 128))
    assert taken == ["small", "large"]


def test_split_candidate_is_accepted_by_the_verifier(tmp_path):
    problem = _two_size_problem(tmp_path)
    cand = split_candidate(
        Base("reference", problem.source, "Model"), Split("eager", "compile:default", 4 * 128 * 4, 1.1)
    )
    baseline = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    result = evaluate(
        problem, [cand], baseline, EvalOptions(device="cpu", use_cache=False, timing=TimingOptions(time_cap_s=0.3))
    )
    assert result.candidates[0].verdict.accepted, result.candidates[0].verdict.reasons
    assert len(result.candidates[0].shapes) == 2


def test_a_gain_on_one_shape_does_not_pay_for_a_loss_on_another():
    # What the H200 PR-flow run picked: 4.1x on decode, 0.92x on both prefill shapes. The
    # geometric mean clears 1.05x, yet a PR that slows prefill down is no improvement.
    from bot.engine.loop.optimize import select_best

    mixed = _outcome("tune-a", [4.1, 0.92])
    steady = _outcome("tune-b", [1.3, 1.1])
    assert mixed.speedup_ci[0] > 1.05 and mixed.slower_shapes() == ["prefill"]
    assert not significant(mixed, 1.05) and significant(steady, 1.05) and steady.slower_shapes() == []
    assert select_best([Attempt(0, mixed), Attempt(0, steady)], Thresholds(1.05)) is steady
    assert select_best([Attempt(0, mixed)], Thresholds(1.05)) is None
    assert "significantly slower on prefill" in Attempt(0, mixed).reason
    attempt = Attempt(0, mixed).judged(Thresholds(1.05))
    assert attempt.slower_shapes == ("prefill",)
    from bot.core.results import ProblemResult
    from bot.report.markdown import attempts_table

    table = attempts_table(ProblemResult("split", "no_improvement", attempts=(attempt,), min_speedup=1.05))
    assert "significantly slower on prefill" in table and "interval clears" not in table


def test_a_loss_is_refused_only_when_as_clear_as_a_gain_must_be():
    # cross_entropy on the H200: the split took torch.compile on prefill (4.7x) and eager on
    # decode, where its wrapper cost 0.93x [0.92, 0.96]: inside the 1/1.05 a slowdown needs.
    from bot.engine.loop.optimize import select_best

    split = _outcome("split-reference", [0.94, 4.7], spread=0.015)
    assert split.shapes[0].speedup.ci_high > 1 / 1.05 and split.shapes[0].speedup.ci_high < 1
    assert split.slower_shapes() == [] and significant(split, 1.05)
    assert select_best([Attempt(0, split)], Thresholds(1.05)) is split
    clear_loss = _outcome("tune-c", [0.90, 4.7], spread=0.015)
    assert clear_loss.slower_shapes() == ["decode"] and not significant(clear_loss, 1.05)
