"""Elementwise math with no single TFLite builtin, in forms that stay accurate over the whole input range (log1p
and expm1 near 0, where LOG(1 + x) and EXP(x) - 1 lose every digit), and statistics that return two results
(var_mean)."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower import exact
from litert_torch.lower.elementwise import operand, scalar_with
from litert_torch.lower.reduce import lower_var, reduce
from litert_torch.lower.registry import LoweringContext, lowers, out_meta
from litert_torch.symbolic import broadcast_shapes

aten = torch.ops.aten


def _select(ctx: LoweringContext, cond: ir.Tensor, a: ir.Tensor, b: ir.Tensor) -> ir.Tensor:
    return ctx.emit("SELECT_V2", [cond, a, b], like=b)


# Below this magnitude log1p and expm1 come from their Taylor series (SERIES_TERMS terms: the first omitted
# term is under 1e-8 of the result), above it from LOG(1 + x) and EXP(x) - 1, which lose at most a digit there.
# (x * log(u) / (u - 1) style identities need a LOG that is accurate near 1, which XNNPACK's is not.)
SERIES_LIMIT = 0.1
SERIES_TERMS = 8


def _series(ctx: LoweringContext, x: ir.Tensor, coefficients: list[float]) -> ir.Tensor:
    """x * (c0 + x * (c1 + x * (c2 + ...))) by Horner's rule."""
    acc = ctx.scalar_like(coefficients[-1], x)
    for c in reversed(coefficients[:-1]):
        acc = ctx.emit("ADD", [ctx.emit("MUL", [acc, x], like=x), ctx.scalar_like(c, x)], like=x)
    return ctx.emit("MUL", [acc, x], like=x)


def _small(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    return ctx.emit("LESS", [ctx.emit("ABS", [x], like=x), ctx.scalar_like(SERIES_LIMIT, x)], x.shape, np.bool_)


@lowers(aten.log1p.default)
def lower_log1p(ctx, node, x):
    """log(1 + x): its Taylor series for |x| < 0.1 (where LOG(1 + x) would lose the digits of x), LOG(1 + x)
    elsewhere."""
    shape, dtype = out_meta(node)
    x = ctx.cast(x, dtype)
    near = _series(ctx, x, [(-1.0) ** k / (k + 1) for k in range(SERIES_TERMS)])
    far = exact.log(ctx, ctx.emit("ADD", [x, ctx.scalar_like(1.0, x)], like=x))
    return _select(ctx, _small(ctx, x), near, far)


@lowers(aten.expm1.default)
def lower_expm1(ctx, node, x):
    """exp(x) - 1: its Taylor series for |x| < 0.1 (where EXP(x) - 1 would lose the digits of x), EXP(x) - 1
    elsewhere."""
    shape, dtype = out_meta(node)
    x = ctx.cast(x, dtype)
    near = _series(ctx, x, [1.0 / float(np.prod(np.arange(1, k + 2))) for k in range(SERIES_TERMS)])
    far = ctx.emit("SUB", [exact.exp(ctx, x), ctx.scalar_like(1.0, x)], like=x)
    return _select(ctx, _small(ctx, x), near, far)  # NaN is not small: it takes the far branch and stays NaN


@lowers(aten.exp2.default)
def lower_exp2(ctx, node, x):
    """POW(2, x)."""
    return scalar_with(ctx, node, "POW", 2.0, x)


@lowers(aten.atan2.default)
def lower_atan2(ctx, node, a, b):
    """ATAN2 on operands promoted to the float result type, each broadcast to the result's shape first (the
    kernel takes operands of one shape)."""
    shape, dtype = out_meta(node)
    return ctx.emit("ATAN2", [_broadcast_to(ctx, operand(ctx, a, dtype), shape),
                              _broadcast_to(ctx, operand(ctx, b, dtype), shape)], shape, dtype)


def _broadcast_to(ctx: LoweringContext, x: ir.Tensor, shape) -> ir.Tensor:
    if tuple(x.shape) == tuple(shape):
        return x
    x = ctx.reshape(x, (1,) * (len(shape) - x.rank) + tuple(x.shape))
    return ctx.emit("BROADCAST_TO", [x, ctx.dims_tensor(shape)], shape, x.dtype)


@lowers(aten.isnan.default)
def lower_isnan(ctx, node, x):
    """NOT_EQUAL(x, x): only NaN differs from itself (integers never are NaN)."""
    shape, _ = out_meta(node)
    x = x if x.dtype.kind == "f" else ctx.cast(x, np.int32)  # narrow integer comparisons would abort
    return ctx.emit("NOT_EQUAL", [x, x], shape, np.bool_)


@lowers(aten.clamp.Tensor)
def lower_clamp_tensor(ctx, node, x, min=None, max=None):
    """MAXIMUM with `min`, then MINIMUM with `max` (tensors or numbers), broadcasting, in the result type."""
    shape, dtype = out_meta(node)
    y = operand(ctx, x, dtype)
    for opcode, bound in (("MAXIMUM", min), ("MINIMUM", max)):
        if bound is None:
            continue
        b = operand(ctx, bound, dtype)
        y = ctx.emit(opcode, [y, b], broadcast_shapes(y.shape, b.shape), dtype)
    return ctx.reshape(y, shape) if tuple(y.shape) != tuple(shape) else y


@lowers(aten.round.decimals)
def lower_round_decimals(ctx, node, x, *, decimals=0):
    """ROUND(x * 10^d) / 10^d (ROUND(x / 10^-d) * 10^-d for negative d), as torch.round computes it."""
    if decimals == 0:
        return ctx.emit("ROUND", [x], like=x)
    scale = ctx.scalar_like(10.0 ** abs(decimals), x)
    if decimals > 0:
        return ctx.emit("DIV", [ctx.emit("ROUND", [ctx.emit("MUL", [x, scale], like=x)], like=x), scale], like=x)
    return ctx.emit("MUL", [ctx.emit("ROUND", [ctx.emit("DIV", [x, scale], like=x)], like=x), scale], like=x)


@lowers(aten.var_mean.correction)
def lower_var_mean(ctx, node, x, dim=None, *, correction=None, keepdim=False):
    """(var, mean): var as aten.var.correction, mean as MEAN over the same dims."""
    var_node = node.with_value(node.outputs[0].shape, node.outputs[0].dtype)
    mean_node = node.with_value(node.outputs[1].shape, node.outputs[1].dtype)
    var = lower_var(ctx, var_node, x, dim, correction=correction, keepdim=keepdim)
    mean = reduce(ctx, mean_node, "MEAN", x, dim, keepdim)
    return var, mean
