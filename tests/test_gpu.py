"""CUDA-only checks, run on the H200 (skipped on CPU machines): hacks that need a GPU are
rejected, honest Triton and CUDA C++ candidates pass, every bundled problem verifies."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS, ROOT

from bot.core.judge import significant
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions
from bot.engine.timing.records import TimingOptions
from bot.engine.workspace.candidates import default_baseline, load_candidate
from bot.engine.workspace.problems import find_problems, load_problem
from bot.sandbox import Limits

pytestmark = pytest.mark.gpu


def _options(mode="latency", **kw):
    return EvalOptions(
        device="cuda",
        use_cache=False,
        limits=Limits(memory_mb=32768, call_timeout_s=60),
        timing=TimingOptions(time_cap_s=1.0, min_samples=10, mode=mode),
        cache_root=Path("/tmp/kernel-bot-gpu-cache"),
        **kw,
    )


def _verdicts(problem, names, mode="latency"):
    result = evaluate(
        load_problem(PROBLEMS / problem), [load_candidate(CANDIDATES / f"{n}.py") for n in names], None, _options(mode)
    )
    return {o.candidate.name: o for o in result.candidates}


def test_cuda_hacks_are_rejected_and_honest_kernels_pass():
    out = _verdicts(
        "big_add.py", ["cuda_side_stream", "cuda_empty", "big_add_triton", "big_add_cuda", "big_add_cuda_compile_error"]
    )
    side = out["cuda_side_stream"].verdict
    assert not side.accepted and {"stream timing", "roofline"} & {c.name for c in side.checks if not c.passed}, (
        side.reasons
    )
    empty = out["cuda_empty"].verdict  # poisoned (NaN) or fresh memory: never the right values
    assert not empty.accepted and any(r.startswith("values:") for r in empty.reasons), empty.reasons
    for name in ("big_add_triton", "big_add_cuda"):
        assert out[name].verdict.accepted, (name, out[name].verdict.reasons)
        assert out[name].shapes[0].pct_of_floor is not None
    broken = out["big_add_cuda_compile_error"].verdict
    assert not broken.accepted and "undefined_symbol" in broken.reasons[0], broken.reasons


def test_a_worker_out_of_gpu_memory_reports_it_as_such():
    # On the H200 workers forked from a server whose imports had started NVML failed an NVML
    # assertion in torch's out-of-memory report instead; the server now shuts NVML down first.
    out = _verdicts("big_add.py", ["cuda_out_of_memory", "big_add_triton"])
    short = out["cuda_out_of_memory"].verdict
    assert not short.accepted and any("CUDA out of memory" in r for r in short.reasons), short.reasons
    assert not any("INTERNAL ASSERT" in r for r in short.reasons), short.reasons
    assert out["big_add_triton"].verdict.accepted, out["big_add_triton"].verdict.reasons


def test_graph_timing_replays_honest_kernels_and_rejects_what_capture_hides():
    out = _verdicts("big_add.py", ["big_add_triton", "cuda_side_stream", "cheat_graph_stale"], mode="graph")
    honest = out["big_add_triton"]
    assert honest.verdict.accepted, honest.verdict.reasons
    assert honest.shapes[0].measurement is not None and honest.shapes[0].pct_of_floor is not None
    side = out["cuda_side_stream"].verdict  # its stream forks from the capture and never joins it
    assert not side.accepted and any("CUDA graph capture for --timing graph failed" in r for r in side.reasons), (
        side.reasons
    )
    stale = out["cheat_graph_stale"].verdict  # replays write nothing: stale on fresh inputs
    assert not stale.accepted and any("timed call" in r for r in stale.reasons), stale.reasons


def test_time_hidden_by_rebinding_the_harness_clocks_is_caught_and_honest_code_passes_in_every_mode():
    # cheat_patch_harness spins 2 ms on the host a call and halves the worker's captured clock
    # and event reader. In latency timing that hides about 1 ms a call from its report; in
    # graph timing its spin is not captured, so there only honest code is asserted on.
    for mode in ("latency", "throughput", "graph"):
        out = _verdicts("scale_add.py", ["honest", "cheat_patch_harness"], mode=mode)
        honest = out["honest"].verdict
        assert honest.accepted, (mode, honest.reasons)
        assert any(c.name == "hidden time" and c.passed for c in honest.checks), mode
        if mode == "latency":
            cheat = out["cheat_patch_harness"].verdict
            assert not cheat.accepted and "hidden time" in {c.name for c in cheat.checks if not c.passed}, cheat.reasons


def test_time_below_the_roofline_floor_is_rejected_as_implausible():
    out = _verdicts("big_add_inflated_floor.py", ["big_add_triton"])
    verdict = out["big_add_triton"].verdict
    assert not verdict.accepted
    assert any(r.startswith("roofline:") and "implausible" in r for r in verdict.reasons), verdict.reasons


@pytest.mark.parametrize("problem", [p.name for p in find_problems(ROOT / "problems", root=ROOT)])
def test_every_bundled_problem_verifies_its_own_reference_and_target(problem):
    prob = load_problem(ROOT / "problems" / f"{problem}.py", root=ROOT)
    contenders = [default_baseline(prob)]
    result = evaluate(prob, contenders, None, _options())
    outcome = result.candidates[0]
    assert outcome.verdict.accepted, outcome.verdict.reasons
    assert all(s.measurement is not None and s.floor_us is not None for s in outcome.shapes)


def test_each_sdpa_backend_and_per_shape_compile_of_attention_is_judged_on_its_own():
    # On the GPU every SDPA backend has a kernel for bf16 causal attention with head dim 128:
    # each held-backend candidate must pass the verifier, as must the per-shape compiles.
    from bot.propose.derive import bases_for
    from bot.propose.paths import PATHS, path_candidate

    prob = load_problem(ROOT / "problems" / "causal_attention.py", root=ROOT)
    base = bases_for(prob)[0]
    keys = (
        "sdpa:flash_attention",
        "sdpa:efficient_attention",
        "sdpa:cudnn_attention",
        "compile:default:static",
        "compile:default:dynamic",
    )
    result = evaluate(prob, [path_candidate(base, PATHS[k]) for k in keys], default_baseline(prob), _options())
    for outcome in result.candidates:
        assert outcome.verdict.accepted, (outcome.candidate.name, outcome.verdict.reasons)
        assert len(outcome.shapes) == 2 and outcome.speedup is not None


COMPILED_AFFINE = """
import os
import sys
import torch
import torch.nn as nn

