"""ONNX math ops composed from builtins and the ATen lowerings: the smooth and thresholded activations, Xor,
BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot, Det, LRN, the Hann, Hamming and Blackman windows
(constants), Mean, the reductions of a transformed input (ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum,
ReduceLogSumExp, ReduceProd), CumSum, CumProd, TopK, Hardmax, LpNormalization, SpaceToDepth, ScatterElements
and ScatterND, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss. Axes, K and the scan axis may be
constants or computed at run time."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.aten import linalg, scatter
from litert_torch.lower.aten.elementwise import integer_and_or
from litert_torch.lower.onnx.dynamic import _reduce_shapes, reduce_over, runtime_shaped
from litert_torch.lower.onnx.registry import (
    aten_fn, const_list, onnx_op, operand, out_shape, scalar, sub, tensor,
)
from litert_torch.lower.aten.reduce import cumprod_along, topk_last_axis
from litert_torch.lower.aten.reduce import reduce as reduce_over_dims
from litert_torch.lower.common.registry import LoweringContext, numpy_dtype
from litert_torch.lower.aten.selection import nonzero_coords, truth
from litert_torch.symbolic import Sym, all_static

aten = torch.ops.aten

def _scalar(ctx: LoweringContext, value: float, like: ir.Tensor) -> ir.Tensor:
    return ctx.scalar_like(value, like)


def _mul(ctx, a, b):
    return ctx.emit("MUL", [a, b], like=a, fused_activation_function="NONE")


def _add(ctx, a, b):
    return ctx.emit("ADD", [a, b], like=a, fused_activation_function="NONE")


def _softplus(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """log(1 + exp(x)) as relu(x) + log1p(exp(-|x|)): no overflow for large x, no cancellation for small."""
    tail = ctx.emit("EXP", [ctx.emit("NEG", [ctx.emit("ABS", [x], like=x)], like=x)], like=x)
    return _add(ctx, ctx.emit("RELU", [x], like=x), aten_fn(aten.log1p.default)(ctx, ctx.node, tail))


def _float_only(ctx, node, x):
    if x.dtype.kind != "f":
        raise ctx.fail(f"{node.op_type} of {x.dtype} values is not defined (ONNX takes floating-point inputs)")


@onnx_op("Softplus")
def softplus(ctx, node, inputs, attrs) -> ir.Tensor:
    """Softplus (opsets 13-28).

    log(1 + exp(x)), as relu(x) + log1p(exp(-|x|))."""
    _float_only(ctx, node, inputs[0])
    return _softplus(ctx, inputs[0])


@onnx_op("Softsign")
def softsign(ctx, node, inputs, attrs) -> ir.Tensor:
    """Softsign (opsets 13-28).

    x / (1 + |x|)."""
    x = inputs[0]
    _float_only(ctx, node, x)
    return ctx.emit("DIV", [x, _add(ctx, ctx.emit("ABS", [x], like=x), _scalar(ctx, 1.0, x))], like=x,
                    fused_activation_function="NONE")


@onnx_op("Mish")
def mish(ctx, node, inputs, attrs) -> ir.Tensor:
    """Mish (opsets 18-28).

    x * tanh(softplus(x))."""
    x = inputs[0]
    _float_only(ctx, node, x)
    return _mul(ctx, x, ctx.emit("TANH", [_softplus(ctx, x)], like=x))


@onnx_op("Swish")
def swish(ctx, node, inputs, attrs) -> ir.Tensor:
    """Swish (opsets 24-28).

    x * sigmoid(alpha * x)."""
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    scaled = x if alpha == 1.0 else _mul(ctx, x, _scalar(ctx, alpha, x))
    return _mul(ctx, x, ctx.emit("LOGISTIC", [scaled], like=x))


@onnx_op("Selu", "Celu")
def selu_celu(ctx, node, inputs, attrs) -> ir.Tensor:
    """Selu, Celu (opsets 13-28).

    as aten.elu's scaled forms: Selu = elu(x, alpha, scale=gamma), Celu = elu(x, alpha, input_scale=1/alpha)."""
    x = inputs[0]
    if node.op_type == "Selu":
        alpha = float(attrs.get("alpha", 1.67326319217681884765625))
        return aten_fn(aten.elu.default)(ctx, node, x, alpha, float(attrs.get("gamma", 1.05070102214813232421875)),
                                         1.0)
    alpha = float(attrs.get("alpha", 1.0))
    if alpha == 0:
        raise ctx.fail("Celu with alpha=0 divides by zero")
    return aten_fn(aten.elu.default)(ctx, node, x, alpha, 1.0, 1.0 / alpha)


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx, node, inputs, attrs) -> ir.Tensor:
    """ThresholdedRelu (opsets 13-28).

    x where x > alpha, else 0 (SELECT_V2)."""
    x = inputs[0]
    keep = ctx.emit("GREATER", [x, _scalar(ctx, float(attrs.get("alpha", 1.0)), x)], x.shape, np.bool_)
    return ctx.emit("SELECT_V2", [keep, x, _scalar(ctx, 0, x)], like=x)


