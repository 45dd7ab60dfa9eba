"""The search proposer: its catalogue, what it skips and why, and Triton autotuning."""

from __future__ import annotations

import ast
import re
from dataclasses import replace

import pytest
from conftest import CANDIDATES, PROBLEMS, ROOT

from bot.core.conclusive import conclusion
from bot.core.domain import source_hash
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.verification.trials import tunes_on_first_call
from bot.engine.workspace.problems import load_problem
from bot.propose.derive import Base, bases_for
from bot.propose.paths import PATHS, kernel_source, path_candidate, path_of
from bot.propose.search import search_candidates
from bot.propose.split import Split, split_candidate
from bot.propose.tuning import TUNABLES, autotune_variants, setting_of, tunable_constants


def _names(cands):
    return {c.name for c in cands}


def test_catalogue_on_gpu_covers_compile_modes_graphs_and_tuning():
    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    cands, skipped = search_candidates(problem, bases_for(problem), "cuda")
    for mode in ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"):
        assert f"compile-{mode}-reference" in _names(cands) and f"compile-{mode}-target" in _names(cands)
    assert {"cuda-graph-reference", "cuda-graph-target"} <= _names(cands)
    # One compile per shape, and shape-generic kernels for all: the order of calls no longer decides.
    static = next(c for c in cands if c.name == "compile-default-static-reference")
    assert "dynamic=False)" in static.source and "dynamic=False" in static.origin.detail
    assert "dynamic=True)" in next(c for c in cands if c.name == "compile-default-dynamic-target").source
    # Inductor's tuning of its own Triton kernels, one static compile per option set.
    multi = next(c for c in cands if c.name == "compile-default-static-multi-kernel-reference")
    assert "dynamic=False, options={'triton.multi_kernel': 1, 'fx_graph_cache': False})" in multi.source
    descent = next(c for c in cands if c.name == "compile-default-static-coordinate-descent-target")
    assert "options={'coordinate_descent_tuning': True})" in descent.source
    assert path_of(descent.name, "target") == "compile:default:static:coordinate-descent"
    assert not any(c.name.startswith("sdpa-") for c in cands)  # rmsnorm has no attention
    tuned = [c for c in cands if c.name.startswith("tune-")]
    assert 5 <= len(tuned) <= 16 and all("BLOCK_SIZE" in c.origin.detail for c in tuned)
    reasons = {s.transformation: s.reason for s in skipped}
    assert "no matrix products or convolutions" in reasons["TF32 matmul"]
    assert "no 2-D convolutions" in reasons["channels-last"]
    assert "no scaled_dot_product_attention" in reasons["SDPA backend choice of reference"]
    assert "class ModelNew(Model)" in next(c for c in cands if c.name == "eager-reference").source
    for cand in cands:  # every candidate is a self-contained module defining its class
        tree = ast.parse(cand.source)
        assert any(isinstance(n, ast.ClassDef) and n.name == cand.class_name for n in tree.body)
        assert cand.origin.strategy == "search" and cand.origin.parent


