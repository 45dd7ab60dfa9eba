"""The search proposer: a catalogue of transformations that needs no LLM.

The execution paths (bot/propose/paths.py) and the Triton knob variants (bot/propose/tuning.py)
of each base, plus the problem-wide switches (TF32, channels-last); what does not apply is
skipped with a reason.
"""

from __future__ import annotations

import ast

from bot.core.domain import CandidateSource, Problem, Skipped
from bot.core.settings import Device, TimingMode
from bot.propose.derive import Base, derived, uses
from bot.propose.paths import GELU_TANH, SDPA_PATHS, path_candidate, paths_for
from bot.propose.tuning import autotune_variants, tunable_constants

TF32_NORM_ERR = 3e-4  # measured normwise error of TF32 matmuls (field notes: ~3e-4)


# What TF32 changes: matrix products (torch.backends.cuda.matmul.allow_tf32) and convolutions
# (torch.backends.cudnn.allow_tf32), by the name they are called by (torch.matmul, x.mm,
# F.linear, nn.Linear, torch.einsum, nn.Conv2d, ...) or the `@` operator.
MATRIX_PRODUCTS = frozenset(
    {"matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum", "tensordot", "linear", "Linear", "bilinear"}
    | {"Bilinear", "conv1d", "conv2d", "conv3d", "Conv1d", "Conv2d", "Conv3d"}
    | {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "ConvTranspose1d", "ConvTranspose2d"}
    | {"ConvTranspose3d"}
)
HALF_TYPES = frozenset({"float16", "half", "bfloat16"})  # torch.float16, x.half(), dtype=torch.bfloat16


def matrix_products(source: str) -> tuple[bool, list[str]]:
    """Whether the problem's code multiplies matrices or convolves (by call or `@`), and the
    half-precision types it names. Tensors made without a dtype are float32, torch's default, so
    a problem that names no half type computes its products in float32 (KernelBench's
    `torch.rand(N, N)` inputs)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False, []
    products, halves = False, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            products = True
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            products = products or called in MATRIX_PRODUCTS
        if isinstance(node, ast.Attribute) and node.attr in HALF_TYPES:
            halves.add(node.attr)
    return products, sorted(halves)


EAGER_WRAPPER = """

# --- kernel-bot: {detail} ---------------------------------------------------------
class ModelNew({base}):
    pass
"""

TF32_WRAPPER = """

# --- kernel-bot: {detail} ---------------------------------------------------------
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
_KernelBotBase = {base}


class ModelNew(_KernelBotBase):
    pass
"""

CHANNELS_LAST_WRAPPER = """

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
"""


def search_candidates(
    problem: Problem, bases: list[Base], device: str, timing: str = "latency"
) -> tuple[list[CandidateSource], list[Skipped]]:
    """The whole catalogue for one problem; inapplicable transformations are skipped with a reason.
    Under `timing` "graph" every contender is replayed as a CUDA graph already, so the paths
    that only add graph replay to a sibling (CUDA graph, the compile modes with cudagraphs)
    would time the same kernels again."""
    cands: list[CandidateSource] = []
    skipped: list[Skipped] = []
    cuda = device == Device.CUDA
    if any(b.label == "target" for b in bases):
        # Not a transformation: the eager reference timed in the same run, so the report
        # can show eager, the current implementation and the best candidate side by side.
        ref = next(b for b in bases if b.label == "reference")
        cands.append(derived(ref, EAGER_WRAPPER, "the eager reference as the implementation", "eager-reference"))
    for base in bases:
        tag = base.label
        paths = paths_for(base)
        # On a CPU a Triton kernel runs through Triton's interpreter, which dynamo cannot trace
        # (rmsnorm's Triton TARGET failed so: "KeyError(torch.uint64)" on a fake tensor).
        interpreted = not cuda and uses(base.source, "triton.jit")
        for path in paths:
            if path.needs_gpu and not cuda:
                skipped.append(Skipped(f"{path.words} of {tag}", path.needs_gpu))
                continue
            if interpreted and path.key.startswith("compile"):
                skipped.append(
                    Skipped(
                        f"{path.words} of {tag}",
                        "its Triton kernels run through Triton's "
                        "CPU interpreter here, which torch.compile cannot trace: GPUs only",
                    )
                )
                continue
            if path.one_shape and len(problem.shapes_for(device)) == 1:
                skipped.append(Skipped(f"{path.words} of {tag}", path.one_shape))
                continue
            if path.replays_graphs and timing == TimingMode.GRAPH:
                skipped.append(
                    Skipped(f"{path.words} of {tag}", "--timing graph replays every contender as a CUDA graph already")
                )
                continue
            cands.append(path_candidate(base, path))
        if SDPA_PATHS[0] not in paths:
            skipped.append(Skipped(f"SDPA backend choice of {tag}", "no scaled_dot_product_attention here"))
        if GELU_TANH not in paths:
            skipped.append(Skipped(f"{GELU_TANH.words} of {tag}", "no GELU with approximate='tanh' here"))
        if interpreted and tunable_constants(base.source):
            # Verified in the interpreter and never timed there (bot.engine.evaluation.simulated): on 2 vCPUs
            # rmsnorm's 16 knob settings would cost a CPU dry run minutes and tell nothing.
            skipped.append(
                Skipped(
                    f"Triton autotuning of {tag}",
                    "its Triton kernels run in Triton's CPU interpreter here, where no setting is timed: GPUs only",
                )
            )
        else:
            cands.extend(autotune_variants(base))
        if not tunable_constants(base.source):
            skipped.append(
                Skipped(f"Triton autotuning of {tag}", "exposes no module-level BLOCK_*/NUM_WARPS/NUM_STAGES constants")
            )
    tol = problem.tolerance.get("norm_rel")
    products, halves = matrix_products(problem.source)
    if not cuda:
        skipped.append(Skipped("TF32 matmul", "TF32 exists only on GPUs"))
    elif not products:
        skipped.append(Skipped("TF32 matmul", "no matrix products or convolutions in this problem"))
    elif halves:
        skipped.append(
            Skipped(
                "TF32 matmul", f"half-precision tensors here ({', '.join(halves)}): TF32 changes float32 products only"
            )
        )
    elif tol is None or tol < TF32_NORM_ERR:
        skipped.append(
            Skipped(
                "TF32 matmul",
                f"the tolerance (norm_rel {tol or 1e-5:g}) is tighter than TF32's error (~{TF32_NORM_ERR:g})",
            )
        )
    else:
        cands.append(derived(bases[0], TF32_WRAPPER, "TF32 matmuls", "tf32"))
    if uses(problem.source, "Conv2d", "conv2d"):
        cands.append(derived(bases[0], CHANNELS_LAST_WRAPPER, "channels-last memory format", "channels-last"))
    else:
        skipped.append(Skipped("channels-last", "no 2-D convolutions in this problem"))
    return cands, skipped