@onnx_op("Shrink")
def shrink(ctx, node, inputs, attrs) -> ir.Tensor:
    """Shrink (opsets 13-28).

    x + bias below -lambd, x - bias above lambd, 0 between (float inputs; the bounds and bias in the input's
    type)."""
    x = inputs[0]
    _float_only(ctx, node, x)
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    low = ctx.emit("LESS", [x, _scalar(ctx, -lambd, x)], x.shape, np.bool_)
    high = ctx.emit("GREATER", [x, _scalar(ctx, lambd, x)], x.shape, np.bool_)
    up = ctx.emit("SUB", [x, _scalar(ctx, bias, x)], like=x, fused_activation_function="NONE")
    down = _add(ctx, x, _scalar(ctx, bias, x))
    return ctx.emit("SELECT_V2", [low, down, ctx.emit("SELECT_V2", [high, up, _scalar(ctx, 0, x)], like=x)], like=x)


@onnx_op("Xor")
def xor(ctx, node, inputs, attrs) -> ir.Tensor:
    """Xor (opsets 13-28).

    as aten.logical_xor (NOT_EQUAL of bools, broadcasting)."""
    return aten_fn(aten.logical_xor.default)(ctx, node, inputs[0], inputs[1])


@onnx_op("BitwiseXor", uint32="bits")
def bitwise_xor(ctx, node, inputs, attrs) -> ir.Tensor:
    """BitwiseXor (opsets 18-28).

    BITWISE_XOR (broadcasting)."""
    a, b = operand(ctx, inputs[0]), operand(ctx, inputs[1])
    return ctx.emit("BITWISE_XOR", [a, b], out_shape(node), a.dtype)


@onnx_op("BitwiseNot", uint32="bits")
def bitwise_not(ctx, node, inputs, attrs) -> ir.Tensor:
    """BitwiseNot (opsets 18-28).

    BITWISE_XOR with all ones (-1, or the type's maximum for an unsigned type)."""
    x = operand(ctx, inputs[0])
    dtype = np.dtype(x.dtype)
    ones = np.array(np.iinfo(dtype).max if dtype.kind == "u" else -1, dtype)
    return ctx.emit("BITWISE_XOR", [x, ctx.const(ones, name="ones")], x.shape, x.dtype)


@onnx_op("BitwiseAnd", "BitwiseOr", uint32="bits")
def bitwise_and_or(ctx, node, inputs, attrs) -> ir.Tensor:
    """BitwiseAnd, BitwiseOr (opsets 18-28).

    TFLite has no AND or OR of integers: as aten.bitwise_and / bitwise_or (`elementwise.integer_and_or`)."""
    a, b = operand(ctx, inputs[0]), operand(ctx, inputs[1])
    return integer_and_or(ctx, a, b, out_shape(node), a.dtype, "or" if node.op_type == "BitwiseOr" else "and")


@onnx_op("Det")
def det(ctx, node, inputs, attrs) -> ir.Tensor:
    """Det (opsets 13-28).

    The determinant of each matrix (lower/aten/linalg.py: elimination with partial pivoting)."""
    return linalg.determinant(ctx, operand(ctx, inputs[0]), "Det")


@onnx_op("LRN")
def lrn(ctx, node, inputs, attrs) -> ir.Tensor:
    """LRN (opsets 13-28).

    x / (bias + alpha / size * s)^beta, s the sum of squares over the `size` channels around each one
    (floor((size - 1) / 2) before, the rest after, within the tensor): the squares padded with zeros along the
    channel axis and summed over `size` shifted slices."""
    x = operand(ctx, inputs[0])
    size = int(attrs["size"])
    alpha, beta, bias = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    if x.rank < 3 or not all_static(x.shape):
        raise ctx.fail(f"LRN of an input {list(x.shape)} (static, channels on axis 1)")
    shape = [int(d) for d in x.shape]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = _mul(ctx, x, x)
    paddings = np.zeros((x.rank, 2), np.int32)
    paddings[1] = before, after
    padded_shape = list(shape)
    padded_shape[1] += size - 1
    padded = ctx.emit("PAD", [squares, ctx.const(paddings, name="paddings")], padded_shape, x.dtype)
    total = None
    for i in range(size):
        part = ctx.slice(padded, [0, i] + [0] * (x.rank - 2), shape)
        total = part if total is None else _add(ctx, total, part)
    base = _add(ctx, _mul(ctx, total, _scalar(ctx, alpha / size, x)), _scalar(ctx, bias, x))
    scale = aten_fn(aten.pow.Tensor_Scalar)(ctx, sub(node, shape, x.dtype), base, -beta)
    return _mul(ctx, x, scale)


