"""ONNX Attention (opsets 23-28) onto TFLite ops: heads split from 3-D inputs, grouped-query heads, past/present
caches, boolean and additive masks, causal masks and sliding windows, softcap and every qk_matmul_output mode.
Registered in `registry.OPS` like every ONNX op."""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.lower.onnx.registry import onnx_op, operand, tensor
from litert_torch.symbolic import all_static, broadcast_shapes


def _heads(ctx, x: ir.Tensor, heads: int) -> ir.Tensor:
    """[B, S, heads * D] -> [B, heads, S, D]."""
    b, s, hidden = x.shape
    return ctx.transpose(ctx.reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


@onnx_op("Attention")
def attention(ctx, node, inputs, attrs) -> list[ir.Tensor | None]:
    """Attention (opsets 23-28).

    Scaled dot-product attention as ONNX defines it: 3-D inputs split into heads (q_num_heads,
    kv_num_heads), past_key / past_value concatenated in front of K and V (the present outputs), boolean or
    additive masks (padded with masked positions to the key length), a bottom-right causal mask after the past and
    sliding windows,
    grouped-query heads (each KV head GATHERed for its query heads), the scale applied as its square root to Q
    and K, softcap (tanh) before the mask, SOFTMAX, rows with every key masked giving 0, and qk_matmul_output in
    each of its modes.

    With nonpad_kv_seqlen (an external cache), keys past each batch's count are masked and the causal mask and
    window count from that batch's end, computed when the model runs.

    Float16 inputs are computed in float32.

    Limits: static sizes."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    past_k = inputs[4] if len(inputs) > 4 else None
    past_v = inputs[5] if len(inputs) > 5 else None
    nonpad = inputs[6] if len(inputs) > 6 else None
    if nonpad is not None and past_k is not None:
        raise ctx.fail("Attention takes nonpad_kv_seqlen or past_key / past_value, not both")
    dtype = q.dtype
    if any(t.dtype not in (np.float32, np.float16) or t.dtype != dtype for t in (q, k, v)):
        raise ctx.fail("Attention of inputs other than float32 or float16 (all of one type) has no lowering")
    q, k, v = (ctx.cast(t, np.float32) for t in (q, k, v))  # float16 is computed in float32
    past_k, past_v = (ctx.cast(t, np.float32) if t is not None else None for t in (past_k, past_v))
    if (past_k is None) != (past_v is None):
        raise ctx.fail("Attention needs past_key and past_value together")
    if not all_static([*q.shape, *k.shape, *v.shape]):
        raise ctx.fail("Attention over sizes known only at run time has no lowering")
    three_d = q.rank == 3
    if three_d:
        q_heads, kv_heads = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not q_heads or not kv_heads:
            raise ctx.fail("3-D Attention needs q_num_heads and kv_num_heads")
        q, k, v = _heads(ctx, q, q_heads), _heads(ctx, k, kv_heads), _heads(ctx, v, kv_heads)
    batch, q_heads, q_len, head = (int(d) for d in q.shape)
    if past_k is not None:
        if past_v is None:
            raise ctx.fail("Attention with a past key and no past value")
        k = ctx.emit("CONCATENATION", [past_k, k], (batch, k.shape[1], past_k.shape[2] + k.shape[2], k.shape[3]),
                     k.dtype, axis=2)
        v = ctx.emit("CONCATENATION", [past_v, v], (batch, v.shape[1], past_v.shape[2] + v.shape[2], v.shape[3]),
                     v.dtype, axis=2)
    present_k, present_v = k, v
    kv_heads, kv_len = int(k.shape[1]), int(k.shape[2])
    past_len = int(past_k.shape[2]) if past_k is not None else 0

    causal, left, right = attrs.get("is_causal", 0), attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    if nonpad is None:
        bias, all_masked = _attention_bias(ctx, mask, causal, q_len, kv_len, past_len, left, right)
    else:
        bias, all_masked = _attention_bias(ctx, mask, 0, q_len, kv_len, 0)
        bias, all_masked = _external_cache_bias(ctx, bias, operand(ctx, nonpad), batch, q_len, kv_len, causal, left,
                                                right)
    if kv_heads != q_heads:
        if q_heads % kv_heads:
            raise ctx.fail(f"Attention with {q_heads} query heads and {kv_heads} key/value heads has no lowering")
        groups = np.repeat(np.arange(kv_heads, dtype=np.int32), q_heads // kv_heads)
        k = ctx.emit("GATHER", [k, ctx.const(groups, name="kv_heads")], (batch, q_heads, kv_len, k.shape[3]),
                     k.dtype, axis=1, batch_dims=0)
        v = ctx.emit("GATHER", [v, ctx.const(groups, name="kv_heads")], (batch, q_heads, kv_len, v.shape[3]),
                     v.dtype, axis=1, batch_dims=0)
    scale = attrs.get("scale")
    root = float(np.sqrt(np.float32(1.0 / np.sqrt(head) if scale is None else scale)))
    qs = ctx.emit("MUL", [q, ctx.scalar_like(root, q)], like=q)
    ks = ctx.emit("MUL", [k, ctx.scalar_like(root, k)], like=k)
    scores_shape = (batch, q_heads, q_len, kv_len)
    scores = ctx.emit("BATCH_MATMUL", [qs, ks], scores_shape, np.float32, adj_x=False, adj_y=True,
                      asymmetric_quantize_inputs=False)
    softcap = float(attrs.get("softcap", 0.0) or 0.0)
    if softcap > 0:
        scores = ctx.emit("MUL", [ctx.emit("TANH", [ctx.emit("MUL", [scores, ctx.scalar_like(1.0 / softcap,
                                                                                               scores)],
                                                           like=scores)], like=scores),
                                  ctx.scalar_like(softcap, scores)], like=scores)
    biased = scores if bias is None else ctx.emit("ADD", [scores, bias], scores_shape, np.float32)
    probs = ctx.emit("SOFTMAX", [biased], like=biased, beta=1.0)
    if all_masked is not None:  # rows with no attendable key give 0, not SOFTMAX's NaN
        probs = ctx.emit("SELECT_V2", [all_masked, ctx.scalar_like(0.0, probs), probs], like=probs)
    y = ctx.emit("BATCH_MATMUL", [probs, v], (batch, q_heads, q_len, v.shape[3]), np.float32, adj_x=False,
                 adj_y=False, asymmetric_quantize_inputs=False)
    if three_d:
        y = ctx.reshape(ctx.transpose(y, (0, 2, 1, 3)), (batch, q_len, q_heads * int(v.shape[3])))
    mode = attrs.get("qk_matmul_output_mode", 0)
    qk = {2: biased, 3: probs}.get(mode, scores)
    outputs = [y, present_k, present_v, qk]
    return [ctx.cast(t, dtype) if i in node.used or i == 0 else None
            for i, t in enumerate(outputs[:len(node.outputs)])]


def _attention_bias(ctx, mask, causal: int, q_len: int, kv_len: int, past_len: int, left: int = -1,
                    right: int = -1):
    """The additive bias (None for none) and the rows it masks entirely (a boolean tensor, or None when none can
    be): the mask as 0 / -inf (boolean) or as given, padded to the key length with -inf, plus the causal mask
    and the sliding window (keys within `left` before and `right` after the query's position, -1: unbounded),
    both counted from the end of the past."""
    bias = None
    if mask is not None:
        mask = tensor(ctx, mask)
        if mask.dtype == np.bool_:
            mask = ctx.emit("SELECT_V2", [mask, ctx.const(np.array(0.0, np.float32)),
                                          ctx.const(np.array(-np.inf, np.float32))], mask.shape, np.float32)
        mask = ctx.cast(mask, np.float32)
        width = int(mask.shape[-1])
        if width < kv_len:
            pads = np.zeros((mask.rank, 2), np.int32)
            pads[-1, 1] = kv_len - width
            mask = ctx.emit("PADV2", [mask, ctx.const(pads, name="pads"), ctx.const(np.array(-np.inf, np.float32))],
                            (*mask.shape[:-1], kv_len), np.float32)
        bias = mask
    if causal:
        allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + past_len
        tri = ctx.const(np.where(allowed, 0.0, -np.inf).astype(np.float32), name="causal")
        bias = tri if bias is None else ctx.emit("ADD", [bias, tri], broadcast_shapes(bias.shape, tri.shape),
                                                 np.float32)
    if left >= 0 or right >= 0:
        diff = np.arange(q_len)[:, None] + past_len - np.arange(kv_len)[None, :]
        inside = np.ones_like(diff, dtype=bool)
        if left >= 0:
            inside &= diff <= left
        if right >= 0:
            inside &= -diff <= right
        window = ctx.const(np.where(inside, 0.0, -np.inf).astype(np.float32), name="window")
        bias = window if bias is None else ctx.emit("ADD", [bias, window], broadcast_shapes(bias.shape, window.shape),
                                                    np.float32)
    if bias is None:
        return None, None
    if bias.is_constant:
        rows = np.isneginf(np.asarray(bias.data).max(axis=-1, keepdims=True))
        return bias, (ctx.const(rows, name="masked_rows") if rows.any() else None)
    row_max = ctx.emit("REDUCE_MAX", [bias, ctx.const(np.array([bias.rank - 1], np.int32), name="axes")],
                       (*bias.shape[:-1], 1), np.float32, keep_dims=True)
    rows = ctx.emit("EQUAL", [row_max, ctx.const(np.array(-np.inf, np.float32))], row_max.shape, np.bool_)
    return bias, rows


def _external_cache_bias(ctx, bias, nonpad: ir.Tensor, batch: int, q_len: int, kv_len: int, causal: int, left: int,
                         right: int):
    """`bias` plus, per batch b with n = nonpad_kv_seqlen[b]: keys j >= n masked, and with an offset of
    n - q_len the causal mask and the window (bottom-right aligned); the rows all of whose keys are masked."""
    n = ctx.reshape(ctx.cast(nonpad, np.int32), (batch, 1, 1, 1))
    j = ctx.const(np.arange(kv_len, dtype=np.int32).reshape(1, 1, 1, kv_len), name="key_index")
    shape = (batch, 1, q_len, kv_len)
    allowed = ctx.emit("LESS", [j, n], (batch, 1, 1, kv_len), np.bool_)
    diff = None
    if causal or left >= 0 or right >= 0:
        i = ctx.const((np.arange(q_len, dtype=np.int32) - q_len).reshape(1, 1, q_len, 1), name="query_index")
        diff = ctx.emit("SUB", [ctx.emit("ADD", [i, n], (batch, 1, q_len, 1), np.int32), j], shape, np.int32)

    def both(a, b):
        return ctx.emit("LOGICAL_AND", [a, b], broadcast_shapes(a.shape, b.shape), np.bool_)

    zero = ctx.const(np.array(0, np.int32))
    if causal:
        allowed = both(allowed, ctx.emit("GREATER_EQUAL", [diff, zero], shape, np.bool_))
    if left >= 0:
        allowed = both(allowed, ctx.emit("LESS_EQUAL", [diff, ctx.const(np.array(left, np.int32))], shape, np.bool_))
    if right >= 0:
        allowed = both(allowed, ctx.emit("GREATER_EQUAL", [diff, ctx.const(np.array(-right, np.int32))], shape,
                                         np.bool_))
    extra = ctx.emit("SELECT_V2", [allowed, ctx.const(np.array(0.0, np.float32)),
                                   ctx.const(np.array(-np.inf, np.float32))], allowed.shape, np.float32)
    bias = extra if bias is None else ctx.emit("ADD", [bias, extra], broadcast_shapes(bias.shape, extra.shape),
                                               np.float32)
    row_max = ctx.emit("REDUCE_MAX", [bias, ctx.const(np.array([bias.rank - 1], np.int32), name="axes")],
                       (*bias.shape[:-1], 1), np.float32, keep_dims=True)
    rows = ctx.emit("EQUAL", [row_max, ctx.const(np.array(-np.inf, np.float32))], row_max.shape, np.bool_)
    return bias, rows
