"""Attention lowerings."""

from __future__ import annotations

import math

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext, lowers, out_meta
from litert_torch.symbolic import all_static, broadcast_shapes

aten = torch.ops.aten


def _broadcast_batch(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    rank = max(a.rank, b.rank)
    return (ctx.reshape(a, (1,) * (rank - a.rank) + a.shape), ctx.reshape(b, (1,) * (rank - b.rank) + b.shape))


def _repeat_heads(ctx: LoweringContext, t: ir.Tensor, groups: int) -> ir.Tensor:
    """[..., H, S, E] -> [..., H * groups, S, E], head h repeated as heads h * groups .. h * groups + groups - 1."""
    *lead, heads, length, width = t.shape
    split = ctx.reshape(t, [*lead, heads, 1, length, width])
    multiples = ctx.const(np.array([1] * (len(lead) + 1) + [groups, 1, 1], np.int32), name="multiples")
    tiled = ctx.emit("TILE", [split, multiples], [*lead, heads, groups, length, width], t.dtype)
    return ctx.reshape(tiled, [*lead, heads * groups, length, width])


@lowers(aten.scaled_dot_product_attention.default)
def lower_sdpa(ctx, node, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
               enable_gqa=False) -> ir.Tensor:
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor

    softmax((q * scale) @ k^T + mask) @ v: MUL, BATCH_MATMUL (adj_y), ADD or SELECT_V2 for the mask, SOFTMAX,
    BATCH_MATMUL. Rows whose boolean mask excludes every key give zeros, as PyTorch's safe softmax does.

    Grouped-query attention (enable_gqa, fewer key/value heads than query heads): each key/value head is repeated
    for the query heads that share it (TILE), as PyTorch's repeat_interleave over the head axis.

    Limits: dropout_p must be 0 (PyTorch drops attention weights at random whenever it is not, in eval mode
    too); grouped-query attention needs static head counts."""
    if dropout_p:
        raise ctx.fail(f"scaled_dot_product_attention with dropout_p={dropout_p} drops attention weights at random "
                       "(in eval mode too); pass dropout_p=0.0 outside training, e.g. "
                       "dropout_p=self.p if self.training else 0.0")
    shape, dtype = out_meta(node)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        heads, kv_heads = q.shape[-3], k.shape[-3]
        if not all_static([heads, kv_heads, v.shape[-3]]):
            raise ctx.fail("grouped-query attention with a dynamic number of heads has no lowering")
        k, v = _repeat_heads(ctx, k, heads // kv_heads), _repeat_heads(ctx, v, heads // kv_heads)
    length, source = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # Scaling q (L x E per head) costs less than scaling the L x S scores.
    q = ctx.emit("MUL", [q, ctx.scalar_like(scale, q)], like=q)
    q, k = _broadcast_batch(ctx, q, k)
    scores_shape = [*broadcast_shapes(q.shape[:-2], k.shape[:-2]), length, source]
    scores = ctx.emit("BATCH_MATMUL", [q, k], scores_shape, dtype, adj_x=False, adj_y=True,
                      asymmetric_quantize_inputs=False)
    keep_any = None
    runtime_causal = False
    if is_causal and all_static([length, source]):
        causal = np.tril(np.ones([length, source], bool))
        attn_mask = ctx.const(causal, name="causal_mask")
    elif is_causal:
        # Built when the model runs: key j is visible from query i when j <= i.
        rows = ctx.emit("RANGE", [ctx.reshape(ctx.size_tensor(n), []) for n in (0, length, 1)], [length], np.int32)
        cols = ctx.emit("RANGE", [ctx.reshape(ctx.size_tensor(n), []) for n in (0, source, 1)], [source], np.int32)
        attn_mask = ctx.emit("GREATER_EQUAL", [ctx.reshape(rows, [length, 1]), ctx.reshape(cols, [1, source])],
                             [length, source], np.bool_)
        runtime_causal = True
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            lowest = ctx.scalar_like(np.finfo(dtype).min, scores)
            scores = ctx.emit("SELECT_V2", [attn_mask, scores, lowest], scores_shape, dtype)
            fully_masked = not runtime_causal and (
                (not attn_mask.is_constant) or not attn_mask.data.any(axis=-1).all())
            if fully_masked:
                keep_any = ctx.emit("REDUCE_ANY", [attn_mask, ctx.const(np.array([-1], np.int32), name="axis")],
                                    [*attn_mask.shape[:-1], 1], np.bool_, keep_dims=True)
        else:
            scores = ctx.emit("ADD", [scores, ctx.cast(attn_mask, dtype)], scores_shape, dtype)
    probs = ctx.emit("SOFTMAX", [scores], like=scores, beta=1.0)
    if keep_any is not None:
        probs = ctx.emit("MUL", [probs, ctx.cast(keep_any, dtype)], like=probs)
    probs, v = _broadcast_batch(ctx, probs, v)
    return ctx.emit("BATCH_MATMUL", [probs, v], shape, dtype, adj_x=False, adj_y=False,
                    asymmetric_quantize_inputs=False)