def _window(ctx, node, inputs, attrs, terms: list[tuple[float, float]]):
    """a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) ... as a constant (N the size, or size - 1 when not
    periodic), computed in float64 and cast to the output type."""
    size = int(scalar(inputs[0], ctx, f"{node.op_type} size"))
    periodic = int(attrs.get("periodic", 1))
    n = np.arange(size, dtype=np.float64)
    span = size if periodic else size - 1
    values = np.zeros(size, np.float64)
    for k, coefficient in terms:
        values += coefficient * (np.cos(2 * np.pi * k * n / span) if k else 1.0)
    return ctx.const(values.astype(numpy_dtype(node.value.dtype)), name="window")


@onnx_op("HannWindow")
def hann_window(ctx, node, inputs, attrs) -> ir.Tensor:
    """HannWindow (opsets 17-28).

    0.5 - 0.5 cos(2 pi n / N), a constant."""
    return _window(ctx, node, inputs, attrs, [(0, 0.5), (1, -0.5)])


@onnx_op("HammingWindow")
def hamming_window(ctx, node, inputs, attrs) -> ir.Tensor:
    """HammingWindow (opsets 17-28).

    25/46 - 21/46 cos(2 pi n / N), a constant."""
    return _window(ctx, node, inputs, attrs, [(0, 25 / 46), (1, -21 / 46)])


@onnx_op("BlackmanWindow")
def blackman_window(ctx, node, inputs, attrs) -> ir.Tensor:
    """BlackmanWindow (opsets 17-28).

    0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N), a constant."""
    return _window(ctx, node, inputs, attrs, [(0, 0.42), (1, -0.5), (2, 0.08)])


@onnx_op("Mean")
def mean(ctx, node, inputs, attrs) -> ir.Tensor:
    """Mean (opsets 13-28).

    The broadcast sum of the inputs divided by their count, in the order ONNX's reference adds them."""
    shape = out_shape(node)
    xs = [operand(ctx, t) for t in inputs]
    total = xs[0]
    for t in xs[1:]:
        total = ctx.emit("ADD", [total, t], shape, total.dtype, fused_activation_function="NONE")
    if len(xs) == 1:
        return total
    if total.dtype.kind != "f":
        raise ctx.fail(f"Mean of {total.dtype} values has no lowering (ONNX takes floating-point inputs)")
    if tuple(total.shape) != tuple(shape):
        total = ctx.emit("BROADCAST_TO", [total, ctx.dims_tensor(shape)], shape, total.dtype)
    return ctx.emit("DIV", [total, _scalar(ctx, float(len(xs)), total)], like=total, fused_activation_function="NONE")


# ---- reductions of a transformed input ---------------------------------------------------------------------
def _abs(ctx, x):
    return ctx.emit("ABS", [x], like=x)


def _square(ctx, x):
    return _mul(ctx, x, x)


# op -> (transform before, reducer, transform after, float inputs only)
REDUCTION_FORMS = {
    "ReduceL1": (_abs, "SUM", None, False),
    "ReduceL2": (_square, "SUM", exact.sqrt, True),
    "ReduceSumSquare": (_square, "SUM", None, False),
    "ReduceLogSum": (None, "SUM", exact.log, True),
    "ReduceProd": (None, "REDUCE_PROD", None, False),
}
def _static_axes(ctx, x, inputs, attrs) -> list[int] | None:
    """The reduced axes from the input or the attribute (every axis when empty), None for a no-op."""
    if len(inputs) > 1 and inputs[1] is not None:
        axes = const_list(inputs[1], "reduction axes", ctx)
    else:
        axes = list(attrs.get("axes", []))
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else list(range(x.rank))
    return sorted({int(a) % max(x.rank, 1) for a in axes})


def _reduce_static(ctx, node, x, axes: list[int], opcode: str, keep: bool) -> ir.Tensor:
    return reduce_over_dims(ctx, node, opcode, x, axes, keep, x.dtype)


def _reduction(ctx, node, inputs, attrs, run_time: bool):
    before, opcode, after, float_only = REDUCTION_FORMS[node.op_type]
    x = inputs[0]
    if float_only:
        _float_only(ctx, node, x)
    if x.dtype == np.bool_:
        raise ctx.fail(f"{node.op_type} of bool values has no lowering")
    xt = before(ctx, x) if before else x
    if run_time:
        y = reduce_over(ctx, node, xt, inputs[1], attrs, opcode)
    else:
        axes = _static_axes(ctx, x, inputs, attrs)
        y = xt if axes is None else _reduce_static(ctx, node, xt, axes, opcode, bool(attrs.get("keepdims", 1)))
    return after(ctx, y) if after else y