def test_with_one_shape_the_shape_policies_are_skipped_and_their_tuned_compiles_kept():
    # A KernelBench problem has one shape: dynamic=False compiles what the default does, and
    # dynamic=True has no other shape to serve. Two fewer compiles a problem, each said why.
    several = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    one = load_problem(ROOT / "tests" / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py", root=ROOT)
    assert len(several.shapes_for("cuda")) > 1 and len(one.shapes_for("cuda")) == 1
    policies = {"compile-default-static-reference", "compile-default-dynamic-reference"}
    assert policies <= _names(search_candidates(several, bases_for(several), "cuda")[0])
    cands, skipped = search_candidates(one, bases_for(one), "cuda")
    assert not policies & _names(cands)
    assert {"compile-default-reference", "compile-default-static-multi-kernel-reference"} <= _names(cands)
    reasons = {s.transformation: s.reason for s in skipped}
    assert "the same kernels" in reasons["torch.compile(mode='default', dynamic=False) of reference"]
    assert "no other shape" in reasons["torch.compile(mode='default', dynamic=True) of reference"]


def test_under_graph_timing_the_paths_that_only_add_graph_replay_are_skipped():
    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    graph_replaying = {"cuda-graph", "compile-reduce-overhead", "compile-max-autotune"}
    latency, _ = search_candidates(problem, bases_for(problem), "cuda", "latency")
    graph, skipped = search_candidates(problem, bases_for(problem), "cuda", "graph")
    dropped = _names(latency) - _names(graph)
    assert dropped == {f"{p}-{b}" for p in graph_replaying for b in ("reference", "target")}
    assert "compile-max-autotune-no-cudagraphs-target" in _names(graph)
    reasons = {s.transformation: s.reason for s in skipped}
    assert reasons["CUDA graph replay of target"] == "--timing graph replays every contender as a CUDA graph already"
    assert "replays every contender" in reasons["torch.compile(mode='max-autotune') of reference"]


def test_on_cpu_gpu_only_transformations_are_skipped_with_reasons():
    problem = load_problem(ROOT / "problems" / "swiglu.py", root=ROOT)
    cands, skipped = search_candidates(problem, bases_for(problem), "cpu")
    assert _names(cands) == {
        "compile-default-reference",
        "compile-max-autotune-no-cudagraphs-reference",
        "compile-default-target",
        "compile-max-autotune-no-cudagraphs-target",
        "eager-reference",
    }
    reasons = [s.reason for s in skipped]
    assert "CUDA graphs need a GPU" in reasons and "TF32 exists only on GPUs" in reasons
    assert any("compile per shape" in r for r in reasons)
    assert sum("Inductor's tuning of its Triton kernels" in r for r in reasons) == 4  # 2 option sets x 2 bases
    assert any("no module-level BLOCK_" in r for r in reasons)


def test_attention_gets_one_candidate_per_sdpa_backend_on_gpu_only():
    problem = load_problem(ROOT / "problems" / "causal_attention.py", root=ROOT)
    cands, _ = search_candidates(problem, bases_for(problem), "cuda")
    held = {c.name: c for c in cands if c.name.startswith("sdpa-")}
    assert set(held) == {
        "sdpa-flash-reference",
        "sdpa-efficient-reference",
        "sdpa-cudnn-reference",
        "sdpa-triton-short-reference",
    }
    assert "SDPBackend.CUDNN_ATTENTION)" in held["sdpa-cudnn-reference"].source
    assert {path_of(name, "reference") for name in held} == {
        "sdpa:flash_attention",
        "sdpa:efficient_attention",
        "sdpa:cudnn_attention",
        "sdpa:triton-short",
    }
    short = held["sdpa-triton-short-reference"]
    assert "_KernelBotReplaced(super().forward)" in short.source and "def _kernel_bot_short_attention(" in short.source
    assert "def _kernel_bot_gelu_tanh(" not in short.source  # only the kernels this forward may use
    assert tunes_on_first_call(short.source)  # its autotuner times configurations: trials alone
    cands, skipped = search_candidates(problem, bases_for(problem), "cpu")
    assert not any(c.name.startswith("sdpa-") for c in cands)
    assert sum("need a GPU" in s.reason and "scaled_dot_product" in s.transformation for s in skipped) == 3
    assert any("Triton's interpreter" in s.reason and "128 keys" in s.transformation for s in skipped)


def test_held_backend_and_per_shape_compiles_run_through_the_verifier(quick_options):
    # The GPU-only paths' wrappers, run on CPU where their kernels exist: SDPA's flash kernel
    # has a CPU version, the cuDNN one does not, and must be rejected with the error, not crash.
    problem = load_problem(ROOT / "problems" / "causal_attention.py", root=ROOT)
    base = bases_for(problem)[0]
    names = ("sdpa:flash_attention", "sdpa:cudnn_attention", "compile:default:static", "compile:default:dynamic")
    cands = [path_candidate(base, PATHS[key]) for key in names]
    cands.append(split_candidate(base, Split("eager", "sdpa:flash_attention", 1000, 1.1)))
    result = evaluate(problem, cands, None, quick_options())
    verdicts = {o.candidate.name: o.verdict for o in result.candidates}
    for name in (
        "sdpa-flash-reference",
        "compile-default-static-reference",
        "compile-default-dynamic-reference",
        "split-reference",
    ):
        assert verdicts[name].accepted, (name, verdicts[name].reasons)
    cudnn = verdicts["sdpa-cudnn-reference"]
    assert not cudnn.accepted and "kernel" in " ".join(cudnn.reasons).lower(), cudnn.reasons


def test_short_attention_kernel_is_verified_and_a_kernel_without_its_causal_mask_is_not(quick_options):
    # On a CPU the kernel runs through Triton's interpreter (CPU shapes: 64 queries and keys):
    # the verifier's float64 reference accepts it, and a mutant that lets every query see every
    # key is rejected, so the verified call did go through the kernel.
    honest, unmasked = _kernel_and_broken_copy(
        "causal_attention",
        "sdpa:triton-short",
        "visible = visible & (cols[None, :] <= rows[:, None])",
        "pass",
        quick_options,
    )
    assert honest.accepted, honest.reasons
    assert not unmasked.accepted
    assert "err" in " ".join(unmasked.reasons)


def _kernel_and_broken_copy(problem_name, key, honest_text, broken_text, quick_options):
    """The verdicts, on CPU, on a replacement-kernel path and on a copy with `honest_text`
    (found once) replaced by `broken_text`."""
    problem = load_problem(ROOT / "problems" / f"{problem_name}.py", root=ROOT)
    honest = path_candidate(bases_for(problem)[0], PATHS[key])
    assert honest.source.count(honest_text) == 1
    broken = replace(honest, name=f"{honest.name}-broken", source=honest.source.replace(honest_text, broken_text))
    verdicts = {
        o.candidate.name: o.verdict for o in evaluate(problem, [honest, broken], None, quick_options()).candidates
    }
    return verdicts[honest.name], verdicts[broken.name]


def test_replacement_kernels_leave_calls_they_do_not_cover_to_torch(tmp_path):
    # Long sequences, masks, dropout, float32, the exact GELU and calls that need a backward
    # fall through to torch itself: a kernel only ever replaces what it computes.
    import subprocess
    import sys

    script = tmp_path / "fallthrough.py"
    script.write_text(
        "import torch\n"
        + PATHS["sdpa:triton-short"].helper
        + kernel_source("gelu_tanh.py")
        + """
F = torch.nn.functional
q = torch.randn(1, 2, 64, 32, dtype=torch.bfloat16)
covered = _kernel_bot_short_sdpa(q, q, q, is_causal=True)
assert covered is not None and covered.shape == q.shape
long = torch.randn(1, 2, 129, 32, dtype=torch.bfloat16)
mask = torch.ones(64, 64, dtype=torch.bool)
grad = q.clone().requires_grad_()
for args, kwargs in [((long, long, long), {}), ((q, q, q), {"attn_mask": mask}),
                     ((q, q, q), {"dropout_p": 0.1}), ((q.float(),) * 3, {}), ((grad, q, q), {}),
                     ((q, q[:, :1], q[:, :1]), {"enable_gqa": True})]:
    assert _kernel_bot_short_sdpa(*args, **kwargs) is None, kwargs
with _KernelBotReplacementMode():
    out = F.scaled_dot_product_attention(long, long, long, is_causal=True)
torch.testing.assert_close(out, F.scaled_dot_product_attention(long, long, long, is_causal=True))
x = torch.randn(4, 64, dtype=torch.bfloat16)
assert _kernel_bot_fast_gelu(x, approximate="tanh") is not None
for args, kwargs in [((x,), {}), ((x.float(),), {"approximate": "tanh"}),
                     ((x.clone().requires_grad_(),), {"approximate": "tanh"})]:
    assert _kernel_bot_fast_gelu(*args, **kwargs) is None, kwargs
with _KernelBotReplacementMode():
    exact = F.gelu(x)
torch.testing.assert_close(exact, F.gelu(x))
print("ok")
"""
    )
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_short_attention_kernel_matches_float64_on_shapes_the_problem_does_not_have(tmp_path):
    # Beyond causal_attention's CPU shape: fewer queries than keys and more, a head size that
    # is no power of two, fp16, without the causal mask, strided (transposed) inputs, and a
    # scale of the caller's. Through Triton's interpreter, its bf16 dot mended as the worker does.
    import subprocess
    import sys

    script = tmp_path / "shapes.py"
    script.write_text(
        "import torch\n"
        + PATHS["sdpa:triton-short"].helper
        + """
from bot.harness.triton_interp import mend_bf16_dot
assert mend_bf16_dot()
F = torch.nn.functional
torch.manual_seed(0)
for b, h, n_q, n_k, d, causal, dtype, scale in [(1, 2, 64, 64, 32, True, torch.bfloat16, None),
                                                (2, 3, 17, 40, 24, True, torch.float16, None),
                                                (1, 2, 100, 100, 64, False, torch.bfloat16, None),
                                                (1, 1, 5, 128, 128, True, torch.bfloat16, 0.05),
                                                (1, 2, 130, 20, 32, True, torch.bfloat16, None)]:
    q = torch.randn(b, n_q, h, d, dtype=dtype).transpose(1, 2)  # [B, H, S, D] views, as after a reshape
    k, v = (torch.randn(b, h, n_k, d, dtype=dtype) for _ in range(2))
    got = _kernel_bot_short_sdpa(q, k, v, is_causal=causal, scale=scale)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=scale)
    err = float((got.double() - want).norm() / want.norm())
    assert got.dtype == dtype and got.shape == want.shape and err < 1e-2, (b, h, n_q, n_k, d, err)
print("ok")
"""
    )
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_tanh_gelu_gets_the_hardware_tanh_kernel_on_gpu_only_and_exact_gelu_does_not():
    gelu = load_problem(ROOT / "problems" / "gelu.py", root=ROOT)
    cands, _ = search_candidates(gelu, bases_for(gelu), "cuda")
    kernel = next(c for c in cands if c.name == "triton-gelu-tanh-reference")
    assert path_of(kernel.name, "reference") == "kernel:gelu-tanh" and tunes_on_first_call(kernel.source)
    assert "tanh.approx.f32" in kernel.source
    cands, skipped = search_candidates(gelu, bases_for(gelu), "cpu")
    assert "triton-gelu-tanh-reference" not in _names(cands)
    assert any("Triton's interpreter" in s.reason and "GELU" in s.transformation for s in skipped)
    exact = load_problem(ROOT / "problems" / "matmul_bias_gelu.py", root=ROOT)  # erf GELU: not this kernel
    cands, skipped = search_candidates(exact, bases_for(exact), "cuda")
    assert not any(c.name.startswith("triton-gelu-tanh") for c in cands)
    assert any(s.reason == "no GELU with approximate='tanh' here" for s in skipped)


def test_gelu_kernel_is_verified_and_one_with_a_wrong_coefficient_is_not(quick_options):
    # On a CPU the interpreter computes tanh from exp (it runs no PTX): the wiring, the
    # fall-through and the kernel's arithmetic are what this checks; the GPU test the rest.
    honest, wrong = _kernel_and_broken_copy(
        "gelu", "kernel:gelu-tanh", "0.044715 * x * x * x", "0.44715 * x * x * x", quick_options
    )
    assert honest.accepted, honest.reasons
    assert not wrong.accepted


def _compile_for_sm90(*flags):
    # The interpreter never builds the GPU path; Triton's own ptxas does, here, for sm_90.
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "compile_kernels_sm90.py"), "--json", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.stdout, done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def test_replacement_kernels_compile_for_sm90_read_at_full_width_and_spill_nothing():
    rc, report = _compile_for_sm90()
    assert rc == 0 and report["failed"] == 0, [b for b in report["builds"] if b["problems"]]
    configs = {}
    for b in report["builds"]:
        configs.setdefault(b["call"], []).append(b["config"])
    assert sorted(len(c) for c in configs.values()) == [6, 7, 7, 7, 7]  # three attention calls, two GELU
    # The pruning keeps two warps off 128 keys, where they spilled (the next test).
    assert not any("warps=2," in c for c in configs["attention 1x32x128x128 bf16 causal"])
    assert all(
        b["vector_loads"] and not b["spilled_bytes"] and b["shared_bytes"] <= 227 * 1024 for b in report["builds"]
    )


