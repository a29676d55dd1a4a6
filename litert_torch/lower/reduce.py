"""Reductions over dimensions: mean, sum, amax, amin."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch.lower.registry import LoweringContext, lowers, normalize_dim, out_meta

aten = torch.ops.aten


def reduce(ctx: LoweringContext, node, opcode: str, x, dim, keepdim: bool):
    out_shape, dtype = out_meta(node)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        axes = list(range(x.rank))
    else:
        axes = sorted({normalize_dim(d, x.rank) for d in ([dim] if isinstance(dim, int) else dim)})
    if x.rank == 0 or not axes:
        return ctx.cast(x, dtype)
    y = ctx.emit(opcode, [ctx.cast(x, dtype), ctx.const(np.array(axes, np.int32), name="axes")],
                 [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdim else out_shape, dtype,
                 keep_dims=bool(keepdim))
    return y


@lowers(aten.mean.dim)
def lower_mean(ctx, node, x, dim=None, keepdim=False, dtype=None):
    return reduce(ctx, node, "MEAN", x, dim, keepdim)


@lowers(aten.mean.default)
def lower_mean_all(ctx, node, x, dtype=None):
    return reduce(ctx, node, "MEAN", x, None, False)


@lowers(aten.sum.dim_IntList)
def lower_sum(ctx, node, x, dim=None, keepdim=False, dtype=None):
    return reduce(ctx, node, "SUM", x, dim, keepdim)


@lowers(aten.sum.default)
def lower_sum_all(ctx, node, x, dtype=None):
    return reduce(ctx, node, "SUM", x, None, False)


@lowers(aten.amax.default)
def lower_amax(ctx, node, x, dim=(), keepdim=False):
    return reduce(ctx, node, "REDUCE_MAX", x, dim, keepdim)


@lowers(aten.amin.default)
def lower_amin(ctx, node, x, dim=(), keepdim=False):
    return reduce(ctx, node, "REDUCE_MIN", x, dim, keepdim)