@onnx_op(*REDUCTION_FORMS, parameters={1})
def reduce_transformed_static(ctx, node, inputs, attrs) -> ir.Tensor:
    """ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceProd (opsets 13-28).

    The ONNX reductions of a transformed input: ABS, MUL (a square), SUM or REDUCE_PROD over the constant
    axes, then SQRT or LOG."""
    return _reduction(ctx, node, inputs, attrs, False)


@runtime_shaped(*REDUCTION_FORMS, inputs={1}, shapes=_reduce_shapes)
def reduce_transformed(ctx, node, inputs, attrs) -> ir.Tensor:
    """The ONNX reductions of a transformed input: ABS, MUL (a square), SUM or REDUCE_PROD over the run-time
    axes, then SQRT or LOG."""
    return _reduction(ctx, node, inputs, attrs, True)


def _finite_or_zero(ctx, m):
    infinite = ctx.emit("EQUAL", [ctx.emit("ABS", [m], like=m), _scalar(ctx, np.inf, m)], m.shape, np.bool_)
    return ctx.emit("SELECT_V2", [infinite, _scalar(ctx, 0, m), m], like=m)


def _log_sum_exp(ctx, node, inputs, attrs, run_time: bool):
    """m + log(sum(exp(x - m))) with m the largest value of each reduced slice (0 where it is infinite, so that
    an all -inf slice gives -inf and a +inf gives +inf)."""
    x = inputs[0]
    _float_only(ctx, node, x)
    keep = bool(attrs.get("keepdims", 1))
    if run_time:
        m = reduce_over(ctx, node, x, inputs[1], attrs, "REDUCE_MAX")
        if m is x:  # no axes, noop_with_empty_axes
            return x
        m_kept = m
        if not keep:
            # the largest values kept in place for the subtraction: size 1 on the reduced axes, which the
            # values decide (read from this tensor's shape when the model runs)
            kept = tuple(d if d == 1 else ctx.space.fresh("ReduceLogSumExp kept size", 1, d if isinstance(d, int)
                                                          else None) for d in x.shape)
            m_kept = reduce_over(ctx, node, x, inputs[1], attrs, "REDUCE_MAX", keep=True, shape=kept)
            ctx.anchor(m_kept)
            m = _finite_or_zero(ctx, m)
        m_kept = _finite_or_zero(ctx, m_kept)
        if keep:
            m = m_kept
        e = exact.exp(ctx, ctx.emit("SUB", [x, m_kept], like=x, fused_activation_function="NONE"))
        s = reduce_over(ctx, node, e, inputs[1], attrs, "SUM")
        return _add(ctx, exact.log(ctx, s), m)
    axes = _static_axes(ctx, x, inputs, attrs)
    if axes is None:
        return x
    m = _finite_or_zero(ctx, _reduce_static(ctx, node, x, axes, "REDUCE_MAX", True))
    e = exact.exp(ctx, ctx.emit("SUB", [x, m], like=x, fused_activation_function="NONE"))
    s = _reduce_static(ctx, node, e, axes, "SUM", keep)
    return _add(ctx, exact.log(ctx, s), ctx.reshape(m, s.shape))


@onnx_op("ReduceLogSumExp", parameters={1})
def reduce_log_sum_exp(ctx, node, inputs, attrs) -> ir.Tensor:
    """ReduceLogSumExp (opsets 13-28).

    m + log(sum(exp(x - m))) over the constant axes, m the largest value of each reduced slice (0 where it is
    infinite): REDUCE_MAX, SUB, EXP, SUM and LOG."""
    return _log_sum_exp(ctx, node, inputs, attrs, False)


@runtime_shaped("ReduceLogSumExp", inputs={1}, shapes=_reduce_shapes,
                doc="REDUCE_MAX, SUB, EXP, SUM and LOG over the run-time axes")
def reduce_log_sum_exp_run_time(ctx, node, inputs, attrs) -> ir.Tensor:
    """ReduceLogSumExp over axes computed at run time."""
    return _log_sum_exp(ctx, node, inputs, attrs, True)


# ---- scans -------------------------------------------------------------------------------------------------
def _scan_axis(ctx, node, x, axis) -> ir.Tensor | int:
    """The scan axis: an int when it is a constant, else the int32 [] tensor."""
    if isinstance(axis, ir.Tensor) and not axis.is_constant:
        if axis.size != 1:
            raise ctx.fail(f"{node.op_type} axis must hold one value")
        return ctx.reshape(ctx.cast(axis, np.int32), [])
    value = int(scalar(axis, ctx, f"{node.op_type} axis"))
    if not -max(x.rank, 1) <= value < max(x.rank, 1):
        raise ctx.fail(f"{node.op_type} axis {value} is out of range for a rank-{x.rank} input")
    return value % max(x.rank, 1)


