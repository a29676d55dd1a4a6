"""What mixture-of-experts layers route tokens with: torch.histc (tokens per expert) and the grouped matrix
product of Hugging Face transformers' experts (`transformers::grouped_mm_fallback`: rows sorted by expert, each
block of rows times its expert's weight)."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common.registry import lowers, lowers_library_op, out_meta

aten = torch.ops.aten

# The largest gathered weight block (rows x in x out elements) grouped_mm reads per call; beyond it every expert
# is applied to every row and the products are selected, which needs no such block.
_GATHER_LIMIT = 1 << 24


@lowers(aten.histc.default)
def lower_histc(ctx, node, x, bins=100, min=0, max=0) -> ir.Tensor:
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor

    Counts of the values in `bins` equal bins over [min, max] (over [x.min(), x.max()] when min == max,
    widened by 1 each way when those are equal too), as PyTorch bins them: bin = trunc((x - min) * bins /
    (max - min)) computed in that order in the input's float type, x == max in the last bin, values outside
    the range and NaN not counted. One EQUAL of every value with every bin, summed.

    Limits: float inputs; static sizes."""
    shape, dtype = out_meta(node)
    if x.dtype.kind != "f":
        raise ctx.fail(f"histc of {x.dtype} values (PyTorch takes floats on the CPU)")
    bins = int(bins)
    n = int(np.prod([int(d) for d in x.shape])) if x.rank else 1
    flat = ctx.reshape(x, [n])
    if float(min) == float(max):
        axis = ctx.const(np.array([0], np.int32), name="axis")
        lo = ctx.emit("REDUCE_MIN", [flat, axis], [1], flat.dtype, keep_dims=True)
        hi = ctx.emit("REDUCE_MAX", [flat, axis], [1], flat.dtype, keep_dims=True)
        same = ctx.emit("EQUAL", [lo, hi], [1], np.bool_)
        one = ctx.scalar_like(1.0, lo)
        lo = ctx.emit("SELECT_V2", [same, ctx.emit("SUB", [lo, one], like=lo, fused_activation_function="NONE"),
                                    lo], like=lo)
        hi = ctx.emit("SELECT_V2", [same, ctx.emit("ADD", [hi, one], like=hi, fused_activation_function="NONE"),
                                    hi], like=hi)
    else:
        if float(min) > float(max):
            raise ctx.fail(f"histc with min {min} above max {max}")
        lo, hi = (ctx.const(np.array([v], flat.dtype), name=name) for v, name in ((min, "min"), (max, "max")))
    width = ctx.emit("SUB", [hi, lo], like=lo, fused_activation_function="NONE")
    offset = ctx.emit("SUB", [flat, lo], like=flat, fused_activation_function="NONE")
    scaled = ctx.emit("MUL", [offset, ctx.scalar_like(float(bins), flat)], like=flat, fused_activation_function="NONE")
    position = ctx.emit("DIV", [scaled, width], like=flat, fused_activation_function="NONE")
    index = ctx.cast(position, np.int32)  # truncation; values below min are dropped below
    index = ctx.emit("MINIMUM", [index, ctx.const(np.array(bins - 1, np.int32), name="last_bin")], like=index)
    inside = ctx.emit("LOGICAL_AND", [ctx.emit("GREATER_EQUAL", [flat, lo], [n], np.bool_),
                                      ctx.emit("LESS_EQUAL", [flat, hi], [n], np.bool_)], [n], np.bool_)
    hit = ctx.emit("EQUAL", [ctx.reshape(index, [n, 1]), ctx.const(np.arange(bins, dtype=np.int32).reshape(1, bins),
                                                                    name="bins")], [n, bins], np.bool_)
    hit = ctx.emit("LOGICAL_AND", [hit, ctx.reshape(inside, [n, 1])], [n, bins], np.bool_)
    counts = ctx.emit("SUM", [ctx.cast(hit, np.float32), ctx.const(np.array([0], np.int32), name="axis")], [bins],
                      np.float32, keep_dims=False)
    return ctx.cast(ctx.reshape(counts, shape), dtype)


@lowers_library_op("transformers::grouped_mm_fallback")
def lower_grouped_mm(ctx, node, x, weight, offsets) -> ir.Tensor:
    """Hugging Face transformers' grouped matrix product: rows [offsets[e - 1], offsets[e]) of x times
    weight[e] ([experts, in, out]), rows past the last offset zero. Each row's expert is the number of offsets
    at or below its position; its weight matrix is gathered and applied with one BATCH_MATMUL (only the chosen
    experts' weights are read), or, when that gathered block would be large, every expert is applied to every
    row (BATCH_MATMUL) and each row's result selected.

    Limits: static row counts."""
    shape, dtype = out_meta(node)
    rows = x.shape[0]
    if not isinstance(rows, int):
        raise ctx.fail("grouped_mm over a run-time number of rows has no lowering")
    experts, d_in, d_out = (int(d) for d in weight.shape)
    positions = ctx.const(np.arange(rows, dtype=np.int32).reshape(rows, 1), name="rows")
    ends = ctx.reshape(ctx.cast(offsets, np.int32), [1, experts])
    past = ctx.cast(ctx.emit("GREATER_EQUAL", [positions, ends], [rows, experts], np.bool_), np.int32)
    expert = ctx.emit("SUM", [past, ctx.const(np.array([1], np.int32), name="axis")], [rows], np.int32,
                      keep_dims=False)  # == experts for the rows past the last offset
    live = ctx.emit("LESS", [expert, ctx.const(np.array(experts, np.int32), name="experts")], [rows], np.bool_)
    if rows * d_in * d_out <= _GATHER_LIMIT:
        chosen = ctx.emit("MINIMUM", [expert, ctx.const(np.array(experts - 1, np.int32), name="last")],
                          like=expert)
        w = ctx.emit("GATHER", [weight, chosen], [rows, d_in, d_out], weight.dtype, axis=0, batch_dims=0)
        y = ctx.emit("BATCH_MATMUL", [ctx.reshape(x, [rows, 1, d_in]), w], [rows, 1, d_out], dtype, adj_x=False,
                     adj_y=False, asymmetric_quantize_inputs=False)
        y = ctx.reshape(y, [rows, d_out])
    else:
        every = ctx.emit("BATCH_MATMUL", [ctx.reshape(x, [1, rows, d_in]), weight], [experts, rows, d_out], dtype,
                         adj_x=False, adj_y=False, asymmetric_quantize_inputs=False)
        mine = ctx.emit("EQUAL", [ctx.reshape(expert, [1, rows, 1]),
                                  ctx.const(np.arange(experts, dtype=np.int32).reshape(experts, 1, 1),
                                            name="experts")], [experts, rows, 1], np.bool_)
        picked = ctx.emit("SELECT_V2", [mine, every, ctx.const(np.array(0, dtype), name="zero")],
                          [experts, rows, d_out], dtype)
        y = ctx.emit("SUM", [picked, ctx.const(np.array([0], np.int32), name="axis")], [rows, d_out], dtype,
                     keep_dims=False)
    return ctx.emit("SELECT_V2", [ctx.reshape(live, [rows, 1]), y, ctx.const(np.array(0, dtype), name="zero")],
                    shape, dtype)
