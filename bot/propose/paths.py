"""The search's execution paths: ways to run a base's forward (torch.compile modes and shape
policies, Inductor's own tuning, CUDA graph replay, SDPA backends, replacement kernels), each a
candidate of its own and one side of a split (bot/propose/split.py)."""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass

from bot.core.domain import CandidateSource
from bot.propose.derive import Base, derived, uses

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")

# Inductor's own tuning of the Triton kernels it writes, each a static compile of its own.
# multi-kernel: a reduction gets both a persistent and a looped kernel, and the faster one on
# this GPU and shape runs; coordinate descent: block sizes and warps tuned by timing. Each
# wins where a reduction's default launch settings are off and loses elsewhere (fp8_quant's
# pick is multi-kernel, cross_entropy's coordinate descent, docs/results-h200.md): which
# applies is a measurement, so both are tried.
INDUCTOR_TUNING = {
    # Without Inductor's FX graph cache: on a cache hit (a replica, a later run) torch 2.11
    # rebuilds the multi-kernel call from deserialised Triton functions that have lost their
    # hash lock, and the call fails ("'NoneType' object does not support the context manager
    # protocol", triton/runtime/jit.py cache_key).
    "multi-kernel": {"triton.multi_kernel": 1, "fx_graph_cache": False},
    "coordinate-descent": {"coordinate_descent_tuning": True},
}

PATH_WRAPPER = """

# --- kernel-bot: {detail} ---------------------------------------------------------
_KernelBotBase = {base}
{helper}

class ModelNew(_KernelBotBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernel_bot_forward = {expression}

    def forward(self, *inputs):
        return self._kernel_bot_forward(*inputs)
"""

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
    one_shape: str = ""  # why it adds nothing where the problem has one shape, if it does not


def _compile_path(mode: str, dynamic: bool | None = None, tuning: str = "") -> Path:
    # dynamic=None is torch.compile's own rule: specialise to the first shapes, and compile
    # shape-generic kernels when other shapes arrive. Where a problem has prefill and decode
    # shapes, the order of calls then decides which kernels run. The static and dynamic
    # variants take that choice out of the order: which policy is faster differs by problem
    # (specialised kernels win some reductions, shape-generic ones others).
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
    # With one shape torch.compile's own rule specialises to it as `dynamic=False` does, and no
    # other shape is there for shape-generic kernels to serve: the two policies are the
    # default's compile again, or a slower one (on GPUs the dynamic variant was the fastest
    # compile of its base in none of 21 runs on record: docs/candidate-flow.md, "Proposal").
    one_shape = ""
    if suffix and not tuning:
        one_shape = {
            "static": "one shape here: torch.compile's default compiles the same kernels",
            "dynamic": "one shape here: no other shape for shape-generic kernels to serve",
        }[suffix]
    return Path(
        ":".join(filter(None, ("compile", mode, suffix, tuning))),
        "-".join(filter(None, ("compile", mode, suffix, tuning))),
        f"torch.compile(super().forward, mode={None if mode == 'default' else mode!r}{arg})",
        f"torch.compile(mode={mode!r}{arg})",
        needs_gpu=needs_gpu,
        replays_graphs=graphs,
        one_shape=one_shape,
    )


def _sdpa_path(backend: str) -> Path:
    return Path(
        f"sdpa:{backend.lower()}",
        f"sdpa-{backend.split('_')[0].lower()}",
        f"_KernelBotSdpa(super().forward, _KernelBotSDPBackend.{backend})",
        f"scaled_dot_product_attention held to {backend}",
        helper=SDPA_HELPER,
        needs_gpu="SDPA's flash, memory-efficient and cuDNN kernels need a GPU",
    )


def kernel_source(file: str) -> str:
    """A replacement kernel of bot/propose/kernels, as text for a candidate's module."""
    return importlib.resources.files("bot.propose.kernels").joinpath(file).read_text()


EAGER = Path("eager", "eager", "super().forward", "eager")
CUDA_GRAPH = Path(
    "cuda-graph",
    "cuda-graph",
    "_KernelBotGraphs(super().forward)",
    "CUDA graph replay",
    helper=GRAPH_HELPER,
    needs_gpu="CUDA graphs need a GPU",
    replays_graphs=True,
)
COMPILE_PATHS = (
    tuple(_compile_path(m) for m in COMPILE_MODES)
    + (_compile_path("default", dynamic=False), _compile_path("default", dynamic=True))
    + tuple(_compile_path("default", dynamic=False, tuning=t) for t in INDUCTOR_TUNING)
)
SDPA_PATHS = tuple(_sdpa_path(b) for b in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"))
# Replacement kernels (bot/propose/kernels): an operator call of the forward goes to a kernel
# of ours where it applies (its shapes, dtypes and arguments), and to torch's everywhere else.
REPLACEMENT_NEEDS_GPU = (
    "a Triton kernel: on a CPU it runs through Triton's interpreter, which is never faster than eager"
)
REPLACING = kernel_source("replace.py")  # what every replacement kernel's text follows in a candidate
# Attention over at most 128 keys through a one-pass Triton kernel; longer sequences, masks
# and dropout keep SDPA's own kernels, so it can only change the short calls.
SHORT_ATTENTION = Path(
    "sdpa:triton-short",
    "sdpa-triton-short",
    "_KernelBotReplaced(super().forward)",
    "scaled_dot_product_attention over at most 128 keys through a one-pass Triton kernel",
    helper=REPLACING + kernel_source("short_attention.py"),
    needs_gpu=REPLACEMENT_NEEDS_GPU,
)
# GELU's tanh approximation on bf16/fp16 through the GPU's tanh instruction.
GELU_TANH = Path(
    "kernel:gelu-tanh",
    "triton-gelu-tanh",
    "_KernelBotReplaced(super().forward)",
    "GELU (tanh approximation) through a Triton kernel with the GPU's tanh instruction",
    helper=REPLACING + kernel_source("gelu_tanh.py"),
    needs_gpu=REPLACEMENT_NEEDS_GPU,
)
TANH_GELU = re.compile(r"""approximate\s*=\s*["']tanh["']""")
PATHS = {p.key: p for p in (EAGER, CUDA_GRAPH, *COMPILE_PATHS, *SDPA_PATHS, SHORT_ATTENTION, GELU_TANH)}


def paths_for(base: Base) -> list[Path]:
    """The paths the catalogue tries on a base (eager is the base itself)."""
    sdpa = [*SDPA_PATHS, SHORT_ATTENTION] if uses(base.source, "scaled_dot_product_attention") else []
    gelu = [GELU_TANH] if TANH_GELU.search(base.source) else []
    return [*COMPILE_PATHS, CUDA_GRAPH, *sdpa, *gelu]


def path_candidate(base: Base, path: Path) -> CandidateSource:
    """The base run through one path, as a candidate of its own."""
    return derived(
        base,
        PATH_WRAPPER,
        f"{path.words} of {base.label}",
        f"{path.name}-{base.label}",
        helper=path.helper,
        expression=path.expression,
    )


def path_of(name: str, tag: str) -> str | None:
    """The execution path of a search candidate built on base `tag`, if a split can reuse it."""
    return next((p.key for p in PATHS.values() if name == f"{p.name}-{tag}"), None)
