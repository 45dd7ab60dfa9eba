"""The search proposer: a catalogue of transformations that needs no LLM.

Every candidate is a self-contained module: the source of the implementation it derives
from (the problem's reference, or its TARGET), followed by a small wrapper that defines
`ModelNew` by subclassing it. So it keeps the same constructor and parameter names, and a
follow-up PR can replace the TARGET file with it as is.
"""

from __future__ import annotations

import ast
import importlib.resources
import itertools
import math
import re
from dataclasses import dataclass

from bot.bench import geomean
from bot.domain import CandidateSource, Origin, Problem, source_hash

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
TF32_NORM_ERR = 3e-4  # measured normwise error of TF32 matmuls (field notes: ~3e-4)

# Module-level constants a Triton implementation exposes for tuning, and values to try.
TUNABLES = {
    "BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192),
    "BLOCK": (256, 512, 1024, 2048, 4096),
    "BLOCK_M": (32, 64, 128, 256), "BLOCK_N": (32, 64, 128, 256), "BLOCK_K": (32, 64, 128),
    "NUM_WARPS": (1, 2, 4, 8, 16),
    "NUM_STAGES": (1, 2, 3, 4, 5),
}
MAX_TUNING_VARIANTS = 16

# Inductor's own tuning of the Triton kernels it writes, each a static compile of its own.
# multi-kernel: a reduction gets both a persistent and a looped kernel, and the faster one on
# this GPU and shape runs; coordinate descent: block sizes and warps tuned by timing. On the
# H200 they beat torch.compile's default by 1.36x (fp8_quant prefill, multi-kernel) and 1.10x
# (cross_entropy prefill, coordinate descent), and lost up to 15 % elsewhere (fifteenth
# session's probe, docs/results-h200.md): which applies is a measurement, so both are tried.
INDUCTOR_TUNING = {
    # Without Inductor's FX graph cache: on a cache hit (a replica, a later run) torch 2.11
    # rebuilds the multi-kernel call from deserialised Triton functions that have lost their
    # hash lock, and the call fails ("'NoneType' object does not support the context manager
    # protocol", triton/runtime/jit.py cache_key; fifteenth session on the H200).
    "multi-kernel": {"triton.multi_kernel": 1, "fx_graph_cache": False},
    "coordinate-descent": {"coordinate_descent_tuning": True},
}


@dataclass(frozen=True)
class Skipped:
    """A transformation that does not apply here, and why (shown in the report)."""

    transformation: str
    reason: str


@dataclass(frozen=True)
class Base:
    """The implementation a transformation starts from."""

    label: str  # "reference" | "target"
    source: str
    class_name: str  # "Model" for the reference, "ModelNew" for a TARGET

    @property
    def parent_hash(self) -> str:
        return source_hash(self.source)


PATH_WRAPPER = '''

# --- kernel-bot: {detail} ---------------------------------------------------------
_KernelBotBase = {base}
{helper}

class ModelNew(_KernelBotBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernel_bot_forward = {expression}

    def forward(self, *inputs):
        return self._kernel_bot_forward(*inputs)
'''

GRAPH_HELPER = '''

class _KernelBotGraphs:
    """Replays one captured CUDA graph per input signature: launch overhead is paid once.
    Inputs are copied into the graph's static buffers and outputs cloned out, so every
    call computes on its own inputs and returns tensors it owns."""

    def __init__(self, forward):
        self.forward = forward
        self.graphs = {}

    def capture(self, inputs):
        static = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up outside the graph (allocator, lazy init)
                self.forward(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.forward(*static)
        return graph, static, out

    def __call__(self, *inputs):
        key = tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self.capture(inputs)
        graph, static, out = entry
        for buf, x in zip(static, inputs):
            if isinstance(x, torch.Tensor):
                buf.copy_(x)
        graph.replay()
        if isinstance(out, torch.Tensor):
            return out.clone()
        return type(out)(o.clone() for o in out)
'''

SDPA_HELPER = '''

from torch.nn.attention import SDPBackend as _KernelBotSDPBackend
from torch.nn.attention import sdpa_kernel as _kernel_bot_sdpa_kernel


class _KernelBotSdpa:
    """The forward with scaled_dot_product_attention held to one backend."""

    def __init__(self, forward, backend):
        self.forward = forward
        self.backend = backend

    def __call__(self, *inputs):
        with _kernel_bot_sdpa_kernel(self.backend):
            return self.forward(*inputs)
'''