@onnx_op("CumSum")
def cumsum(ctx, node, inputs, attrs) -> ir.Tensor:
    """CumSum (opsets 13-28).

    CUMSUM, whose exclusive and reverse options are ONNX's; the axis a constant or a run-time value."""
    x = inputs[0]
    axis = _scan_axis(ctx, node, x, inputs[1])
    if x.dtype not in (np.float32, np.float64, np.int32, np.int64):
        raise ctx.fail(f"CumSum of {x.dtype} values has no lowering (LiteRT's CUMSUM takes float32, int32, int64; "
                       "float64 is computed in float32)")
    axis_t = axis if isinstance(axis, ir.Tensor) else ctx.const(np.array(axis, np.int32), name="axis")
    return ctx.emit("CUMSUM", [x, axis_t], like=x, exclusive=bool(attrs.get("exclusive", 0)),
                    reverse=bool(attrs.get("reverse", 0)))


@onnx_op("CumProd")
def cumprod(ctx, node, inputs, attrs) -> ir.Tensor:
    """CumProd (opsets 26-28).

    The running product by log2(n) doubling steps of MUL with a shifted copy; exclusive starts from 1,
    reverse runs from the end. An axis computed at run time selects among the products along every axis."""
    x = inputs[0]
    if x.dtype not in (np.float16, np.float32, np.float64, np.int32, np.int64):
        raise ctx.fail(f"CumProd of {x.dtype} values has no lowering")
    if x.rank == 0:
        raise ctx.fail("CumProd of a scalar is not defined")
    exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
    axis = _scan_axis(ctx, node, x, inputs[1])
    if not isinstance(axis, ir.Tensor):
        return cumprod_along(ctx, x, axis, exclusive, reverse)
    # a run-time axis (-rank..rank-1): the product along each axis, the one it names chosen by SELECT_V2
    normalized = ctx.emit("FLOOR_MOD", [axis, ctx.const(np.array(x.rank, np.int32), name="rank")], (), np.int32)
    result = None
    for a in range(x.rank):
        y = cumprod_along(ctx, x, a, exclusive, reverse)
        if result is None:
            result = y
            continue
        chosen = ctx.emit("EQUAL", [normalized, ctx.const(np.array(a, np.int32), name="axis")], (), np.bool_)
        result = ctx.emit("SELECT_V2", [chosen, y, result], like=y)
    if result is None:
        raise ctx.fail(f"{node.op_type} of a scalar")
    return result


# ---- TopK, Hardmax -----------------------------------------------------------------------------------------
def _topk_attrs(ctx, node, x, attrs):
    axis = int(attrs.get("axis", -1))
    if not -x.rank <= axis < x.rank:
        raise ctx.fail(f"TopK axis {axis} is out of range for a rank-{x.rank} input")
    return axis % x.rank, bool(attrs.get("largest", 1))


@onnx_op("TopK", parameters=[1])
def topk(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor]:
    """TopK (opsets 13-28).

    as aten.topk (largest or smallest, sorted; equal values in index order)."""
    x = inputs[0]
    axis, largest = _topk_attrs(ctx, node, x, attrs)
    k = int(scalar(inputs[1], ctx, "TopK K"))
    return aten_fn(aten.topk.default)(ctx, node, x, k, axis, largest, True)


def _topk_shapes(inputs, attrs, n, runtime, fresh):
    x = tuple(inputs[0].shape) if hasattr(inputs[0], "shape") else tuple(inputs[0])
    axis = int(attrs.get("axis", -1)) % max(len(x), 1)
    d = x[axis]
    k = fresh("top-k size", 0, d if isinstance(d, int) else None)
    shape = x[:axis] + (k,) + x[axis + 1:]
    return [shape, shape]


@runtime_shaped("TopK", inputs={1}, shapes=_topk_shapes)
def topk_run_time(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor]:
    """TOPK_V2 with K read at run time, over the axis moved last (and back)."""
    x = inputs[0]
    axis, largest = _topk_attrs(ctx, node, x, attrs)
    k = ctx.reshape(ctx.cast(inputs[1], np.int32), [])
    values, indices = topk_last_axis(ctx, x, axis, k, node.outputs[0].shape[axis], largest)
    return values, ctx.cast(indices, numpy_dtype(node.outputs[1].dtype))


@onnx_op("Hardmax")
def hardmax(ctx, node, inputs, attrs) -> ir.Tensor:
    """Hardmax (opsets 13-28).

    1 at the first largest value along `axis`, 0 elsewhere: ARG_MAX, then EQUAL with the positions."""
    x = inputs[0]
    axis = int(attrs.get("axis", -1)) % max(x.rank, 1)
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ctx.fail("Hardmax along a dynamic axis has no lowering")
    reduced = [d for i, d in enumerate(x.shape) if i != axis]
    best = ctx.emit("ARG_MAX", [x, ctx.const(np.array([axis], np.int32), name="axis")], reduced, np.int32,
                    output_type="INT32")
    best = ctx.reshape(best, [1 if i == axis else d for i, d in enumerate(x.shape)])
    positions = np.arange(n, dtype=np.int32).reshape([n if i == axis else 1 for i in range(x.rank)])
    hit = ctx.emit("EQUAL", [best, ctx.const(positions, name="positions")], x.shape, np.bool_)
    return ctx.cast(hit, x.dtype)