def test_the_sm90_build_check_names_configurations_that_spill():
    rc, report = _compile_for_sm90("--unpruned")
    failed = [b for b in report["builds"] if b["problems"]]
    assert rc == 1 and report["failed"] == len(failed) > 0
    assert all(
        b["call"] == "attention 1x32x128x128 bf16 causal"
        and "warps=2," in b["config"]
        and b["problems"][0].startswith("spills ")
        for b in failed
    )


def test_tf32_only_where_the_tolerance_allows(tmp_path):
    src = (PROBLEMS / "scale_add.py").read_text().replace("x * self.w", "x @ torch.diag(self.w)")
    strict = tmp_path / "mm.py"
    strict.write_text(src)
    loose = tmp_path / "mm_loose.py"
    loose.write_text(src + "\nTOLERANCE = {'norm_rel': 1e-3, 'elem_rtol': 1e-2, 'elem_atol_rel': 1e-3}\n")
    _, skipped = search_candidates(
        load_problem(strict, root=tmp_path), bases_for(load_problem(strict, root=tmp_path)), "cuda"
    )
    assert any("tighter than TF32" in s.reason for s in skipped)
    cands, _ = search_candidates(
        load_problem(loose, root=tmp_path), bases_for(load_problem(loose, root=tmp_path)), "cuda"
    )
    assert "tf32" in _names(cands)


