"""The bundled problem suite (problems/*.py) and its TARGET kernels, on CPU.

Test-only: each problem file is imported here with importlib; the product reads
the metadata statically and runs the problems only in its sandbox.
"""

from __future__ import annotations

import ast
import copy
import glob
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from bot.core.distributions import DISTRIBUTIONS  # noqa: E402
from bot.harness.inputs import transform as worker_transform  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "problems"

# Expected output dtypes of the native (non-upcast) forward, one per output.
EXPECTED_OUTPUTS = {
    "rmsnorm": (torch.bfloat16,),
    "layernorm": (torch.bfloat16,),
    "softmax": (torch.bfloat16,),
    "gelu": (torch.bfloat16,),
    "swiglu": (torch.bfloat16,),
    "matmul_bias_gelu": (torch.bfloat16,),
    "causal_attention": (torch.bfloat16,),
    "rotary_embedding": (torch.bfloat16,),
    "moe_topk_gating": (torch.float32, torch.int64),
    "fp8_quant": (torch.float8_e4m3fn, torch.float32),
    "transpose": (torch.bfloat16,),
    "cross_entropy": (torch.float32,),
    "fused_add_rmsnorm": (torch.bfloat16, torch.bfloat16),
}
NAMES = sorted(EXPECTED_OUTPUTS)
TARGETS = {
    "rmsnorm": "kernels/rmsnorm_triton.py",
    "swiglu": "kernels/swiglu_torch.py",
    "rotary_embedding": "kernels/rotary_torch.py",
}

METADATA_NAMES = (
    "SHAPES",
    "CPU_SHAPES",
    "TOLERANCE",
    "REFERENCE_PRECISION",
    "DISTRIBUTIONS",
    "SKIP_DISTRIBUTIONS",
    "TARGET",
    "WATCH",
)
ALL_DISTRIBUTIONS = DISTRIBUTIONS
DEFAULT_TOLERANCE = {  # norm_rel, elem_rtol, elem_atol_rel
    torch.float32: {"norm_rel": 1e-5, "elem_rtol": 1e-4, "elem_atol_rel": 1e-5},
    torch.bfloat16: {"norm_rel": 1e-2, "elem_rtol": 2e-2, "elem_atol_rel": 1e-2},
    torch.float16: {"norm_rel": 1e-3, "elem_rtol": 2e-3, "elem_atol_rel": 1e-3},
    torch.float8_e4m3fn: {"norm_rel": 7e-2, "elem_rtol": 0.13, "elem_atol_rel": 2e-2},
}
GPU_INPUT_BYTES_MAX = 2.2e9  # "under ~2 GB" per GPU input set (inputs + parameters)
CPU_CALL_SECONDS_MAX = 1.0  # the budget is ~50 ms; this only catches GPU-sized CPU shapes


# ---------------------------------------------------------------- helpers

_counter = itertools.count()