# ---- normalisation and layout ------------------------------------------------------------------------------
@onnx_op("LpNormalization")
def lp_normalization(ctx, node, inputs, attrs) -> ir.Tensor:
    """LpNormalization (opsets 13-28).

    x / ||x||_p along `axis` (p = 1: SUM of ABS; p = 2: SQRT of the SUM of squares); 0 where the norm is 0,
    as ONNX's reference gives."""
    x = inputs[0]
    _float_only(ctx, node, x)
    axis = int(attrs.get("axis", -1)) % max(x.rank, 1)
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise ctx.fail(f"LpNormalization p={p} is not defined (ONNX takes 1 or 2)")
    t = _abs(ctx, x) if p == 1 else _square(ctx, x)
    norm = _reduce_static(ctx, node, t, [axis], "SUM", True)
    if p == 2:
        norm = exact.sqrt(ctx, norm)
    zero = ctx.emit("EQUAL", [norm, _scalar(ctx, 0, norm)], norm.shape, np.bool_)
    y = ctx.emit("DIV", [x, norm], like=x, fused_activation_function="NONE")
    return ctx.emit("SELECT_V2", [zero, _scalar(ctx, 0, x), y], like=x)


@onnx_op("SpaceToDepth")
def space_to_depth(ctx, node, inputs, attrs) -> ir.Tensor:
    """SpaceToDepth (opsets 13-28).

    DCR mode (ONNX's default, channel order (r1, r2, c), TFLite's) as SPACE_TO_DEPTH between NHWC
    transposes; CRD mode (order (c, r1, r2)) as aten.pixel_unshuffle."""
    x, r = inputs[0], int(attrs["blocksize"])
    if x.rank != 4:
        raise ctx.fail("SpaceToDepth of a tensor that is not 4-D is not defined")
    mode = attrs.get("mode", "DCR")
    if mode == "CRD":
        return aten_fn(aten.pixel_unshuffle.default)(ctx, node, x, r)
    if mode != "DCR":
        raise ctx.fail(f"SpaceToDepth mode {mode!r} is not one ONNX defines")
    n, c, h, w = out_shape(node)
    y = ctx.emit("SPACE_TO_DEPTH", [ctx.transpose(x, (0, 2, 3, 1))], (n, h, w, c), x.dtype, block_size=r)
    return ctx.transpose(y, (0, 3, 1, 2))


# ---- scatter -----------------------------------------------------------------------------------------------
def _reduction_mode(ctx, node, attrs) -> str:
    """"set", "add", or the product / maximum / minimum of lower/aten/scatter.py ("prod", "amax", "amin")."""
    reduction = attrs.get("reduction", "none")
    mode = {"none": "set", "add": "add", "mul": "prod", "max": "amax", "min": "amin"}.get(reduction)
    if mode is None:
        raise ctx.fail(f"{node.op_type} with reduction={reduction!r} is not one ONNX defines "
                       "(none, add, mul, max, min)")
    return mode


@onnx_op("ScatterElements")
def scatter_elements(ctx, node, inputs, attrs) -> ir.Tensor:
    """ScatterElements (opsets 13-28).

    as aten.scatter / scatter_add / scatter_reduce (with x's own values) along `axis` (lower/aten/scatter.py)."""
    x, index, updates = inputs[0], operand(ctx, inputs[1]), operand(ctx, inputs[2])
    axis = int(attrs.get("axis", 0)) % max(x.rank, 1)
    mode = _reduction_mode(ctx, node, attrs)
    if any(d == 0 for d in index.shape):
        return x
    if mode in ("prod", "amax", "amin"):
        return scatter.scatter_grouped(ctx, x, axis, index, updates, mode, True)
    return scatter.write(ctx, x, scatter.along_axis(ctx, x, axis, index), updates, mode)


