"""The input distributions (bot/harness/inputs.py): deterministic from the seed, integer inputs
untouched, rows of every scale, and "limits" values an honest kernel keeps finite."""

from __future__ import annotations

import math
import random
from dataclasses import fields

import pytest
import torch
from conftest import CANDIDATES, PROBLEMS, ROOT

from bot.core.distributions import DISTRIBUTIONS, distribution_of, seed_for
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.verification.trials import skip_notes, timed_seeds, trial_plan
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem
from bot.harness.inputs import MIXED_SCALES, ROW_SCALES, limit_scale, transform

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def draw(seed: int, dtype=torch.bfloat16, rows: int = 40, width: int = 64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=gen).to(dtype)
    residual = torch.randn(rows, width, generator=gen).to(dtype)
    positions = torch.randint(0, 1000, (rows,), generator=gen)
    return [x, residual, positions, 7]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_same_seed_same_bits_and_integers_untouched(distribution):
    one, two = transform(draw(1), distribution, 123), transform(draw(1), distribution, 123)
    for a, b in zip(one[:3], two[:3]):
        assert a.dtype == b.dtype
        assert torch.equal(a.float().view(torch.int32), b.float().view(torch.int32))  # bits, -0.0 too
    original = draw(1)
    assert torch.equal(one[2], original[2]) and one[3] == 7
    assert one[0].shape == original[0].shape and one[0].dtype == original[0].dtype


