

# kernel-bot: GELU with the tanh approximation through a Triton kernel with the GPU's own tanh.
# Read as text into search candidates after replace.py (bot/propose/paths.py): it is
# candidate code, and the bot's own process never imports it. On the H200 it is 1.18x faster
# than ATen's GELU on a 235 MB prefill (docs/results-h200.md).
# ATen and Inductor call the accurate tanhf, dozens of instructions per
# element; tanh.approx.f32 is one, its error (about 2^-11, relative) far under a 16-bit
# output's rounding, so it is used only where the output is bf16 or fp16. The CPU interpreter,
# which runs no PTX, computes tanh from exp instead.
import triton
import triton.language as tl


@triton.jit
def _kernel_bot_gelu_tanh(x_ptr, y_ptr, n, BLOCK: tl.constexpr, HARDWARE_TANH: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
    if HARDWARE_TANH:
        tanh = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [inner], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        tanh = 1.0 - 2.0 / (tl.exp(2.0 * inner) + 1.0)  # saturates to +-1 where exp overflows
    tl.store(y_ptr + offsets, (0.5 * x * (1.0 + tanh)).to(y_ptr.dtype.element_ty), mask=mask)


# How many elements per program and how many warps is a measurement: on the GPU the autotuner
# times these at the first call of each size (the bot gives its timing the GPU alone).
_kernel_bot_tuned_gelu_tanh = triton.autotune(
    [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((512, 2), (1024, 2), (1024, 4), (2048, 4),
                                                           (2048, 8), (4096, 8), (8192, 16))],
    key=["n"])(_kernel_bot_gelu_tanh)


def _kernel_bot_fast_gelu(input, approximate="none"):
    """F.gelu(input, approximate="tanh") through the kernel above, or None where it does not
    apply (the exact GELU, other dtypes, a call that needs a backward)."""
    if approximate != "tanh" or not isinstance(input, torch.Tensor) or not _kernel_bot_on_device(input):
        return None
    if input.dtype not in (torch.bfloat16, torch.float16) or input.numel() == 0:
        return None
    if torch.is_grad_enabled() and input.requires_grad:
        return None
    x = input.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if _KERNEL_BOT_INTERPRETED:
        _kernel_bot_gelu_tanh[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, HARDWARE_TANH=False)
    else:
        _kernel_bot_tuned_gelu_tanh[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, HARDWARE_TANH=True)
    return out


_KERNEL_BOT_REPLACEMENTS[torch.nn.functional.gelu] = _kernel_bot_fast_gelu