SPLIT_WRAPPER = '''

# --- kernel-bot: {detail} ---------------------------------------------------------
_KernelBotBase = {base}
{helper}

def _kernel_bot_input_bytes(inputs):
    return sum(x.nbytes for x in inputs if isinstance(x, torch.Tensor))  # one call per tensor


class ModelNew(_KernelBotBase):
    """Small (launch-bound) inputs take one path and large ones another, split by input size."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernel_bot_small = {small}
        self._kernel_bot_large = {large}

    def forward(self, *inputs):
        if _kernel_bot_input_bytes(inputs) <= {threshold}:
            return self._kernel_bot_small(*inputs)
        return self._kernel_bot_large(*inputs)
'''

EAGER_WRAPPER = '''

# --- kernel-bot: {detail} ---------------------------------------------------------
class ModelNew({base}):
    pass
'''

TF32_WRAPPER = '''

# --- kernel-bot: {detail} ---------------------------------------------------------
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
_KernelBotBase = {base}


class ModelNew(_KernelBotBase):
    pass
'''

CHANNELS_LAST_WRAPPER = '''

# --- kernel-bot: {detail} ---------------------------------------------------------
_KernelBotBase = {base}


class ModelNew(_KernelBotBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.to(memory_format=torch.channels_last)

    def forward(self, *inputs):
        inputs = [x.contiguous(memory_format=torch.channels_last)
                  if isinstance(x, torch.Tensor) and x.dim() == 4 else x for x in inputs]
        return super().forward(*inputs)
'''


@dataclass(frozen=True)
class Path:
    """One way to run a base's forward: a candidate of its own, and one side of a split."""

    key: str  # "eager", "cuda-graph", "compile:<mode>[:static|:dynamic]" or "sdpa:<backend>"
    name: str  # the candidate's name, before "-<base label>"
    expression: str  # built in ModelNew.__init__ around super().forward
    words: str  # for the report
    helper: str = ""  # module-level code the expression needs
    needs_gpu: str = ""  # why it cannot run on a CPU, if it cannot
    replays_graphs: bool = False  # captures and replays CUDA graphs of its own


def _compile_path(mode: str, dynamic: bool | None = None, tuning: str = "") -> Path:
    # dynamic=None is torch.compile's own rule: specialise to the first shapes, and compile
    # shape-generic kernels when other shapes arrive. Where a problem has prefill and decode
    # shapes, the order of calls then decides which kernels run. The static and dynamic
    # variants take that choice out of the order: on the H200, softmax's prefill took 312 us
    # specialised and 421 us generic, layernorm's 113 us and 99 us (docs/results-h200.md).
    suffix = {None: "", False: "static", True: "dynamic"}[dynamic]
    arg = "" if dynamic is None else f", dynamic={dynamic}"
    if tuning:
        arg += f", options={INDUCTOR_TUNING[tuning]!r}"
    graphs = mode in ("reduce-overhead", "max-autotune")
    needs_gpu = "uses CUDA graphs: needs a GPU" if graphs else ""
    if tuning:
        needs_gpu = "Inductor's tuning of its Triton kernels: GPUs only"
    elif suffix and not needs_gpu:
        needs_gpu = "a compile per shape policy: tried on GPUs only, so a CPU run stays short"
    return Path(":".join(filter(None, ("compile", mode, suffix, tuning))),
                "-".join(filter(None, ("compile", mode, suffix, tuning))),
                f"torch.compile(super().forward, mode={None if mode == 'default' else mode!r}{arg})",
                f"torch.compile(mode={mode!r}{arg})", needs_gpu=needs_gpu, replays_graphs=graphs)


def _sdpa_path(backend: str) -> Path:
    return Path(f"sdpa:{backend.lower()}", f"sdpa-{backend.split('_')[0].lower()}",
                f"_KernelBotSdpa(super().forward, _KernelBotSDPBackend.{backend})",
                f"scaled_dot_product_attention held to {backend}", helper=SDPA_HELPER,
                needs_gpu="SDPA's flash, memory-efficient and cuDNN kernels need a GPU")


def kernel_source(file: str) -> str:
    """A replacement kernel of bot/propose/kernels, as text for a candidate's module."""
    return importlib.resources.files("bot.propose.kernels").joinpath(file).read_text()


EAGER = Path("eager", "eager", "super().forward", "eager")
CUDA_GRAPH = Path("cuda-graph", "cuda-graph", "_KernelBotGraphs(super().forward)", "CUDA graph replay",
                  helper=GRAPH_HELPER, needs_gpu="CUDA graphs need a GPU", replays_graphs=True)