@onnx_op("ScatterND")
def scatter_nd(ctx, node, inputs, attrs) -> ir.Tensor:
    """ScatterND (opsets 13-28).

    SCATTER_ND of the updates at the index tuples (each naming a slice of the leading axes), added to x,
    written over it, or multiplied / maximised / minimised with it (lower/aten/scatter.py)."""
    x, index, updates = inputs[0], operand(ctx, inputs[1]), operand(ctx, inputs[2])
    mode = _reduction_mode(ctx, node, attrs)
    k = int(index.shape[-1])
    if not all_static([*x.shape, *index.shape]) or k > x.rank:
        raise ctx.fail(f"ScatterND with indices {list(index.shape)} into a tensor {list(x.shape)}")
    if any(d == 0 for d in index.shape[:-1]):
        return x
    columns = []
    for axis in range(k):
        lead = [int(d) for d in index.shape[:-1]]
        column = ctx.reshape(ctx.slice(index, [0] * index.rank, [*lead, 1]) if axis == 0 else
                             ctx.slice(index, [0] * (index.rank - 1) + [axis], [*lead, 1]), lead)
        columns.append(scatter.wrapped(ctx, column, int(x.shape[axis])))
    coords = scatter._stack(ctx, columns, [int(d) for d in index.shape[:-1]])
    if mode in ("prod", "amax", "amin"):
        return scatter.nd_grouped(ctx, x, coords, columns, updates, mode)
    return scatter.write(ctx, x, coords, updates, mode)