def load_module(path: Path):
    """A fresh module object each call, so global overrides never leak between tests."""
    spec = importlib.util.spec_from_file_location(f"_suite_{path.stem}_{next(_counter)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def static_metadata(path: Path) -> dict:
    """Module-level metadata assignments, read with ast.literal_eval (no import)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in METADATA_NAMES
        ):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    return found


def apply(module, overrides: dict) -> None:
    for key, value in overrides.items():
        setattr(module, key, value)


def first(mapping: dict):
    return next(iter(mapping.values()))


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def transform(inputs, distribution: str, seed: int = 0):
    """The worker's own transformation (bot/harness/inputs.py), as the verifier applies it."""
    return worker_transform(list(inputs), distribution, seed)


def skipped(meta: dict) -> set:
    kept = meta.get("DISTRIBUTIONS", ALL_DISTRIBUTIONS)
    return set(meta.get("SKIP_DISTRIBUTIONS", {})) | (set(ALL_DISTRIBUTIONS) - set(kept))


def upcast_model(model):
    ref = copy.deepcopy(model)
    for p in ref.parameters():
        if p.is_floating_point():
            p.data = p.data.to(torch.float64)
    return ref


def upcast_inputs(inputs):
    return [x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


def tolerance(meta: dict, dtype) -> dict:
    return {**DEFAULT_TOLERANCE[dtype], **meta.get("TOLERANCE", {})}


def errors(out, ref):
    """(normwise relative error ||out-ref||/||ref||, elementwise |out-ref|), in float64."""
    o = out.to(torch.float64)
    r = ref.to(torch.float64)
    norm = torch.linalg.vector_norm(r).item()
    diff = torch.linalg.vector_norm(o - r).item()
    return diff / norm if norm > 0 else diff, (o - r).abs()


def assert_close(out, ref, tol: dict, what: str) -> None:
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if not ref.is_floating_point():
        assert torch.equal(out.to(ref.dtype), ref), f"{what}: integer outputs differ"
        return
    norm_err, absdiff = errors(out, ref)
    assert norm_err <= tol["norm_rel"], f"{what}: normwise error {norm_err:.3g} > {tol['norm_rel']}"
    r = ref.to(torch.float64)
    bound = tol["elem_atol_rel"] * r.abs().max() + tol["elem_rtol"] * r.abs()
    bad = int((absdiff > bound).sum())
    assert bad == 0, (
        f"{what}: {bad} of {r.numel()} elements outside the elementwise bound (worst |diff| {absdiff.max().item():.3g})"
    )


def make_case(name: str, shape: dict | None = None, seed: int = 0):
    """Module with the (default: first CPU) shape applied, seeded Model and inputs."""
    module = load_module(PROBLEMS / f"{name}.py")
    meta = static_metadata(PROBLEMS / f"{name}.py")
    apply(module, first(meta["CPU_SHAPES"]) if shape is None else shape)
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(seed)
    inputs = module.get_inputs()
    return module, meta, model, inputs


def total_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


# ---------------------------------------------------------------- static checks


def test_suite_is_exactly_the_listed_problems():
    found = sorted(p.stem for p in PROBLEMS.glob("*.py"))
    assert found == NAMES
    assert not (PROBLEMS / "__init__.py").exists()


@pytest.mark.parametrize("name", NAMES)
def test_metadata_is_literal_and_well_formed(name):
    path = PROBLEMS / f"{name}.py"
    meta = static_metadata(path)
    module = load_module(path)
    for key in METADATA_NAMES:  # every metadata name present is a plain literal ...
        if hasattr(module, key):
            assert key in meta, f"{key} is not a module-level literal assignment"
            assert getattr(module, key) == meta[key]  # ... equal to what the import sees

    shapes, cpu_shapes = meta["SHAPES"], meta["CPU_SHAPES"]
    assert list(shapes)[:2] == ["prefill", "decode"], "SHAPES must start with prefill, decode"
    assert cpu_shapes, "CPU_SHAPES is empty"
    for table in (shapes, cpu_shapes):
        for shape_name, overrides in table.items():
            assert isinstance(shape_name, str) and overrides
            for key, value in overrides.items():
                assert key.isupper(), f"{shape_name}: {key} is not an UPPER_CASE global"
                assert hasattr(module, key), f"{shape_name}: {key} is not a module global"
                assert type(value) is type(getattr(module, key)), f"{shape_name}: {key} type"
    # The defaults in the file are the first SHAPES entry.
    for key, value in first(shapes).items():
        assert getattr(module, key) == value, f"default {key}={getattr(module, key)} != {value}"
    # Every shape table overrides the same globals.
    keys = {frozenset(o) for o in itertools.chain(shapes.values(), cpu_shapes.values())}
    assert len(keys) == 1, f"shape entries override different globals: {keys}"

    tol = meta.get("TOLERANCE", {})
    assert set(tol) <= {"norm_rel", "elem_rtol", "elem_atol_rel"}
    assert all(isinstance(v, float) and 0 < v < 1 for v in tol.values())
    assert meta.get("REFERENCE_PRECISION", "float64") in ("float64", "float32", "native")
    dists = meta.get("DISTRIBUTIONS", ALL_DISTRIBUTIONS)
    assert isinstance(dists, tuple) and dists and set(dists) <= set(ALL_DISTRIBUTIONS)
    for dist, reason in meta.get("SKIP_DISTRIBUTIONS", {}).items():
        assert dist in ALL_DISTRIBUTIONS and dist != "standard" and len(reason.split()) >= 3, (dist, reason)
    assert meta.get("TARGET") == TARGETS.get(name)
    if "TARGET" in meta:
        target = ROOT / meta["TARGET"]
        assert target.is_file()
        classes = {n.name for n in ast.parse(target.read_text()).body if isinstance(n, ast.ClassDef)}
        assert "ModelNew" in classes
    for pattern in meta.get("WATCH", []):
        assert glob.glob(str(ROOT / pattern)), f"WATCH pattern {pattern!r} matches nothing"
        if "TARGET" in meta:
            assert (ROOT / meta["TARGET"]) in {Path(p) for p in glob.glob(str(ROOT / pattern))}

    assert callable(module.roofline_flops)
    assert callable(module.get_inputs) and callable(module.get_init_inputs)
    assert issubclass(module.Model, torch.nn.Module)


@pytest.mark.parametrize("name", NAMES)
def test_gpu_shapes_on_meta_device(name):
    """Every SHAPES entry: no device argument in get_inputs, sizes within budget, flops >= 0."""
    meta = static_metadata(PROBLEMS / f"{name}.py")
    numels = {}
    for shape_name, overrides in itertools.chain(meta["SHAPES"].items(), meta["CPU_SHAPES"].items()):
        module = load_module(PROBLEMS / f"{name}.py")
        apply(module, overrides)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
        assert inputs and all(isinstance(x, torch.Tensor) for x in inputs)
        assert all(x.device.type == "meta" for x in inputs), "get_inputs() names a device"
        assert all(p.device.type == "meta" for p in model.parameters()), "Model names a device"
        assert not [b for b in model.buffers() if b.is_floating_point()], (
            "floating buffers are not upcast by the reference: use parameters"
        )
        size = total_bytes(inputs) + total_bytes(list(model.parameters()))
        if shape_name in meta["SHAPES"]:
            assert size < GPU_INPUT_BYTES_MAX, f"{shape_name}: {size / 1e9:.2f} GB of inputs"
        flops = module.roofline_flops(*inputs)
        assert type(flops) is int and flops >= 0, f"{shape_name}: roofline_flops -> {flops!r}"
        if name != "transpose":
            assert flops > 0
        numels[shape_name] = sum(x.numel() for x in inputs)
    # The overrides take effect: get_inputs() reads the globals at call time.
    cpu_numel = numels[next(iter(meta["CPU_SHAPES"]))]
    assert numels["prefill"] != numels["decode"]
    assert cpu_numel < min(numels["prefill"], numels["decode"]) or name == "moe_topk_gating"


def test_roofline_flops_values():
    """Spot-check a few formulas: matmul 2*M*N*K, causal attention ~ 2*B*H*S*S*D."""
    module, _, _, inputs = make_case("matmul_bias_gelu")
    t, k, n = module.TOKENS, module.IN_FEATURES, module.OUT_FEATURES
    flops = module.roofline_flops(*inputs)
    assert 2 * t * k * n <= flops < 2.1 * t * k * n
    module, _, _, inputs = make_case("causal_attention")
    b, h, s, d = inputs[0].shape
    assert module.roofline_flops(*inputs) == pytest.approx(2 * b * h * s * s * d, rel=0.05)


# ---------------------------------------------------------------- CPU forward


@pytest.mark.parametrize("name", NAMES)
def test_forward_native_on_cpu(name):
    module, meta, model, inputs = make_case(name)
    assert inputs and all(isinstance(x, torch.Tensor) for x in inputs)
    floating = [x for x in inputs if x.is_floating_point()]
    assert floating, "no floating input"
    for x in floating:  # random, not constant
        assert x.float().std().item() > 0.1
    for x in inputs:
        if not x.is_floating_point():
            assert x.unique().numel() > 1
    for p in model.parameters():
        assert p.dtype in (torch.bfloat16, torch.float32)
        if p.numel() > 1:
            assert p.float().std().item() > 0, "constant parameter cannot catch a kernel ignoring it"
    before = [x.clone() for x in inputs]

    start = time.perf_counter()
    out = as_tuple(model(*inputs))
    elapsed = time.perf_counter() - start
    assert elapsed < CPU_CALL_SECONDS_MAX, f"CPU shape too large: {elapsed:.2f} s per call"

    for x, y in zip(inputs, before):
        assert torch.equal(x, y), "forward mutated an input"
    assert all(isinstance(o, torch.Tensor) for o in out)
    assert tuple(o.dtype for o in out) == EXPECTED_OUTPUTS[name]
    for o in out:
        assert torch.isfinite(o.to(torch.float64)).all()
        storages = {x.untyped_storage().data_ptr() for x in inputs}
        assert o.untyped_storage().data_ptr() not in storages, "output aliases an input"
    again = as_tuple(model(*inputs))
    for o, a in zip(out, again):
        assert torch.equal(o.to(torch.float64), a.to(torch.float64)), "forward not deterministic"


@pytest.mark.parametrize("distribution", ALL_DISTRIBUTIONS)
@pytest.mark.parametrize("name", NAMES)
def test_float64_reference_agrees_with_native(name, distribution):
    module, meta, model, inputs = make_case(name)
    if distribution in skipped(meta):
        pytest.skip(f"{name} excludes {distribution}")
    assert meta.get("REFERENCE_PRECISION", "float64") == "float64"
    inputs = transform(inputs, distribution)
    out = as_tuple(model(*inputs))
    ref_inputs = upcast_inputs(inputs)
    ref_model = upcast_model(model)
    assert all(p.dtype == torch.float64 for p in ref_model.parameters() if p.is_floating_point())
    before = [x.clone() for x in ref_inputs]
    start = time.perf_counter()
    ref = as_tuple(ref_model(*ref_inputs))
    elapsed = time.perf_counter() - start
    assert elapsed < CPU_CALL_SECONDS_MAX, f"float64 CPU call too slow: {elapsed:.2f} s"
    for x, y in zip(ref_inputs, before):
        assert torch.equal(x, y), "float64 forward mutated an input"
    assert len(out) == len(ref)
    for i, (o, r) in enumerate(zip(out, ref)):
        # Floating outputs of the reference are float64 (nothing in the model downcasts),
        # except fp8 outputs, which are produced in their storage dtype by construction.
        if o.is_floating_point() and o.dtype != torch.float8_e4m3fn:
            assert r.dtype == torch.float64, f"output {i}: reference dtype {r.dtype}"
        assert torch.isfinite(r.to(torch.float64)).all()
        tol = tolerance(meta, o.dtype) if o.is_floating_point() else {}
        assert_close(o, r, tol, f"{name}[{distribution}] output {i}")


def test_tolerance_check_can_fail():
    """The comparison above is not vacuous: a one-percent-biased RMSNorm fails it."""
    _, meta, model, inputs = make_case("rmsnorm")
    out = model(*inputs)
    ref = upcast_model(model)(*upcast_inputs(inputs))
    with pytest.raises(AssertionError):
        assert_close((out.float() * 1.03).to(out.dtype), ref, tolerance(meta, out.dtype), "biased")
    # An fp8 result off by more than one e4m3 step fails too.
    _, meta, model, inputs = make_case("fp8_quant")
    q, scales = model(*inputs)
    q_ref, _ = upcast_model(model)(*upcast_inputs(inputs))
    with pytest.raises(AssertionError):
        assert_close((q.float() * 1.3).to(q.dtype), q_ref, tolerance(meta, q.dtype), "fp8")


def test_moe_gating_semantics():
    module, _, model, inputs = make_case("moe_topk_gating")
    weights, indices = model(*inputs)
    assert weights.shape == indices.shape == (module.TOKENS, module.TOP_K)
    assert torch.allclose(weights.sum(-1), torch.ones(module.TOKENS), atol=1e-6)
    assert (weights[:, :-1] >= weights[:, 1:]).all(), "weights not sorted descending"
    assert (indices.sort(-1).values.diff(dim=-1) > 0).all(), "repeated expert"
    expected = torch.softmax(inputs[0], -1).topk(module.TOP_K, -1).indices
    assert torch.equal(indices, expected)


def test_fp8_quant_semantics():
    module, _, model, inputs = make_case("fp8_quant")
    q, scales = model(*inputs)
    x = inputs[0].float()
    assert scales.shape == (module.TOKENS, 1)
    torch.testing.assert_close(scales, x.abs().amax(-1, keepdim=True) / 448.0)
    assert q.float().abs().amax(-1).eq(448.0).all(), "each row's amax maps to the fp8 maximum"
    dequant = q.float() * scales
    assert (dequant - x).abs().max() <= 0.07 * x.abs().max()


def test_problems_read_globals_at_call_time():
    module, _, _, _ = make_case("rmsnorm")
    module.TOKENS, module.HIDDEN = 3, 40
    torch.manual_seed(0)
    (x,) = module.get_inputs()
    assert x.shape == (3, 40) and x.dtype == torch.bfloat16
    assert module.get_init_inputs()[0] == 40


# ---------------------------------------------------------------- TARGET kernels


@pytest.mark.parametrize("name", ["swiglu", "rotary_embedding"])
def test_torch_target_matches_model(name):
    for distribution in ALL_DISTRIBUTIONS:
        module, meta, model, inputs = make_case(name)
        target = load_module(ROOT / meta["TARGET"])
        torch.manual_seed(0)
        candidate = target.ModelNew(*module.get_init_inputs())
        candidate.load_state_dict(model.state_dict(), strict=True)
        inputs = transform(inputs, distribution)
        before = [x.clone() for x in inputs]
        out = candidate(*inputs)
        assert all(torch.equal(x, y) for x, y in zip(inputs, before))
        native = model(*inputs)
        assert out.dtype == native.dtype and out.shape == native.shape
        ref = upcast_model(model)(*upcast_inputs(inputs))
        assert_close(out, ref, tolerance(meta, out.dtype), f"{name} target [{distribution}]")
        assert_close(out, native, tolerance(meta, out.dtype), f"{name} target vs native")


_TRITON_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys
    import torch
    from bot.harness.inputs import transform

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    problem = load(sys.argv[1], "problem")
    kernel = load(sys.argv[2], "kernel")
    cases = json.loads(sys.argv[3])
    assert isinstance(kernel.BLOCK_SIZE, int) and isinstance(kernel.NUM_WARPS, int)

    launches = []
    real = kernel._rmsnorm_kernel

    class Spy:
        def __getitem__(self, grid):
            launches.append(grid)
            return real[grid]

    kernel._rmsnorm_kernel = Spy()
    default_block = kernel.BLOCK_SIZE
    results = []
    for case in cases:
        for key, value in case["shape"].items():
            setattr(problem, key, value)
        kernel.BLOCK_SIZE = case["block"] or default_block
        torch.manual_seed(0)
        model = problem.Model(*problem.get_init_inputs())
        torch.manual_seed(0)
        candidate = kernel.ModelNew(*problem.get_init_inputs())
        same_params = all(torch.equal(a, b) for a, b in
                          zip(model.state_dict().values(), candidate.state_dict().values()))
        candidate.load_state_dict(model.state_dict(), strict=True)
        torch.manual_seed(0)
        (x,) = problem.get_inputs()
        (x,) = transform([x], case["dist"], 0)  # the verifier's own inputs
        before = x.clone()
        n0 = len(launches)
        out = candidate(x)
        ref = model.double()(x.double())  # every parameter and input upcast to float64
        results.append({
            "case": case, "launches": len(launches) - n0, "same_params": same_params,
            "dtype": str(out.dtype), "shape": list(out.shape), "mutated": not torch.equal(x, before),
            "out": out.double().flatten().tolist(), "ref": ref.flatten().tolist(),
        })
    bad_block = None
    kernel.BLOCK_SIZE = 100
    try:
        candidate(x)
    except ValueError as exc:
        bad_block = str(exc)
    print(json.dumps({"results": results, "bad_block": bad_block}))
    """
)


def test_rmsnorm_triton_target_matches_model_in_interpreter():
    pytest.importorskip("triton")
    meta = static_metadata(PROBLEMS / "rmsnorm.py")
    cpu = first(meta["CPU_SHAPES"])
    cases = [{"shape": cpu, "block": None, "dist": d} for d in ALL_DISTRIBUTIONS]
    # Several chunks per row, and a hidden size that is not a multiple of the block.
    cases.append({"shape": cpu, "block": 64, "dist": "standard"})
    cases.append({"shape": {"TOKENS": 5, "HIDDEN": 200}, "block": 64, "dist": "shifted"})
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _TRITON_SCRIPT,
            str(PROBLEMS / "rmsnorm.py"),
            str(ROOT / meta["TARGET"]),
            json.dumps(cases),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["bad_block"] and "power of two" in report["bad_block"], "BLOCK_SIZE is not read at call time"
    tol = tolerance(meta, torch.bfloat16)
    assert len(report["results"]) == len(cases)
    for result in report["results"]:
        what = f"rmsnorm triton {result['case']}"
        assert result["launches"] == 1, f"{what}: the Triton kernel was not launched once"
        assert result["same_params"], f"{what}: ModelNew does not build the same parameters"
        assert result["dtype"] == "torch.bfloat16" and not result["mutated"]
        shape = result["case"]["shape"]
        assert result["shape"] == [shape["TOKENS"], shape["HIDDEN"]]
        out = torch.tensor(result["out"], dtype=torch.float64)
        ref = torch.tensor(result["ref"], dtype=torch.float64)
        assert_close(out, ref, tol, what)