def test_autotune_variants_change_only_the_constants_and_are_verified(quick_options):
    source = (CANDIDATES / "big_add_triton.py").read_text()
    assert tunable_constants(source) == {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
    variants = autotune_variants(Base("target", source, "ModelNew"), limit=3)
    assert len(variants) == 3
    for v in variants:
        consts = tunable_constants(v.source)
        assert consts != {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
        assert (
            v.source.replace(f"BLOCK_SIZE = {consts['BLOCK_SIZE']}", "BLOCK_SIZE = 1024").replace(
                f"NUM_WARPS = {consts['NUM_WARPS']}", "NUM_WARPS = 4"
            )
            == source
        )
    result = evaluate(load_problem(PROBLEMS / "big_add.py"), variants, None, quick_options())
    assert all(o.verdict.accepted for o in result.candidates), [o.verdict.reasons for o in result.candidates]


def test_results_cache_reuses_a_judged_candidate_and_misses_on_change(quick_options, tmp_path):
    from bot.core.domain import CandidateSource, Origin
    from bot.engine.workspace.candidates import load_candidate

    problem = load_problem(PROBLEMS / "scale_add.py")
    honest = load_candidate(CANDIDATES / "honest.py")
    cheat = load_candidate(CANDIDATES / "cheat_low_precision.py")
    reference = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    options = quick_options(use_cache=True, cache_root=tmp_path)
    first = evaluate(problem, [honest, cheat], reference, options)
    # Only conclusions are kept (bot.core.conclusive): the cheat's rejection on its values always,
    # the honest copy's timing where its interval lay on one side of min-speedup.
    kept = [o for o in first.candidates if conclusion(o, options.min_speedup).conclusive]
    assert first.candidates[1] in kept
    assert len(list((tmp_path / "results" / "scale_add").glob("*.json"))) == len(kept)
    calls = []
    second = evaluate(problem, [honest, cheat], reference, options, progress=lambda event: calls.append(event.line()))
    assert any(f"{len(kept)} candidate(s) from the cache" in c for c in calls)
    for a, b in zip(first.candidates, second.candidates):
        if a in kept:
            assert a == b
    # Timed against a baseline: two processes each, and the cache keeps which took each batch.
    assert second.candidates[0].shapes[0].measurement.workers == 2
    changed = CandidateSource("honest2", honest.source + "\n# changed\n", Origin("file"))
    calls.clear()
    third = evaluate(problem, [changed], reference, options, progress=lambda event: calls.append(event.line()))
    assert not any("from the cache" in c for c in calls) and third.candidates[0].verdict.accepted
    # Progress says where the start-up of the reference, baseline and candidate went.
    started = [c for c in calls if "started in" in c]
    assert len(started) == 1 and re.search(
        r"3 worker\(s\) started in [\d.]+ s \(each: process [\d.]+ s, "
        r"hello [\d.]+ s, import [\d.]+ s; medians\)",
        started[0],
    ), calls


def test_autotuning_sweeps_every_value_of_every_knob_before_moving_two_at_once():
    # Five knobs: the old strided sample of their 1,200-point product could miss whole axes.
    source = (CANDIDATES / "matmul_bias_gelu_triton.py").read_text()
    current = tunable_constants(source)
    assert set(current) == {"BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_WARPS", "NUM_STAGES"}
    settings = [tunable_constants(v.source) for v in autotune_variants(Base("target", source, "ModelNew"))]
    assert len(settings) == 16 and current not in settings
    for key, values in TUNABLES.items():
        if key in current:  # each other value of each knob, with every other knob kept
            assert {s[key] for s in settings if all(s[k] == current[k] for k in current if k != key)} == set(values) - {
                current[key]
            }
    # Two knobs: the sweep (9) first, then pairs spread over the grid, nothing twice.
    source = (CANDIDATES / "big_add_triton.py").read_text()
    settings = [
        tuple(sorted(tunable_constants(v.source).items()))
        for v in autotune_variants(Base("target", source, "ModelNew"), limit=14)
    ]
    assert len(settings) == len(set(settings)) == 14
    moved = [sum(a != b for a, b in zip(s, sorted({"BLOCK_SIZE": 1024, "NUM_WARPS": 4}.items()))) for s in settings]
    assert moved == sorted(moved) and moved.count(1) == 9


def test_autotuning_leaves_out_settings_already_tried():
    source = (CANDIDATES / "big_add_triton.py").read_text()
    first = autotune_variants(Base("target", source, "ModelNew"), limit=4)
    tried = frozenset(setting_of(v.source) for v in first)
    again = autotune_variants(Base("target", source, "ModelNew"), limit=4, tried=tried)
    assert not tried & {setting_of(v.source) for v in again} and len(again) == 4


def _tuned_outcome(source: str, ratio: float, accepted: bool = True, parent: str = ""):
    from bot.core.domain import CandidateSource, Origin, Verdict
    from bot.core.measurement import Speedup
    from bot.core.outcomes import ContenderOutcome, ShapeOutcome

    name = "tune-" + "-".join(f"{k.lower()}{v}" for k, v in tunable_constants(source).items())
    sp = Speedup(
        ratio, ratio * 0.98, ratio * 1.02, 0.95, "faster" if ratio * 0.98 > 1.05 else "no significant difference"
    )
    return ContenderOutcome(
        CandidateSource(name, source, Origin("search", "autotune", parent=parent)),
        "candidate",
        Verdict("accepted" if accepted else "rejected", ()),
        (ShapeOutcome("prefill", "", "bfloat16", None, sp, None, None, None),),
    )


def test_a_tuning_step_descends_from_the_fastest_variant_that_beat_the_baseline():
    from bot.engine.loop.attempts import Attempt
    from bot.engine.loop.optimize import tuning_step

    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    target = next(b for b in bases_for(problem) if b.label == "target")
    variants = autotune_variants(target)
    ratios = {i: 1.0 for i in range(len(variants))}
    ratios[3] = 1.3  # the fastest; another, faster still, was rejected
    attempts = [
        Attempt(0, _tuned_outcome(v.source, ratios[i], parent=target.parent_hash)) for i, v in enumerate(variants)
    ]
    attempts.append(
        Attempt(
            0,
            _tuned_outcome(
                variants[0].source.replace("NUM_WARPS = 4", "NUM_WARPS = 16"),
                2.0,
                accepted=False,
                parent=target.parent_hash,
            ),
        )
    )
    step = tuning_step(bases_for(problem), attempts)
    best = tunable_constants(variants[3].source)
    tried = {setting_of(a.outcome.candidate.source) for a in attempts} | {setting_of(target.source)}
    assert step and len(step) <= 8
    assert all(setting_of(c.source) not in tried for c in step)
    assert all(sum(tunable_constants(c.source)[k] != best[k] for k in best) == 1 for c in step)
    assert all(c.origin.parent == source_hash(variants[3].source) for c in step)
    # No step where no tuned variant's interval cleared 1.
    flat = [Attempt(0, _tuned_outcome(v.source, 1.01, parent=target.parent_hash)) for v in variants]
    assert tuning_step(bases_for(problem), flat) == []


def test_optimize_takes_a_tuning_step_on_a_gpu_and_not_on_a_cpu(monkeypatch):
    import bot.engine.loop.optimize as optimize_module
    from bot.core.domain import CandidateSource, Environment, Origin
    from bot.core.outcomes import Evaluation
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.loop.attempts import OptimizeOptions

    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    target = next(b for b in bases_for(problem) if b.label == "target")
    fastest = autotune_variants(target)[2]
    rounds: list[list[str]] = []

    def fake_evaluate(problem_, cands, baseline, options, progress=None):
        rounds.append([c.name for c in cands])
        outcomes = tuple(
            _tuned_outcome(c.source, 1.5 if c.source == fastest.source else 1.0, parent=c.origin.parent or "")
            if c.name.startswith("tune-")
            else _tuned_outcome(c.source, 1.0)
            for c in cands
        )
        outcomes = tuple(replace(o, candidate=c) for o, c in zip(outcomes, cands))
        env = Environment(options.device, "test", "2", None, None, None, "3.11")
        return Evaluation(problem_, env, None, outcomes)

    monkeypatch.setattr(optimize_module, "evaluate", fake_evaluate)
    baseline = CandidateSource("target", target.source, Origin("baseline"), problem.target, "ModelNew")
    for device, steps in (("cuda", 1), ("cpu", 0)):
        rounds.clear()
        options = OptimizeOptions(evaluation=EvalOptions(device=device, use_cache=False))
        run = optimize_module.optimize(problem, baseline, options)
        step_rounds = [r for r in rounds[1:] if r and all(n.startswith("tune-") for n in r)]
        assert len(step_rounds) == steps, rounds
        if steps:
            best = tunable_constants(fastest.source)
            names = {a.name for a in run.result.attempts}
            assert set(step_rounds[0]) <= names
            assert all(
                sum(tunable_constants(run.sources[a.source_sha256])[k] != best[k] for k in best) == 1
                for a in run.result.attempts
                if a.name in step_rounds[0]
            )


def test_the_best_llm_kernel_is_autotuned_then_descended_on_a_gpu(monkeypatch):
    import bot.engine.loop.optimize as optimize_module
    from bot.core.domain import CandidateSource, Environment, Origin
    from bot.core.outcomes import Evaluation
    from bot.engine.evaluation.options import EvalOptions
    from bot.engine.loop.attempts import OptimizeOptions

    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)
    kernel = problem.target.read_text()  # stands in for an LLM's Triton kernel with knobs
    llm = CandidateSource("llm-r1-s0", kernel, Origin("llm", "model m", round=1))
    fastest = autotune_variants(Base("llm", kernel, "ModelNew"), limit=12)[4]
    rounds: list[tuple[int, list[str]]] = []

    class OneAnswer:
        def propose(self, request):
            return [llm]

    def fake_evaluate(problem_, cands, baseline, options, progress=None):
        rounds.append((cands[0].origin.round, [c.name for c in cands]))
        ratio = {llm.source: 1.5, fastest.source: 2.0}
        outcomes = tuple(replace(_tuned_outcome(c.source, ratio.get(c.source, 1.0)), candidate=c) for c in cands)
        return Evaluation(problem_, Environment(options.device, "test", "2", None, None, None, "3.11"), None, outcomes)

    monkeypatch.setattr(optimize_module, "evaluate", fake_evaluate)
    baseline = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    options = OptimizeOptions(strategy="llm", max_rounds=1, evaluation=EvalOptions(device="cuda", use_cache=False))
    run = optimize_module.optimize(problem, baseline, options, proposer=OneAnswer())
    assert [r for r, _ in rounds] == [1, 2, 2]  # the LLM round, its autotuning, one descent step
    assert len(rounds[1][1]) == 12 and rounds[2][1] and set(rounds[1][1]).isdisjoint(rounds[2][1])
    best = tunable_constants(fastest.source)
    assert all(
        sum(tunable_constants(run.sources[a.source_sha256])[k] != best[k] for k in best) == 1
        for a in run.result.attempts
        if a.name in rounds[2][1]
    )
    assert run.result.best.source == fastest.source


def test_on_cpu_a_triton_implementation_is_not_compiled_and_the_report_says_why():
    problem = load_problem(ROOT / "problems" / "rmsnorm.py", root=ROOT)  # its TARGET is a Triton kernel
    cands, skipped = search_candidates(problem, bases_for(problem), "cpu")
    assert "compile-default-reference" in _names(cands)  # the plain PyTorch reference still is
    assert not any(c.name.startswith("compile-") and c.name.endswith("-target") for c in cands)
    assert not any(c.name.startswith("tune-") for c in cands)  # interpreted: no setting is timed
    reasons = {s.transformation: s.reason for s in skipped}
    assert "cannot trace" in reasons["torch.compile(mode='default') of target"]
    assert "no setting is timed" in reasons["Triton autotuning of target"]
    gpu, _ = search_candidates(problem, bases_for(problem), "cuda")
    assert "compile-default-target" in _names(gpu) and any(c.name.startswith("tune-") for c in gpu)


# KernelBench's file byte for byte (MIT, tests/fixtures/kernelbench_released/LICENSE), and where the
# checkout sits beside the shared copy of KernelBench, that it still is.
SQUARE_MATMUL = "level1/1_Square_matrix_multiplication_.py"
KERNELBENCH = ROOT / "tests" / "fixtures" / "kernelbench_released"
SHARED_KERNELBENCH = ROOT.parent / "shared" / "kernelbench"


def test_a_float32_torch_matmul_of_kernelbench_is_offered_tf32_or_told_why_not():
    """Level 1's square matmul, read as it is (its 4096 x 4096 inputs are never made): its
    `torch.rand` inputs carry no dtype, so they are float32, and `torch.matmul` is a matrix product."""
    path = KERNELBENCH / SQUARE_MATMUL
    if (SHARED_KERNELBENCH / SQUARE_MATMUL).is_file():
        assert path.read_bytes() == (SHARED_KERNELBENCH / SQUARE_MATMUL).read_bytes()
    problem = load_problem(path, root=path.parent)
    cands, skipped = search_candidates(problem, bases_for(problem), "cuda")
    reasons = {s.transformation: s.reason for s in skipped}
    # The dtype default (norm_rel 1e-5) is tighter than TF32's error: that is why, and nothing else.
    assert "tighter than TF32's error" in reasons["TF32 matmul"]
    loose = replace(problem, tolerance={"norm_rel": 1e-3})
    cands, skipped = search_candidates(loose, bases_for(loose), "cuda")
    assert "tf32" in {c.name for c in cands} and "TF32 matmul" not in {s.transformation for s in skipped}


@pytest.mark.parametrize(
    "forward",
    [
        "return torch.matmul(a, b)",
        "return a @ b",
        "return torch.mm(a, b)",
        "return a.mm(b)",
        "return torch.bmm(a[None], b[None])[0]",
        "return F.linear(a, b)",
        "return torch.nn.functional.linear(a, b)",
        "return self.lin(a)",
        "return torch.einsum('ij,jk->ik', a, b)",
        "return torch.addmm(a, a, b)",
        "return self.conv(a[None, None])[0, 0]",
    ],
)
def test_every_spelling_of_a_float32_matrix_product_is_one(forward):
    from bot.propose.search import matrix_products

    source = f"""
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.conv = nn.Conv2d(1, 1, 3, padding=1)

    def forward(self, a, b):
        {forward}

def get_inputs():
    return [torch.rand(8, 8), torch.rand(8, 8)]

def get_init_inputs():
    return []
"""
    assert matrix_products(source) == (True, [])
    assert matrix_products(source.replace("torch.rand(8, 8)", "torch.rand(8, 8, dtype=torch.bfloat16)")) == (
        True,
        ["bfloat16"],
    )


def test_elementwise_code_and_decorators_are_no_matrix_products():
    from bot.propose.search import matrix_products

    source = """
import torch

@torch.no_grad()
def scale(x):
    return x * 2 + torch.relu(x)
"""
    assert matrix_products(source) == (False, [])
