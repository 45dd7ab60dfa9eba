

# kernel-bot: scaled_dot_product_attention on short sequences, one key block per program.
# Read as text into search candidates after replace.py (bot/propose/paths.py): it is
# candidate code, and the bot's own process never imports it. SDPA's kernels are built for long sequences; on a decode
# attention (4 x 32 heads of 64 queries and keys, 128 wide) they take 11 us on the H200 where
# the data is 8 MB (docs/results-h200.md). Here each program holds BLOCK_M queries and every
# key it may see at once: one pass, no running softmax, more programs in flight.
import triton
import triton.language as tl

_KERNEL_BOT_MAX_KEYS = 128  # the whole key block sits in registers and shared memory
_KERNEL_BOT_MAX_HEAD_DIM = 128
_KERNEL_BOT_LOG2E = 1.4426950408889634


@triton.jit
def _kernel_bot_short_attention(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, heads, queries, keys,
                                sqb, sqh, sqm, sqd, skb, skh, skn, skd,
                                svb, svh, svn, svd, sob, soh, som, sod,
                                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                CAUSAL: tl.constexpr):
    block = tl.program_id(0)
    batch_head = tl.program_id(1)
    b = (batch_head // heads).to(tl.int64)
    h = (batch_head % heads).to(tl.int64)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    in_dims = dims[None, :] < HEAD_DIM
    q = tl.load(q_ptr + b * sqb + h * sqh + rows[:, None] * sqm + dims[None, :] * sqd,
                mask=(rows[:, None] < queries) & in_dims, other=0.0)
    seen = keys
    if CAUSAL:  # SDPA's is_causal is aligned top left: query i sees keys 0..i
        seen = tl.minimum(keys, (block + 1) * BLOCK_M)
    key_mask = (cols[:, None] < seen) & in_dims  # keys no row of this block sees are not read
    k = tl.load(k_ptr + b * skb + h * skh + cols[:, None] * skn + dims[None, :] * skd, mask=key_mask, other=0.0)
    v = tl.load(v_ptr + b * svb + h * svh + cols[:, None] * svn + dims[None, :] * svd, mask=key_mask, other=0.0)
    scores = tl.dot(q, tl.trans(k)) * qk_scale  # float32, in log2 units
    visible = cols[None, :] < keys
    if CAUSAL:
        visible = visible & (cols[None, :] <= rows[:, None])
    scores = tl.where(visible, scores, float("-inf"))
    p = tl.exp2(scores - tl.max(scores, 1)[:, None])
    out = tl.dot(p.to(v.dtype), v) / tl.sum(p, 1)[:, None]  # P rounded to the inputs' type, as flash attention does
    tl.store(o_ptr + b * sob + h * soh + rows[:, None] * som + dims[None, :] * sod,
             out.to(o_ptr.dtype.element_ty), mask=(rows[:, None] < queries) & in_dims)


def _kernel_bot_unspilled_configs(configs, named_args, **kwargs):
    """The configurations with at most 4096 of the key block's elements per warp. Built for
    sm_90 (ci/compile_kernels_sm90.py), two warps on 128 keys of head size 128 (8192 each)
    spilled to local memory: the autotuner would only spend time finding that out."""
    sizes = {**named_args, **kwargs}
    elements = sizes["BLOCK_N"] * sizes["BLOCK_D"]
    return [c for c in configs if c.num_warps * 4096 >= elements] or configs[-1:]


# Which block of queries per program and how many warps is a measurement: on the GPU the
# autotuner times these at the first call of each size (the bot gives that timing the GPU alone).
_kernel_bot_tuned_short_attention = triton.autotune(
    [triton.Config({"BLOCK_M": m}, num_warps=w, num_stages=1)
     for m, w in ((16, 2), (16, 4), (32, 4), (64, 4), (16, 8), (32, 8), (64, 8))],
    key=["queries", "keys", "HEAD_DIM", "CAUSAL"],
    prune_configs_by={"early_config_prune": _kernel_bot_unspilled_configs})(_kernel_bot_short_attention)


def _kernel_bot_short_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                           scale=None, enable_gqa=False):
    """The attention through the kernel above, or None where it does not apply (the caller
    then runs scaled_dot_product_attention itself)."""
    tensors = (query, key, value)
    if attn_mask is not None or dropout_p != 0.0 or enable_gqa:
        return None
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in tensors):
        return None
    if query.dtype not in (torch.bfloat16, torch.float16) or any(t.dtype != query.dtype for t in tensors):
        return None
    if not _kernel_bot_on_device(*tensors):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None  # no backward here
    batch, heads, queries, head_dim = query.shape
    keys = key.shape[2]
    if key.shape != (batch, heads, keys, head_dim) or value.shape != key.shape:
        return None
    if not (0 < keys <= _KERNEL_BOT_MAX_KEYS and 0 < queries and 0 < head_dim <= _KERNEL_BOT_MAX_HEAD_DIM):
        return None
    out = torch.empty_like(query)
    qk_scale = (scale if scale is not None else head_dim ** -0.5) * _KERNEL_BOT_LOG2E
    args = (query, key, value, out, qk_scale, heads, queries, keys, *query.stride(), *key.stride(),
            *value.stride(), *out.stride())
    sizes = dict(HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
                 BLOCK_N=max(16, triton.next_power_of_2(keys)), CAUSAL=bool(is_causal))
    if _KERNEL_BOT_INTERPRETED:  # the interpreter has nothing to time
        _kernel_bot_short_attention[(triton.cdiv(queries, 16), batch * heads)](
            *args, **sizes, BLOCK_M=16)
    else:
        def grid(meta):
            return (triton.cdiv(queries, meta["BLOCK_M"]), batch * heads)

        _kernel_bot_tuned_short_attention[grid](*args, **sizes)
    return out


_KERNEL_BOT_REPLACEMENTS[torch.nn.functional.scaled_dot_product_attention] = _kernel_bot_short_sdpa