def test_rows_take_every_scale_exactly_with_the_pattern_drawn_from_the_seed():
    original = draw(2, torch.float32)
    x, residual, _, _ = transform(original, "rows", 5)
    scales = []
    for row, raw in zip(x, original[0]):
        ratios = {float(r) for r in (row / raw)}  # exact: powers of two in float32
        assert len(ratios) == 1, ratios
        scales.append(ratios.pop())
    assert sorted(set(scales)) == sorted(ROW_SCALES)
    assert all(scales.count(s) == len(scales) // len(ROW_SCALES) for s in ROW_SCALES)
    # The residual has as many rows: zero (and tiny) in the same rows as x.
    assert torch.equal(residual.abs().amax(-1) == 0, x.abs().amax(-1) == 0)
    other = transform(draw(2, torch.float32), "rows", 6)[0]
    assert not torch.equal(other.abs().amax(-1) == 0, x.abs().amax(-1) == 0)


def test_a_one_dimensional_tensor_is_cut_into_blocks_of_each_scale():
    v = torch.randn(1003)
    (out,) = transform([v], "rows", 9)
    ratios = [float(out[i] / v[i]) for i in range(0, 1003, 201)]
    assert sorted(ratios) == sorted(ROW_SCALES)
    assert torch.equal(transform([torch.randn(0, 5)], "rows", 1)[0], torch.randn(0, 5))


def test_zeros_are_zero_and_standard_is_the_draw_itself():
    original = draw(3)
    zeros = transform(original, "zeros", 1)
    assert not zeros[0].any() and not zeros[1].any() and torch.equal(zeros[2], original[2])
    assert all(a is b for a, b in zip(transform(original, "standard", 1), original))
    with pytest.raises(ValueError, match="unknown input distribution"):
        transform(original, "uniform", 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_limits_stay_finite_for_honest_kernels_in_their_own_precision(dtype):
    """Near the dtype's range, yet: the sum of two inputs fits the dtype; a row's sum of squares
    (RMSNorm, 2^17 elements) and x^3 (GELU's tanh form) fit the float32 accumulator of a half
    or bfloat16 kernel; and exp(x) (softmax without its max subtracted) overflows."""
    x, residual = transform(draw(4, dtype, 64, 2048), "limits", 1)[:2]
    acc = torch.promote_types(dtype, torch.float32)
    big = x.to(acc).abs().max()
    assert torch.isfinite(x.to(acc)).all() and big >= limit_scale(dtype)
    assert torch.isfinite(x + residual).all()
    assert torch.isfinite(x.to(acc).pow(2).sum(-1) * (2**17 / x.shape[-1])).all()
    if dtype != torch.float16:
        assert torch.isfinite(x.to(acc).pow(3)).all()
    assert not torch.isfinite(torch.exp(x.to(torch.float64))).all()
    # float16 arithmetic cannot hold a square of them: a kernel accumulating in float16 fails.
    if dtype == torch.float16:
        assert not torch.isfinite(x.pow(2)).all()


def test_every_distribution_is_one_trial_and_standard_comes_first(tmp_path):
    problem = load_problem(PROBLEMS / "scale_add.py")
    plan = trial_plan(problem, random.Random(0), 1)
    assert [d for d, _ in plan] == list(DISTRIBUTIONS) and len({s for _, s in plan}) == len(plan)
    only = tmp_path / "only.py"
    only.write_text((PROBLEMS / "scale_add.py").read_text() + "DISTRIBUTIONS = ('standard',)\n")
    single = load_problem(only, root=tmp_path)
    plan = trial_plan(single, random.Random(0), 1)
    assert [d for d, _ in plan] == ["standard", "standard"] and plan[0][1] != plan[1][1]
    assert skip_notes(single)[0].startswith("only: no shifted inputs: not listed")


def test_offset_rows_have_a_mean_100_to_10000_times_their_spread():
    original = draw(3, torch.float32, rows=200, width=256)
    x = transform(original, "offset", 8)[0]
    shift = (x.double() - original[0].double()).mean(-1).abs()
    assert all(100 <= s <= 10_000 for s in shift.tolist()), shift  # the spread stays N(0, 1)
    assert {round(math.log2(s)) for s in shift.tolist()} == set(range(7, 14))  # every exponent drawn
    assert (x.double().mean(-1) > 0).any() and (x.double().mean(-1) < 0).any()
    # bfloat16 keeps some spread: its offset stays below its 8 digits.
    y = transform(draw(3, torch.bfloat16, rows=50, width=256), "offset", 8)[0]
    assert (y.double().std(-1) > 0.5).all() and (y.double().mean(-1).abs() >= 100).all()


def test_mixed_rows_hold_values_near_zero_beside_large_ones():
    original = draw(4, torch.float32)
    x = transform(original, "mixed", 11)[0]
    for row, raw in zip(x, original[0]):
        assert {float(r) for r in (row / raw)} == set(MIXED_SCALES)
    assert torch.equal(transform(original, "mixed", 11)[0], x) and not torch.equal(
        transform(original, "mixed", 12)[0], x
    )


def test_requests_name_no_distribution_the_seed_does():
    from bot.protocol.batches import Stage
    from bot.protocol.messages import Fingerprints, ReferenceRun, Run

    for request in (Run, ReferenceRun, Fingerprints, Stage):
        assert "distribution" not in {f.name for f in fields(request)}, request
    rng = random.Random(1)
    for name in DISTRIBUTIONS:
        seeds = {seed_for(name, rng.getrandbits(58)) for _ in range(50)}
        assert len(seeds) == 50 and all(0 <= s < 2**62 and distribution_of(s) == name for s in seeds)


def test_timed_calls_draw_every_kept_distribution_but_zeros_and_offset(tmp_path):
    problem = load_problem(PROBLEMS / "scale_add.py")
    drawn = [distribution_of(s) for s in timed_seeds(problem, random.Random(2), 2000)]
    assert set(drawn) == set(DISTRIBUTIONS) - {"zeros", "offset"}
    assert min(drawn.count(d) for d in set(drawn)) > 2000 / len(DISTRIBUTIONS) / 2
    skipping = tmp_path / "skipping.py"
    skipping.write_text((PROBLEMS / "scale_add.py").read_text() + 'SKIP_DISTRIBUTIONS = {"mixed": "no rows here"}\n')
    kept = load_problem(skipping, root=tmp_path)
    assert "mixed" not in {distribution_of(s) for s in timed_seeds(kept, random.Random(2), 500)}


@pytest.mark.parametrize(
    "problem,cheat,twin,distribution",
    [
        # Drops eps unless the request names a distribution other than "standard".
        (ROOT / "problems" / "rmsnorm.py", "cheat_rmsnorm_eps_on_signal", "honest_rmsnorm", "zeros"),
        # E[x^2] - E[x]^2 in float32.
        (PROBLEMS / "layernorm_f32.py", "cheat_layernorm_one_pass", "honest_layernorm_two_pass", "offset"),
    ],
)
def test_cheats_on_what_is_checked_are_rejected_and_their_twins_accepted(
    quick_options, problem, cheat, twin, distribution
):
    loaded = load_problem(problem, root=ROOT)
    result = evaluate(loaded, [load_candidate(CANDIDATES / f"{n}.py") for n in (cheat, twin)], None, quick_options())
    found = {o.candidate.name: o.verdict for o in result.candidates}
    assert found[twin].accepted, found[twin].reasons
    assert not found[cheat].accepted
    failed = [c for c in found[cheat].checks if not c.passed]
    assert [c.name for c in failed] == ["values"] and f"{distribution} inputs" in failed[0].evidence, failed


def test_results_with_the_new_distributions_pass_the_schema_and_unknown_names_do_not():
    from stage_two_artifacts import honest_results

    from bot.core.errors import BotError
    from bot.core.results_schema import validate

    doc = honest_results()
    doc["problems"][0]["distributions"] = ["standard", "shifted", "large", "rows", "limits", "mixed"]
    doc["problems"][0]["skipped_distributions"] = {"zeros": "ties", "offset": "near-ties at the 8th expert"}
    validate(doc)  # what bot publish (stage 2) holds an artifact to
    doc["problems"][0]["skipped_distributions"] = {"offsets": "a name no distribution has"}
    with pytest.raises(BotError):
        validate(doc)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(6, 40), (3, 4, 8), (37,)])
def test_broadcast_transforms_give_the_bits_of_their_per_element_definitions(dtype, shape):
    """The transforms broadcast a row's scale or shift rather than write one per element (a
    third copy of KernelBench's 8 GiB inputs ran the reference out of memory): the values are
    those of the per-element definitions, bit for bit, so every worker's inputs still agree."""
    from bot.harness import inputs as inp

    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    rows, width = inp._rows(x)
    values = torch.linspace(-8, 8, rows, dtype=torch.float32)
    flat = x.reshape(-1).to(torch.float32)
    per_row = (flat + values.repeat_interleave(width)[: flat.numel()]).to(dtype).reshape(shape)
    assert torch.equal(inp._plus_per_row(x, values, width), per_row)
    order = torch.randperm(width, generator=torch.Generator().manual_seed(9))
    scales = torch.tensor(MIXED_SCALES, dtype=torch.float64)[order % len(MIXED_SCALES)].to(torch.float32)
    repeats = math.ceil(flat.numel() / width)
    per_column = (flat * scales.repeat(repeats)[: flat.numel()]).to(dtype).reshape(shape)
    assert torch.equal(inp._mixed(x, torch.Generator().manual_seed(9)), per_column)
    assert torch.equal(transform([x], "shifted", 1)[0], x * 2.5 + 1.5)
