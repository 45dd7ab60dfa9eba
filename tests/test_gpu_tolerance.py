"""On a GPU: KernelBench problems whose own float32 result is off its float64 oracle (TF32
convolutions under cuDNN's defaults, a float32 GEMM with K = 8192) are accepted as written,
under both tolerance policies, and bf16 compute of them is not; an output valid only until the
next call is rejected with that reason. Skipped on CPU machines."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS, ROOT

from bot.core.settings import TolerancePolicy
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.verification.compare import REUSED_OUTPUT
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import load_problem
from bot.propose.derive import bases_for
from bot.propose.search import search_candidates
from bot.sandbox import Limits

pytestmark = pytest.mark.gpu

LEVEL2 = ROOT / "tests" / "fixtures" / "kernelbench_released" / "level2"


def _options(policy: TolerancePolicy = TolerancePolicy.STRICT) -> EvalOptions:
    return EvalOptions(
        device="cuda",
        use_cache=False,
        limits=Limits(memory_mb=65536, call_timeout_s=120),
        timing=TimingOptions(time_cap_s=1.0, min_samples=5, replicas=1),
        cache_root=Path("/tmp/kernel-bot-gpu-cache"),
        parallel=1,
        tolerance=policy,
    )


@pytest.mark.parametrize("policy", list(TolerancePolicy))
@pytest.mark.parametrize(
    "name", ["1_Conv2D_ReLU_BiasAdd.py", "4_Conv2d_Mish_Mish.py", "53_Gemm_Scaling_Hardtanh_GELU.py"]
)
def test_a_kernelbench_problem_that_was_rejected_as_written_is_accepted(name, policy):
    problem = load_problem(LEVEL2 / name, root=LEVEL2)
    notes: list[str] = []
    result = evaluate(
        problem, [], default_baseline(problem), _options(policy), lambda event: notes.append(event.line())
    )
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons
    values = [c for c in result.baseline.verdict.checks if c.name == "values"]
    print(name, policy, [c.details for c in values[:1]], [n for n in notes if "oracle" in n])


def test_bf16_compute_of_a_tf32_convolution_fails_and_another_tf32_algorithm_passes():
    problem = load_problem(LEVEL2 / "1_Conv2D_ReLU_BiasAdd.py", root=LEVEL2)
    cands = [load_candidate(CANDIDATES / f"{n}.py") for n in ("conv_relu_bias_bf16", "conv_relu_bias_channels_last")]
    result = evaluate(problem, cands, default_baseline(problem), _options())
    out = {o.candidate.name: o.verdict for o in result.candidates}
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons
    assert out["conv_relu_bias_channels_last"].accepted, out["conv_relu_bias_channels_last"].reasons
    bf16 = out["conv_relu_bias_bf16"]
    assert not bf16.accepted and any(r.startswith("values:") for r in bf16.reasons), bf16.reasons


def test_an_output_overwritten_by_the_next_call_is_rejected_saying_so():
    problem = load_problem(PROBLEMS / "scale_add.py")
    graph_trees = [
        c
        for c in search_candidates(problem, bases_for(problem), "cuda")[0]
        if c.name.startswith("compile-reduce-overhead")
    ]
    cands = [load_candidate(CANDIDATES / "reused_output.py"), *graph_trees]
    result = evaluate(problem, cands, None, _options())
    out = {o.candidate.name: o.verdict for o in result.candidates}
    reused = out["reused_output"]
    assert not reused.accepted and any(REUSED_OUTPUT in r for r in reused.reasons), reused.reasons
    for cand in graph_trees:  # rejected, if at all, for this reason alone
        failed = [c for c in out[cand.name].checks if not c.passed]
        assert all(c.name == "timed-call outputs" and REUSED_OUTPUT in c.evidence for c in failed), failed
        print(cand.name, out[cand.name].status, [c.evidence[:200] for c in failed])