FORKED_WITH_COMPILER = "torch._inductor.compile_fx" in sys.modules  # before this module imported it


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        assert FORKED_WITH_COMPILER, "the fork server did not hand over torch.compile's machinery"
        self.affine = torch.compile(lambda x: x * 2.0 + 1.0)

    def forward(self, x):
        return self.affine(x)
"""


def test_a_gpu_fork_server_imports_the_compiler_and_its_forks_still_use_cuda(tmp_path, monkeypatch):
    # The server's imports must leave the driver uninitialised (cuInit in a parent breaks CUDA in
    # every fork); `serve` checks that, and `compiler` says the imports were kept.
    from bot.sandbox import process
    from bot.sandbox.base import WorkerLaunch

    monkeypatch.setattr(process, "_servers", {})
    server = process.fork_server_for(
        WorkerLaunch(workdir=tmp_path / "w", cache_dir=tmp_path / "c", readable=(), device="cuda")
    )
    assert server is not None and server.compiler
    # Each worker enters a PID namespace of its own, so it cannot see the server as its parent;
    # the server's own count of the forks it made says the workers came from it.
    forks = []
    spawn = server.spawn
    monkeypatch.setattr(server, "spawn", lambda *a, **k: forks.append(1) or spawn(*a, **k))
    compiled = tmp_path / "compiled_affine.py"
    compiled.write_text(COMPILED_AFFINE)
    candidates = [load_candidate(compiled)] + [
        load_candidate(CANDIDATES / f"{n}.py") for n in ("big_add_triton", "big_add_cuda")
    ]
    result = evaluate(load_problem(PROBLEMS / "big_add.py"), candidates, None, _options())
    for outcome in result.candidates:
        assert outcome.verdict.accepted, (outcome.candidate.name, outcome.verdict.reasons)
    assert len(forks) >= len(candidates) + 1  # the reference's worker and each candidate's
    server.close()


def test_inductor_tuning_paths_compile_and_pass_the_verifier():
    from bot.propose.derive import bases_for
    from bot.propose.paths import INDUCTOR_TUNING, PATHS, path_candidate

    prob = load_problem(ROOT / "problems" / "fp8_quant.py", root=ROOT)
    base = bases_for(prob)[0]
    paths = [PATHS[f"compile:default:static:{t}"] for t in INDUCTOR_TUNING]
    said: list[str] = []
    result = evaluate(
        prob,
        [path_candidate(base, p) for p in paths],
        default_baseline(prob),
        _options(),
        lambda event: said.append(event.line()),
    )
    for outcome in result.candidates:
        assert outcome.verdict.accepted, (outcome.candidate.name, outcome.verdict.reasons)
        assert outcome.speedup is not None
    # Both compile beside the baseline's trials; only their timing of variants has the GPU alone.
    assert any("2 of them timing their kernel variants with the GPU to themselves" in s for s in said), said
    assert not any("one at a time" in s for s in said), said


@pytest.mark.parametrize(
    "problem, key, honest_text, broken_text",
    [
        # causal_attention's decode (64 keys) goes through the kernel, its prefill (4096) to SDPA.
        ("causal_attention", "sdpa:triton-short", "visible = visible & (cols[None, :] <= rows[:, None])", "pass"),
        # gelu's both shapes, with the GPU's tanh instruction (inline PTX, which the CPU tests cannot run).
        ("gelu", "kernel:gelu-tanh", "0.044715 * x * x * x", "0.44715 * x * x * x"),
    ],
)
def test_replacement_kernels_pass_on_the_gpu_and_broken_copies_do_not(problem, key, honest_text, broken_text):
    from dataclasses import replace

    from bot.propose.derive import bases_for
    from bot.propose.paths import PATHS, path_candidate

    prob = load_problem(ROOT / "problems" / f"{problem}.py", root=ROOT)
    honest = path_candidate(bases_for(prob)[0], PATHS[key])
    assert honest.source.count(honest_text) == 1
    broken = replace(honest, name=f"{honest.name}-broken", source=honest.source.replace(honest_text, broken_text))
    result = evaluate(prob, [honest, broken], default_baseline(prob), _options("graph"))
    verdicts = {o.candidate.name: o for o in result.candidates}
    accepted = verdicts[honest.name]
    assert accepted.verdict.accepted, accepted.verdict.reasons
    assert len(accepted.shapes) == 2 and accepted.speedup is not None
    assert not verdicts[broken.name].verdict.accepted


def test_timed_calls_are_checked_on_their_committed_fingerprints_and_full_outputs():
    for mode in ("latency", "graph"):
        out = _verdicts("scale_add.py", ["cheat_some_calls", "cheat_compute_on_reveal", "honest"], mode=mode)
        for name in ("cheat_some_calls", "cheat_compute_on_reveal"):
            verdict = out[name].verdict
            assert not verdict.accepted and "timed-call outputs" in {c.name for c in verdict.checks if not c.passed}, (
                mode,
                name,
                verdict.reasons,
            )
        assert out["honest"].verdict.accepted, (mode, out["honest"].verdict.reasons)


def test_hiding_five_percent_of_a_compute_bound_gpu_call_is_never_claimed_faster():
    # On a 2.8 ms call timed in a handful of batches the time the parent's clock leaves
    # unexplained scatters by milliseconds a call, so a 5 % shave is counted in some runs and
    # lost in the scatter in others (docs/verifier.md); what must hold in every run is that the
    # bar a pull request needs is never cleared by it.
    problem = load_problem(PROBLEMS / "tall_matmul.py")
    result = evaluate(
        problem,
        [load_candidate(CANDIDATES / f"{n}.py") for n in ("cheat_shave_clock", "tall_matmul_honest")],
        default_baseline(problem),
        _options(),
    )
    by_name = {o.candidate.name: o for o in result.candidates}
    cheat = by_name["cheat_shave_clock"]
    hidden = next(c for c in cheat.verdict.checks if c.name == "hidden time")
    print("cheat_shave_clock:", cheat.verdict.status, cheat.speedup, cheat.speedup_ci, hidden.details)
    # The parent's clock saw the slice it hid (5 % of the call, a twentieth more than the 95 %
    # it reported), within the figure's own noise: on an H100 that noise was 1.1 to 3.4 ms a
    # call, so the sign of one run's figure says nothing.
    shaved = hidden.details["claimed_us"] / 19
    assert abs(hidden.details["hidden_us_per_call"] - shaved) <= 3 * hidden.details["noise_us"], hidden.details
    assert not significant(cheat, 1.05), (cheat.speedup, cheat.speedup_ci)  # never claimed at the bar
    assert by_name["tall_matmul_honest"].verdict.accepted, by_name["tall_matmul_honest"].verdict.reasons
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons


def test_answers_computed_while_inputs_are_staged_are_on_the_parents_clock():
    # On CUDA a worker draws its batch's inputs itself, inside its window: a candidate that
    # computes the answers there (cheat_precompute_on_stage.py) has that time on the parent's
    # clock, beside its calls' (bot.engine.timing.staging).
    problem = load_problem(PROBLEMS / "tall_matmul.py")
    names = ("cheat_precompute_on_stage", "tall_matmul_honest")
    result = evaluate(
        problem, [load_candidate(CANDIDATES / f"{n}.py") for n in names], default_baseline(problem), _options()
    )
    by_name = {o.candidate.name: o for o in result.candidates}
    cheat = by_name["cheat_precompute_on_stage"]
    hidden = next(c for c in cheat.verdict.checks if c.name == "hidden time")
    assert not hidden.passed or hidden.details["counted_us"] > 10 * hidden.details["claimed_us"], hidden.details
    assert not significant(cheat, 1.05), (cheat.speedup, cheat.speedup_ci)
    assert by_name["tall_matmul_honest"].verdict.accepted, by_name["tall_matmul_honest"].verdict.reasons
    assert result.baseline.verdict.accepted, result.baseline.verdict.reasons


def test_gpu_work_left_running_after_a_batch_fails_the_contender_that_left_it():
    # cuda_spill.py is right on every call, then leaves a spin kernel on a stream of its own with
    # the harness's synchronise rebound: the reference's look at the GPU before the next window
    # (every contender frozen) waits for a time slice, and the blame goes to the last one timed.
    out = _verdicts("big_add.py", ["cuda_spill", "big_add_triton"])
    spill = out["cuda_spill"].verdict
    failed = {c.name: c for c in spill.checks if not c.passed}
    assert not spill.accepted and "GPU left busy" in failed, spill.reasons
    assert failed["GPU left busy"].details["wall_us"] > failed["GPU left busy"].details["idle_wall_us"] + 1500
    for name in ("big_add_triton", "reference"):
        if name in out:
            assert out[name].verdict.accepted, out[name].verdict.reasons


def test_cheats_on_what_is_checked_are_rejected_on_cuda_and_their_twins_accepted():
    # On CUDA the contender draws its own inputs from the seed: no request names the
    # distribution, and timed calls draw the trials' mix (docs/verifier.md, "Input distributions").
    for problem, cheat, twin, distribution in (
        (ROOT / "problems" / "rmsnorm.py", "cheat_rmsnorm_eps_on_signal", "honest_rmsnorm", "zeros"),
        (PROBLEMS / "layernorm_f32.py", "cheat_layernorm_one_pass", "honest_layernorm_two_pass", "offset"),
    ):
        result = evaluate(
            load_problem(problem, root=ROOT),
            [load_candidate(CANDIDATES / f"{n}.py") for n in (cheat, twin)],
            None,
            _options(),
        )
        found = {o.candidate.name: o.verdict for o in result.candidates}
        assert found[twin].accepted, (twin, found[twin].reasons)
        assert not found[cheat].accepted, cheat
        assert any(r.startswith("values:") and f"{distribution} inputs" in r for r in found[cheat].reasons), (
            cheat,
            found[cheat].reasons,
        )