COMPILE_PATHS = tuple(_compile_path(m) for m in COMPILE_MODES) + (
    _compile_path("default", dynamic=False), _compile_path("default", dynamic=True)) + tuple(
    _compile_path("default", dynamic=False, tuning=t) for t in INDUCTOR_TUNING)
SDPA_PATHS = tuple(_sdpa_path(b) for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"))
# Replacement kernels (bot/propose/kernels): an operator call of the forward goes to a kernel
# of ours where it applies (its shapes, dtypes and arguments), and to torch's everywhere else.
REPLACEMENT_NEEDS_GPU = "a Triton kernel: on a CPU it runs through Triton's interpreter, which is never faster than eager"
REPLACING = kernel_source("replace.py")  # what every replacement kernel's text follows in a candidate
# Attention over at most 128 keys through a one-pass Triton kernel; longer sequences, masks
# and dropout keep SDPA's own kernels, so it can only change the short calls.
SHORT_ATTENTION = Path("sdpa:triton-short", "sdpa-triton-short", "_KernelBotReplaced(super().forward)",
                       "scaled_dot_product_attention over at most 128 keys through a one-pass Triton kernel",
                       helper=REPLACING + kernel_source("short_attention.py"),
                       needs_gpu=REPLACEMENT_NEEDS_GPU)
# GELU's tanh approximation on bf16/fp16 through the GPU's tanh instruction.
GELU_TANH = Path("kernel:gelu-tanh", "triton-gelu-tanh", "_KernelBotReplaced(super().forward)",
                 "GELU (tanh approximation) through a Triton kernel with the GPU's tanh instruction",
                 helper=REPLACING + kernel_source("gelu_tanh.py"),
                 needs_gpu=REPLACEMENT_NEEDS_GPU)
TANH_GELU = re.compile(r"""approximate\s*=\s*["']tanh["']""")
PATHS = {p.key: p for p in (EAGER, CUDA_GRAPH, *COMPILE_PATHS, *SDPA_PATHS, SHORT_ATTENTION, GELU_TANH)}


def paths_for(base: Base) -> list[Path]:
    """The paths the catalogue tries on a base (eager is the base itself)."""
    sdpa = [*SDPA_PATHS, SHORT_ATTENTION] if _uses(base.source, "scaled_dot_product_attention") else []
    gelu = [GELU_TANH] if TANH_GELU.search(base.source) else []
    return [*COMPILE_PATHS, CUDA_GRAPH, *sdpa, *gelu]


def _ensure_torch_import(source: str) -> str:
    return source if re.search(r"^import torch\b", source, re.M) else "import torch\n" + source


def _candidate(base: Base, wrapper: str, detail: str, name: str, **fields) -> CandidateSource:
    source = _ensure_torch_import(base.source) + wrapper.format(base=base.class_name, detail=detail,
                                                                **fields)
    return CandidateSource(name=name, source=source,
                           origin=Origin("search", detail, parent=base.parent_hash))


def _uses(source: str, *needles: str) -> bool:
    return any(n in source for n in needles)


def tunable_constants(source: str) -> dict[str, int]:
    """Module-level integer constants named like Triton tuning knobs."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in TUNABLES \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            found[node.targets[0].id] = node.value.value
    return found


def autotune_variants(base: Base, round_: int | None = None, limit: int = MAX_TUNING_VARIANTS,
                      tried: frozenset[tuple[tuple[str, int], ...]] = frozenset(),
                      pairs: bool = True) -> list[CandidateSource]:
    """Variants of a Triton implementation with other block sizes, warps and stages. First each
    knob alone through all its values, the others kept (a coordinate sweep: however many knobs
    there are, none goes untried; on the H200 a fused matmul's five knobs made the old strided
    sample of their product miss whole axes), then pairs of knobs moved together, spread over
    the grid, up to `limit` (unless `pairs` is False: a descent step moves one knob at a time).
    Settings in `tried` (see `setting_of`) are left out."""
    current = tunable_constants(base.source)
    if not current:
        return []
    seen = set(tried) | {_setting_key(current)}
    singles, doubles = [], []
    for key in current:
        for value in TUNABLES[key]:
            singles.append({**current, key: value})
    for a, b in itertools.combinations(current, 2) if pairs else ():
        for va, vb in itertools.product(TUNABLES[a], TUNABLES[b]):
            if va != current[a] and vb != current[b]:
                doubles.append({**current, a: va, b: vb})
    chosen: list[dict[str, int]] = []

    def take(settings: list[dict[str, int]]) -> None:
        for setting in settings:
            key = _setting_key(setting)
            if key not in seen and len(chosen) < limit:
                seen.add(key)
                chosen.append(setting)

    take(singles)
    if len(chosen) < limit and doubles:  # spread what is left over the pairs, not their first corner
        take(doubles[::max(1, len(doubles) // (limit - len(chosen)))])
    return [_tuned(base, setting, round_) for setting in chosen]


def _setting_key(setting: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(setting.items()))


def setting_of(source: str) -> tuple[tuple[str, int], ...]:
    """A Triton implementation's knob setting, as `autotune_variants` compares them."""
    return _setting_key(tunable_constants(source))


def _tuned(base: Base, setting: dict[str, int], round_: int | None) -> CandidateSource:
    source = base.source
    for key, value in setting.items():
        source = re.sub(rf"^{key}\s*=\s*\d+", f"{key} = {value}", source, count=1, flags=re.M)
    detail = "autotune " + ", ".join(f"{k}={v}" for k, v in setting.items())
    return CandidateSource(
        name="tune-" + "-".join(f"{k.lower()}{v}" for k, v in setting.items()), source=source,
        origin=Origin("search", detail, round=round_, parent=base.parent_hash))


def search_candidates(problem: Problem, bases: list[Base], device: str, timing: str = "latency"
                      ) -> tuple[list[CandidateSource], list[Skipped]]:
    """The whole catalogue for one problem; inapplicable transformations are skipped with a reason.
    Under `timing` "graph" every contender is replayed as a CUDA graph already, so the paths
    that only add graph replay to a sibling (CUDA graph, the compile modes with cudagraphs)
    would time the same kernels again."""
    cands: list[CandidateSource] = []
    skipped: list[Skipped] = []
    cuda = device == "cuda"
    if any(b.label == "target" for b in bases):
        # Not a transformation: the eager reference timed in the same run, so the report
        # can show eager, the current implementation and the best candidate side by side.
        ref = next(b for b in bases if b.label == "reference")
        cands.append(_candidate(ref, EAGER_WRAPPER, "the eager reference as the implementation",
                                "eager-reference"))
    for base in bases:
        tag = base.label
        paths = paths_for(base)
        # On a CPU a Triton kernel runs through Triton's interpreter, which dynamo cannot trace
        # (rmsnorm's Triton TARGET failed so: "KeyError(torch.uint64)" on a fake tensor).
        interpreted = not cuda and _uses(base.source, "triton.jit")
        for path in paths:
            if path.needs_gpu and not cuda:
                skipped.append(Skipped(f"{path.words} of {tag}", path.needs_gpu))
                continue
            if interpreted and path.key.startswith("compile"):
                skipped.append(Skipped(f"{path.words} of {tag}", "its Triton kernels run through Triton's "
                                       "CPU interpreter here, which torch.compile cannot trace: GPUs only"))
                continue
            if path.replays_graphs and timing == "graph":
                skipped.append(Skipped(f"{path.words} of {tag}",
                                       "--timing graph replays every contender as a CUDA graph already"))
                continue
            cands.append(path_candidate(base, path))
        if SDPA_PATHS[0] not in paths:
            skipped.append(Skipped(f"SDPA backend choice of {tag}", "no scaled_dot_product_attention here"))
        if GELU_TANH not in paths:
            skipped.append(Skipped(f"{GELU_TANH.words} of {tag}", "no GELU with approximate='tanh' here"))
        cands.extend(autotune_variants(base))
        if not tunable_constants(base.source):
            skipped.append(Skipped(f"Triton autotuning of {tag}",
                                   "exposes no module-level BLOCK_*/NUM_WARPS/NUM_STAGES constants"))
    tol = problem.tolerance.get("norm_rel")
    matmul = _uses(problem.source, "matmul", "@", "nn.Linear", "F.linear", "bmm", "einsum", "conv")
    fp32 = _uses(problem.source, "float32", "torch.randn(") and not _uses(problem.source, "bfloat16", "float16")
    if not cuda:
        skipped.append(Skipped("TF32 matmul", "TF32 exists only on GPUs"))
    elif not matmul or not fp32:
        skipped.append(Skipped("TF32 matmul", "no float32 matrix products in this problem"))
    elif tol is None or tol < TF32_NORM_ERR:
        skipped.append(Skipped("TF32 matmul", f"the tolerance (norm_rel {tol or 1e-5:g}) is tighter "
                               f"than TF32's error (~{TF32_NORM_ERR:g})"))
    else:
        cands.append(_candidate(bases[0], TF32_WRAPPER, "TF32 matmuls", "tf32"))
    if _uses(problem.source, "Conv2d", "conv2d"):
        cands.append(_candidate(bases[0], CHANNELS_LAST_WRAPPER, "channels-last memory format",
                                "channels-last"))
    else:
        skipped.append(Skipped("channels-last", "no 2-D convolutions in this problem"))
    return cands, skipped


def bases_for(problem: Problem) -> list[Base]:
    """The reference always; the TARGET implementation when the problem declares one."""
    bases = [Base("reference", problem.source, "Model")]
    if problem.target is not None:
        bases.append(Base("target", problem.target.read_text(), "ModelNew"))
    return bases


# --- split by input size: one path for launch-bound shapes, another for large ones ---------

@dataclass(frozen=True)
class Split:
    """Inputs of at most `threshold` bytes take the `small` path, larger ones the `large` one."""

    small: str  # a key of PATHS: "eager", "cuda-graph", "compile:<mode>", ...
    large: str
    threshold: int
    gain: float  # expected geometric-mean speedup over the best single path


def path_candidate(base: Base, path: Path) -> CandidateSource:
    """The base run through one path, as a candidate of its own."""
    return _candidate(base, PATH_WRAPPER, f"{path.words} of {base.label}", f"{path.name}-{base.label}",
                      helper=path.helper, expression=path.expression)


def path_of(name: str, tag: str) -> str | None:
    """The execution path of a search candidate built on base `tag`, if a split can reuse it."""
    return next((p.key for p in PATHS.values() if name == f"{p.name}-{tag}"), None)


def input_bytes(description: str) -> int | None:
    """Bytes of the tensors in a shape's input description, e.g. "bfloat16[8, 4096], int64[8]"."""
    import torch

    total = 0
    for dtype, dims in re.findall(r"(\w+)\[([\d,\s]*)\]", description):
        kind = getattr(torch, dtype, None)
        if not isinstance(kind, torch.dtype):
            return None
        numel = 1
        for d in filter(None, (x.strip() for x in dims.split(","))):
            numel *= int(d)
        total += numel * kind.itemsize
    return total or None


def plan_split(shape_bytes: list[int], speedups: dict[str, list[float | None]],
               min_gain: float = 1.03) -> Split | None:
    """The best two-path split of the shapes by input size, if it beats every single path by
    `min_gain` in geometric mean over the shapes (the per-problem figure of merit)."""
    n = len(shape_bytes)
    paths = {p: [float(x) for x in v] for p, v in speedups.items()
             if len(v) == n and all(x is not None and x > 0 for x in v)}
    if n < 2 or len(paths) < 2:
        return None
    order = sorted(range(n), key=lambda i: shape_bytes[i])

    def score(path: str, idx: list[int]) -> float:
        return geomean([paths[path][i] for i in idx])

    single = max(score(p, order) for p in paths)
    best: Split | None = None
    for k in range(1, n):
        small_idx, large_idx = order[:k], order[k:]
        if shape_bytes[order[k - 1]] == shape_bytes[order[k]]:
            continue  # no size threshold separates these shapes
        small = max(paths, key=lambda p: score(p, small_idx))
        large = max(paths, key=lambda p: score(p, large_idx))
        if small == large:
            continue
        total = geomean([paths[small][i] for i in small_idx] + [paths[large][i] for i in large_idx])
        threshold = int(math.sqrt(shape_bytes[order[k - 1]] * shape_bytes[order[k]]))
        if best is None or total / single > best.gain:
            best = Split(small, large, threshold, total / single)
    return best if best is not None and best.gain >= min_gain else None


def split_candidate(base: Base, split: Split, round_: int | None = None) -> CandidateSource:
    small, large = PATHS[split.small], PATHS[split.large]
    detail = (f"{small.words} for inputs up to {split.threshold} bytes, {large.words} above, "
              f"of {base.label}")
    helper = "".join(dict.fromkeys(p.helper for p in (small, large)))  # each once, in order
    source = _ensure_torch_import(base.source) + SPLIT_WRAPPER.format(
        base=base.class_name, detail=detail, helper=helper, small=small.expression,
        large=large.expression, threshold=split.threshold)
    return CandidateSource(name=f"split-{base.label}", source=source,
                           origin=Origin("search", detail, round=round_, parent=base.parent_hash))
