"""The search proposer: its catalogue, what it skips and why, and Triton autotuning."""

from __future__ import annotations

import ast

from bot.evaluate import evaluate
from bot.problems import load_problem
from bot.propose.search import (PATHS, Base, Split, autotune_variants, bases_for, path_candidate, path_of,
                                search_candidates, split_candidate, tunable_constants)
from conftest import CANDIDATES, PROBLEMS, ROOT


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
    assert not any(c.name.startswith("sdpa-") for c in cands)  # rmsnorm has no attention
    tuned = [c for c in cands if c.name.startswith("tune-")]
    assert 5 <= len(tuned) <= 16 and all("BLOCK_SIZE" in c.origin.detail for c in tuned)
    reasons = {s.transformation: s.reason for s in skipped}
    assert "no float32 matrix products" in reasons["TF32 matmul"]
    assert "no 2-D convolutions" in reasons["channels-last"]
    assert "no scaled_dot_product_attention" in reasons["SDPA backend choice of reference"]
    assert "class ModelNew(Model)" in next(c for c in cands if c.name == "eager-reference").source
    for cand in cands:  # every candidate is a self-contained module defining its class
        tree = ast.parse(cand.source)
        assert any(isinstance(n, ast.ClassDef) and n.name == cand.class_name for n in tree.body)
        assert cand.origin.strategy == "search" and cand.origin.parent


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
    assert _names(cands) == {"compile-default-reference", "compile-max-autotune-no-cudagraphs-reference",
                             "compile-default-target", "compile-max-autotune-no-cudagraphs-target",
                             "eager-reference"}
    reasons = [s.reason for s in skipped]
    assert "CUDA graphs need a GPU" in reasons and "TF32 exists only on GPUs" in reasons
    assert any("compile per shape" in r for r in reasons)
    assert any("no module-level BLOCK_" in r for r in reasons)


def test_attention_gets_one_candidate_per_sdpa_backend_on_gpu_only():
    problem = load_problem(ROOT / "problems" / "causal_attention.py", root=ROOT)
    cands, _ = search_candidates(problem, bases_for(problem), "cuda")
    held = {c.name: c for c in cands if c.name.startswith("sdpa-")}
    assert set(held) == {"sdpa-flash-reference", "sdpa-efficient-reference", "sdpa-cudnn-reference"}
    assert "SDPBackend.CUDNN_ATTENTION)" in held["sdpa-cudnn-reference"].source
    assert {path_of(name, "reference") for name in held} == {
        "sdpa:flash_attention", "sdpa:efficient_attention", "sdpa:cudnn_attention"}
    cands, skipped = search_candidates(problem, bases_for(problem), "cpu")
    assert not any(c.name.startswith("sdpa-") for c in cands)
    assert sum("need a GPU" in s.reason and "scaled_dot_product" in s.transformation for s in skipped) == 3


def test_held_backend_and_per_shape_compiles_run_through_the_verifier(quick_options):
    # The GPU-only paths' wrappers, run on CPU where their kernels exist: SDPA's flash kernel
    # has a CPU version, the cuDNN one does not, and must be rejected with the error, not crash.
    problem = load_problem(ROOT / "problems" / "causal_attention.py", root=ROOT)
    base = bases_for(problem)[0]
    names = ("sdpa:flash_attention", "sdpa:cudnn_attention", "compile:default:static",
             "compile:default:dynamic")
    cands = [path_candidate(base, PATHS[key]) for key in names]
    cands.append(split_candidate(base, Split("eager", "sdpa:flash_attention", 1000, 1.1)))
    result = evaluate(problem, cands, None, quick_options())
    verdicts = {o.candidate.name: o.verdict for o in result.candidates}
    for name in ("sdpa-flash-reference", "compile-default-static-reference",
                 "compile-default-dynamic-reference", "split-reference"):
        assert verdicts[name].accepted, (name, verdicts[name].reasons)
    cudnn = verdicts["sdpa-cudnn-reference"]
    assert not cudnn.accepted and "kernel" in " ".join(cudnn.reasons).lower(), cudnn.reasons


def test_tf32_only_where_the_tolerance_allows(tmp_path):
    src = (PROBLEMS / "scale_add.py").read_text().replace("x * self.w", "x @ torch.diag(self.w)")
    strict = tmp_path / "mm.py"
    strict.write_text(src)
    loose = tmp_path / "mm_loose.py"
    loose.write_text(src + "\nTOLERANCE = {'norm_rel': 1e-3, 'elem_rtol': 1e-2, 'elem_atol_rel': 1e-3}\n")
    _, skipped = search_candidates(load_problem(strict, root=tmp_path), bases_for(load_problem(strict, root=tmp_path)), "cuda")
    assert any("tighter than TF32" in s.reason for s in skipped)
    cands, _ = search_candidates(load_problem(loose, root=tmp_path), bases_for(load_problem(loose, root=tmp_path)), "cuda")
    assert "tf32" in _names(cands)


def test_autotune_variants_change_only_the_constants_and_are_verified(quick_options):
    source = (CANDIDATES / "big_add_triton.py").read_text()
    assert tunable_constants(source) == {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
    variants = autotune_variants(Base("target", source, "ModelNew"), limit=3)
    assert len(variants) == 3
    for v in variants:
        consts = tunable_constants(v.source)
        assert consts != {"BLOCK_SIZE": 1024, "NUM_WARPS": 4}
        assert v.source.replace(f"BLOCK_SIZE = {consts['BLOCK_SIZE']}", "BLOCK_SIZE = 1024") \
                       .replace(f"NUM_WARPS = {consts['NUM_WARPS']}", "NUM_WARPS = 4") == source
    result = evaluate(load_problem(PROBLEMS / "big_add.py"), variants, None, quick_options())
    assert all(o.verdict.accepted for o in result.candidates), [o.verdict.reasons for o in result.candidates]


def test_results_cache_reuses_a_judged_candidate_and_misses_on_change(quick_options, tmp_path):
    from bot.candidates import load_candidate
    from bot.domain import CandidateSource, Origin

    problem = load_problem(PROBLEMS / "scale_add.py")
    honest = load_candidate(CANDIDATES / "honest.py")
    cheat = load_candidate(CANDIDATES / "cheat_low_precision.py")
    reference = CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")
    options = quick_options(use_cache=True, cache_root=tmp_path)
    first = evaluate(problem, [honest, cheat], reference, options)
    assert len(list((tmp_path / "results" / "scale_add").glob("*.json"))) == 2
    calls = []
    second = evaluate(problem, [honest, cheat], reference, options, progress=calls.append)
    assert any("2 candidate(s) from the cache" in c for c in calls)
    for a, b in zip(first.candidates, second.candidates):
        assert a.verdict.status == b.verdict.status and a.verdict.reasons == b.verdict.reasons
        assert [s.measurement if s.measurement else None for s in a.shapes] == \
               [s.measurement if s.measurement else None for s in b.shapes]
        assert [s.speedup for s in a.shapes] == [s.speedup for s in b.shapes]
    # Timed against a baseline: two processes each, and the cache keeps which took each batch.
    assert second.candidates[0].shapes[0].measurement.workers == 2
    changed = CandidateSource("honest2", honest.source + "\n# changed\n", Origin("file"))
    calls.clear()
    third = evaluate(problem, [changed], reference, options, progress=calls.append)
    assert not any("from the cache" in c for c in calls) and third.candidates[0].verdict.accepted