# ---- losses ------------------------------------------------------------------------------------------------
def _nll(ctx, node, log_prob: ir.Tensor, target: ir.Tensor, weight, attrs) -> ir.Tensor:
    """-log_prob[n, target[n, ...], ...] * weight[target], 0 where the target is ignore_index, reduced as
    `reduction` says (mean: divided by the sum of the weights of the targets not ignored). The class picked
    by SELECT_V2 of a one-hot mask, so an infinite log-probability of another class never meets a 0 weight."""
    reduction = attrs.get("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.fail(f"{node.op_type} reduction={reduction!r} is not one ONNX defines")
    x = log_prob
    if x.rank < 2 or target.rank != x.rank - 1 or not all_static([*x.shape, *target.shape]):
        raise ctx.fail(f"{node.op_type} of an input {list(x.shape)} with targets {list(target.shape)}")
    out_shape_ = [int(d) for d in target.shape]
    if x.rank > 3:  # the positions flattened to one axis: every kernel then takes the rank
        x = _flat_positions(ctx, x)
        target = ctx.reshape(target, [out_shape_[0], int(np.prod(out_shape_[1:], dtype=np.int64))])
    c = int(x.shape[1])
    per = [int(target.shape[0]), 1, *(int(d) for d in target.shape[1:])]  # target with the class axis
    labels = ctx.reshape(ctx.cast(target, np.int32), per)
    classes = ctx.const(np.arange(c, dtype=np.int32).reshape([1, c] + [1] * (x.rank - 2)), name="classes")
    hot = ctx.emit("EQUAL", [labels, classes], x.shape, np.bool_)
    axis = ctx.const(np.array([1], np.int32), name="class_axis")
    zero = ctx.scalar_like(0, x)
    picked = ctx.emit("SUM", [ctx.emit("SELECT_V2", [hot, x, zero], x.shape, x.dtype), axis], per, x.dtype,
                      keep_dims=True)
    if weight is not None:
        w = ctx.reshape(ctx.cast(tensor(ctx, weight), x.dtype), [1, c] + [1] * (x.rank - 2))
        w_t = ctx.emit("SUM", [ctx.emit("SELECT_V2", [hot, w, zero], x.shape, x.dtype), axis], per, x.dtype,
                       keep_dims=True)
    else:
        w_t = ctx.cast(ctx.emit("REDUCE_ANY", [hot, axis], per, np.bool_, keep_dims=True), x.dtype)
    if "ignore_index" in attrs:
        kept = ctx.emit("NOT_EQUAL", [labels, ctx.const(np.array(int(attrs["ignore_index"]), np.int32),
                                                        name="ignore_index")], per, np.bool_)
        w_t = ctx.emit("SELECT_V2", [kept, w_t, zero], per, x.dtype)
    loss = ctx.emit("MUL", [ctx.emit("NEG", [picked], per, x.dtype), w_t], per, x.dtype,
                    fused_activation_function="NONE")
    loss = ctx.reshape(loss, [int(d) for d in target.shape])
    if reduction == "none":
        return ctx.reshape(loss, out_shape_)
    every = ctx.const(np.arange(loss.rank, dtype=np.int32), name="axes")
    total = ctx.emit("SUM", [loss, every], (), x.dtype, keep_dims=False)
    if reduction == "sum":
        return total
    count = ctx.emit("SUM", [ctx.reshape(w_t, [int(d) for d in target.shape]), every], (), x.dtype, keep_dims=False)
    return ctx.emit("DIV", [total, count], (), x.dtype, fused_activation_function="NONE")


@onnx_op("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(ctx, node, inputs, attrs) -> ir.Tensor:
    """NegativeLogLikelihoodLoss (opsets 13-28).

    The negative log-likelihood of each target class (with its weight, ignore_index), reduced by none,
    sum or mean."""
    weight = inputs[2] if len(inputs) > 2 else None
    return _nll(ctx, node, inputs[0], operand(ctx, inputs[1]), weight, attrs)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx, node, inputs, attrs) -> tuple[ir.Tensor, ir.Tensor | None]:
    """SoftmaxCrossEntropyLoss (opsets 13-28).

    LOG_SOFTMAX over the class axis (moved last and back), then the negative log-likelihood loss; the
    log-probabilities are the second output."""
    scores = inputs[0]
    weight = inputs[2] if len(inputs) > 2 else None
    if scores.rank < 2:
        raise ctx.fail(f"SoftmaxCrossEntropyLoss of scores {list(scores.shape)} (they need a class axis)")
    flat = _flat_positions(ctx, scores) if scores.rank > 3 else scores
    log_prob = aten_fn(aten._log_softmax.default)(ctx, sub(node, tuple(flat.shape), scores.dtype), flat, 1, False)
    target = operand(ctx, inputs[1])
    if scores.rank > 3:
        target = ctx.reshape(target, [int(d) for d in flat.shape[:1] + flat.shape[2:]])
    loss = _nll(ctx, node, log_prob, target, weight, attrs)
    if scores.rank > 3 and loss.rank:
        loss = ctx.reshape(loss, [int(d) for d in inputs[1].shape])
    return loss, (ctx.reshape(log_prob, [int(d) for d in scores.shape]) if 1 in node.used else None)


def _flat_positions(ctx, x: ir.Tensor) -> ir.Tensor:
    """[N, C, d1, ..., dk] as [N, C, d1 * ... * dk]."""
    n, c, *rest = (int(d) for d in x.shape)
    return ctx.reshape(x, [n, c, int(np.prod(rest, dtype=np.int64))])


# ---- sizes decided by values ----------------------------------------------------------------------------------
def _count_of(x: Any, fresh) -> Any:
    total = 1
    for d in x:
        total = total * d
    return fresh("count", 0, total if isinstance(total, int) else None)


def _nonzero_shapes(inputs, attrs, n, runtime, fresh):
    x = tuple(inputs[0].shape) if hasattr(inputs[0], "shape") else tuple(inputs[0])
    return [(len(x), _count_of(x, fresh))]


def _counts(ctx: LoweringContext, *sizes: Any) -> None:
    """Mark sizes as counts of true elements: 0 when nothing is selected, kept away from kernels that cannot
    take empty tensors (`LoweringContext.emit`)."""
    for d in sizes:
        if isinstance(d, Sym):
            ctx.space.counts.update(d.symbols & ctx.space.unbacked)


@onnx_op("NonZero")
@runtime_shaped("NonZero", inputs={0}, shapes=_nonzero_shapes)
def nonzero(ctx, node, inputs, attrs) -> ir.Tensor:
    """NonZero (opsets 13-28).

    The coordinates of the nonzero elements, one column each in row-major order ([rank, count]), their count
    decided when the model runs: WHERE, transposed."""
    x = operand(ctx, inputs[0])
    rank, count = node.outputs[0].shape
    _counts(ctx, count)
    coords = nonzero_coords(ctx, truth(ctx, x), count)
    return ctx.cast(ctx.transpose(coords, [1, 0]), numpy_dtype(node.outputs[0].dtype))


def _compress_shapes(inputs, attrs, n, runtime, fresh):
    x = tuple(inputs[0].shape) if hasattr(inputs[0], "shape") else tuple(inputs[0])
    c = tuple(inputs[1].shape) if hasattr(inputs[1], "shape") else tuple(inputs[1])
    if "axis" not in attrs:
        return [(_count_of(c, fresh),)]
    axis = int(attrs["axis"]) % len(x)
    return [x[:axis] + (_count_of(c, fresh),) + x[axis + 1:]]


@onnx_op("Compress")
@runtime_shaped("Compress", inputs={1}, shapes=_compress_shapes)
def compress(ctx, node, inputs, attrs) -> ir.Tensor:
    """Compress (opsets 13-28).

    The slices of the input (flattened without `axis`) where the 1-D condition is true, their count decided
    when the model runs: WHERE of the condition, then GATHER. A condition shorter than the axis selects among
    the first slices only, as ONNX defines it."""
    x, cond = operand(ctx, inputs[0]), operand(ctx, inputs[1])
    shape = node.outputs[0].shape
    if "axis" not in attrs:
        total = 1
        for d in x.shape:
            total = total * d
        x, axis = ctx.reshape(x, [total]), 0
    else:
        axis = int(attrs["axis"]) % x.rank
    count = shape[axis]
    _counts(ctx, count)
    if cond.rank != 1:
        raise ctx.fail("Compress with a condition of rank other than 1 has no lowering")
    picked = ctx.reshape(nonzero_coords(ctx, ctx.cast(cond, np.bool_), count), [count])
    return ctx.emit("GATHER", [x, picked], shape, x.dtype, axis=axis, batch_dims=0)
