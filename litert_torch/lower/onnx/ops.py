"""ONNX op lowerings: each maps an ONNX node onto the ATen lowering that computes the same thing, so the two
frontends share one implementation per op (`fn(ctx, node, inputs, attrs)`; `node` carries the output shapes
from ONNX shape inference, as `litert_torch.node` describes). Constant inputs arrive as numpy arrays.

Each op is registered once, with what the driver needs to know of it (`registry.OnnxOp`).
"""

from __future__ import annotations


from typing import Literal

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.aten import elementwise
from litert_torch.lower.common import exact
from litert_torch.lower.onnx import (  # noqa: F401 (register their ops)
    attention, math_ops, movement, qdq, resize, rnn, window,
)
from litert_torch.lower.onnx.registry import (
    OnnxFn, aten_fn, const_list, onnx_op, operand, out_shape, scalar, sub, tensor,
)
from litert_torch.symbolic import all_static

aten = torch.ops.aten


# ---- element-wise ------------------------------------------------------------------------------------------
_UNARY = {
    "Relu": aten.relu.default, "Sigmoid": aten.sigmoid.default, "Tanh": aten.tanh.default, "Exp": aten.exp.default,
    "Log": aten.log.default, "Sqrt": aten.sqrt.default, "Neg": aten.neg.default, "Abs": aten.abs.default,
    "Floor": aten.floor.default, "Ceil": aten.ceil.default, "Sin": aten.sin.default, "Cos": aten.cos.default,
    "Erf": aten.erf.default, "Reciprocal": aten.reciprocal.default,
    "HardSwish": aten.hardswish.default, "Not": aten.logical_not.default, "Round": aten.round.default,
    "Acos": aten.acos.default, "Asin": aten.asin.default, "Atan": aten.atan.default, "Acosh": aten.acosh.default,
    "Asinh": aten.asinh.default, "Atanh": aten.atanh.default, "Tan": aten.tan.default, "Sinh": aten.sinh.default,
    "Cosh": aten.cosh.default,
}


# Unary ops that cannot leave the uint16 range.
_UINT16_IN_RANGE = {"Relu", "Abs"}


def _unary(target) -> OnnxFn:
    def lower(ctx, node, inputs, attrs) -> ir.Tensor:
        return aten_fn(target)(ctx, node, inputs[0])
    return lower


# The opsets each lowering implements, where they are not 13 (the oldest the driver reads) to 28.
_UNARY_OPSETS = {"HardSwish": "14-28"}
for _name, _target in _UNARY.items():
    onnx_op(_name, doc=f"{_name} (opsets {_UNARY_OPSETS.get(_name, '13-28')}).\n\nas {_target}", same_shape=True,
            uint16_in_range=_name in _UINT16_IN_RANGE)(_unary(_target))


@onnx_op("Sign", same_shape=True)
def sign(ctx, node, inputs, attrs) -> ir.Tensor:
    """Sign (opsets 13-28).

    SIGN (NaN stays NaN, as ONNX's reference gives; PyTorch's sign gives 0 there)."""
    return ctx.emit("SIGN", [inputs[0]], like=inputs[0])


@onnx_op("Identity", same_shape=True, uint16_in_range=True, uint32="bits")
@onnx_op("Dropout")
def identity(ctx, node, inputs, attrs) -> ir.Tensor | tuple[ir.Tensor, ir.Tensor | None]:
    """Identity, Dropout (opsets 13-28).

    The input itself (Dropout in inference: its mask all true)."""
    if node.op_type != "Dropout":
        return inputs[0]
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None and (not isinstance(training, ir.Tensor) or not training.is_constant
                                 or np.asarray(training.data).any()):
        raise ctx.fail("Dropout in training mode has no lowering (it is random)")
    mask = None
    if 1 in node.used:
        shape = node.outputs[1].shape
        if not all_static(shape):
            raise ctx.fail("Dropout's mask of a dynamic shape has no lowering yet")
        mask = ctx.const(np.ones(shape, np.bool_), name="mask")
    return inputs[0], mask


@onnx_op("LeakyRelu", same_shape=True)
def leaky_relu(ctx, node, inputs, attrs) -> ir.Tensor:
    """LeakyRelu (opsets 13-28).

    as aten.leaky_relu (alpha)."""
    return aten_fn(aten.leaky_relu.default)(ctx, node, inputs[0], attrs.get("alpha", 0.01))


@onnx_op("Elu", same_shape=True)
def elu(ctx, node, inputs, attrs) -> ir.Tensor:
    """Elu (opsets 13-28).

    as aten.elu (alpha)."""
    return aten_fn(aten.elu.default)(ctx, node, inputs[0], attrs.get("alpha", 1.0))


@onnx_op("Gelu", same_shape=True)
def gelu(ctx, node, inputs, attrs) -> ir.Tensor:
    """Gelu (opsets 20-28).

    as aten.gelu (approximate none or tanh)."""
    return aten_fn(aten.gelu.default)(ctx, node, inputs[0], attrs.get("approximate", "none"))


@onnx_op("HardSigmoid", same_shape=True)
def hard_sigmoid(ctx, node, inputs, attrs) -> ir.Tensor:
    """HardSigmoid (opsets 13-28).

    as aten.hardsigmoid for alpha 1/6, beta 0.5; otherwise clamp(alpha * x + beta, 0, 1)."""
    alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
    x = inputs[0]
    if abs(alpha - 1 / 6) < 1e-7 and beta == 0.5:
        return aten_fn(aten.hardsigmoid.default)(ctx, node, x)
    y = ctx.emit("ADD", [ctx.emit("MUL", [x, ctx.scalar_like(alpha, x)], like=x), ctx.scalar_like(beta, x)], like=x)
    return aten_fn(aten.clamp.default)(ctx, node, y, 0.0, 1.0)


@onnx_op("Clip", parameters=[1, 2], runtime_parameters=[1, 2], same_shape=True)
def clip(ctx, node, inputs, attrs) -> ir.Tensor:
    """Clip (opsets 13-28).

    as aten.clamp (bounds are inputs since opset 11; bounds known only at run time as aten.clamp.Tensor)."""
    bounds = [inputs[k] if len(inputs) > k else None for k in (1, 2)]
    if any(isinstance(b, ir.Tensor) and not b.is_constant for b in bounds):  # bounds known only at run time
        return aten_fn(aten.clamp.Tensor)(ctx, node, inputs[0], *bounds)
    lo, hi = (scalar(b, ctx, what) if b is not None else None for b, what in zip(bounds, ("Clip min", "Clip max")))
    return aten_fn(aten.clamp.default)(ctx, node, inputs[0], lo, hi)


@onnx_op("PRelu")
def prelu(ctx, node, inputs, attrs) -> ir.Tensor:
    """PRelu (opsets 13-28).

    as aten.prelu (slope broadcast over the channel axis)."""
    x, slope = inputs
    if slope.is_constant and slope.size == (x.shape[1] if x.rank > 1 else 1):
        slope = ctx.const(np.asarray(slope.data).reshape(-1))
        return aten_fn(aten.prelu.default)(ctx, node, x, slope)
    return ctx.emit("PRELU", [x, slope], like=x)


_BINARY = {"Add": aten.add.Tensor, "Sub": aten.sub.Tensor, "Mul": aten.mul.Tensor, "Max": aten.maximum.default,
           "Min": aten.minimum.default, "Equal": aten.eq.Tensor, "Less": aten.lt.Tensor, "Greater": aten.gt.Tensor,
           "LessOrEqual": aten.le.Tensor, "GreaterOrEqual": aten.ge.Tensor, "And": aten.logical_and.default,
           "Or": aten.logical_or.default}


def _binary(target) -> OnnxFn:
    def lower(ctx, node, inputs, attrs) -> ir.Tensor:
        result = inputs[0]
        for other in inputs[1:]:  # Max/Min/Sum take any number of inputs
            result = aten_fn(target)(ctx, node, result, other)
        return result
    return lower


# How each binary op reads unsigned values: uint16 results that cannot leave its range, uint32 bit patterns read
# as they are, or ordered with the top bit flipped (registry.OnnxOp).
_UINT16_IN_RANGE_BINARY = {"Max", "Min"}
_UINT32: dict[str, Literal["bits", "ordered"]] = {
    "Add": "bits", "Sub": "bits", "Mul": "bits", "Equal": "bits", "Less": "ordered", "Greater": "ordered",
    "LessOrEqual": "ordered", "GreaterOrEqual": "ordered", "Max": "ordered", "Min": "ordered"}
for _name, _target in _BINARY.items():
    onnx_op(_name, doc=f"{_name} (opsets 13-28).\n\nas {_target}, broadcasting",
            uint16_in_range=_name in _UINT16_IN_RANGE_BINARY, uint32=_UINT32.get(_name))(_binary(_target))
onnx_op("Sum", doc="Sum (opsets 13-28).\n\nas aten.add, pairwise")(_binary(aten.add.Tensor))


@onnx_op("Div", uint16_in_range=True)
def div(ctx, node, inputs, attrs) -> ir.Tensor:
    """Div (opsets 13-28).

    as aten.div; integer division truncates, as ONNX defines it."""
    a, b = inputs
    if node.value.dtype.is_floating_point:
        return aten_fn(aten.div.Tensor)(ctx, node, a, b)
    return aten_fn(aten.div.Tensor_mode)(ctx, node, a, b, rounding_mode="trunc")


@onnx_op("Pow")
def power(ctx, node, inputs, attrs) -> ir.Tensor:
    """Pow (opsets 13-28).

    as aten.pow: a constant scalar exponent takes the exact forms (MUL, SQRT, ...)."""
    x, e = inputs
    if isinstance(e, ir.Tensor) and e.is_constant and e.size == 1:
        return aten_fn(aten.pow.Tensor_Scalar)(ctx, node, x, float(np.asarray(e.data).reshape(-1)[0]))
    return aten_fn(aten.pow.Tensor_Tensor)(ctx, node, x, e)


@onnx_op("Where", uint16_in_range=True, uint32="bits")
def where(ctx, node, inputs, attrs) -> ir.Tensor:
    """Where (opsets 13-28).

    as aten.where."""
    return aten_fn(aten.where.self)(ctx, node, *inputs)


@onnx_op("Cast", "CastLike")
def cast(ctx, node, inputs, attrs) -> ir.Tensor:
    """Cast (opsets 13-28); CastLike (opsets 15-28).

    as aten._to_copy to the target type (CastLike: the second input's type)."""
    return aten_fn(aten._to_copy.default)(ctx, node, inputs[0], dtype=node.value.dtype)


@onnx_op("Mod", uint16_in_range=True)
def mod(ctx, node, inputs, attrs) -> ir.Tensor:
    """Mod (opsets 13-28).

    fmod=0 (integers): as aten.remainder, the sign of the divisor; fmod=1: C's fmod, the sign of the
    dividend, exact for floats and integers (`elementwise.fmod`)."""
    a, b = (operand(ctx, v) for v in inputs)
    if not attrs.get("fmod", 0):
        return aten_fn(aten.remainder.Tensor)(ctx, node, a, b)
    return elementwise.fmod(ctx, a, b, out_shape(node))


@onnx_op("Trilu", parameters=[1], runtime_parameters=[1])
def trilu(ctx, node, inputs, attrs) -> ir.Tensor:
    """Trilu (opsets 14-28).

    SELECT_V2 of x and 0 by a mask of the kept triangle (j - i >= k above, <= k below): a constant, or computed
    when the model runs for a k known only then.

    Limits: static sizes on the last two axes."""
    x = inputs[0]
    k = inputs[1] if len(inputs) > 1 and inputs[1] is not None else 0
    rows, cols = x.shape[-2], x.shape[-1]
    if not isinstance(rows, int) or not isinstance(cols, int):
        raise ctx.fail("Trilu over dynamic sizes has no lowering yet")
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    upper = attrs.get("upper", 1)
    if isinstance(k, ir.Tensor) and not k.is_constant:  # k known only at run time: the mask is computed then
        offsets = ctx.const((j - i).astype(np.int32), name="offsets")
        keep = ctx.emit("GREATER_EQUAL" if upper else "LESS_EQUAL", [offsets, ctx.reshape(ctx.cast(k, np.int32), [])],
                        (rows, cols), np.bool_)
    else:
        k = scalar(k, ctx, "Trilu k") if not isinstance(k, int) else k
        keep = ctx.const((j - i >= k) if upper else (j - i <= k), name="triangle")
    return ctx.emit("SELECT_V2", [keep, x, ctx.scalar_like(0, x)], like=x)


@onnx_op("IsNaN")
def is_nan(ctx, node, inputs, attrs) -> ir.Tensor:
    """IsNaN (opsets 13-28).

    NOT_EQUAL(x, x): only NaN differs from itself."""
    x = inputs[0]
    return ctx.emit("NOT_EQUAL", [x, x], x.shape, np.bool_)


@onnx_op("IsInf")
def is_inf(ctx, node, inputs, attrs) -> ir.Tensor:
    """IsInf (opsets 13-28).

    EQUAL(ABS(x), inf), or the sign-restricted comparison when detect_negative/positive is off."""
    x = inputs[0]
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if pos and neg:
        return ctx.emit("EQUAL", [ctx.emit("ABS", [x], like=x), ctx.scalar_like(np.inf, x)], x.shape, np.bool_)
    value = np.inf if pos else -np.inf
    return ctx.emit("EQUAL", [x, ctx.scalar_like(value, x)], x.shape, np.bool_)



# ---- linear algebra ----------------------------------------------------------------------------------------
@onnx_op("MatMul")
def matmul(ctx, node, inputs, attrs) -> ir.Tensor:
    """MatMul (opsets 13-28).

    as aten.matmul."""
    return aten_fn(aten.matmul.default)(ctx, node, *inputs)


@onnx_op("Gemm")
def gemm(ctx, node, inputs, attrs) -> ir.Tensor:
    """Gemm (opsets 13-28).

    alpha * A' B' + beta * C as aten.linear (FULLY_CONNECTED) when B is constant, else a matmul."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if attrs.get("transA", 0):
        a = ctx.transpose(a, [1, 0])
    shape = out_shape(node)
    if b.is_constant:
        weight = np.asarray(b.data) if attrs.get("transB", 0) else np.asarray(b.data).T
        weight = weight * alpha if alpha != 1.0 else weight
        bias = None
        if c is not None:
            cv = np.asarray(c.data) * beta if c.is_constant else None
            if cv is not None and cv.ndim == 2 and cv.shape[1] == 1:
                cv = None  # one value per row: added after the product
            if cv is not None and cv.ndim == 2 and not np.all(cv == cv[:1]):
                cv = None
            if cv is not None:
                row = cv[0] if cv.ndim == 2 else cv
                bias = ctx.const(np.ascontiguousarray(np.broadcast_to(row, (shape[1],))).astype(np.float32))
            else:
                y = aten_fn(aten.linear.default)(ctx, sub(node, shape), a, ctx.const(weight.astype(np.float32)))
                scaled = c if beta == 1.0 else ctx.emit("MUL", [c, ctx.scalar_like(beta, c)], like=c)
                return ctx.emit("ADD", [y, scaled], shape, y.dtype)
        return aten_fn(aten.linear.default)(ctx, node, a, ctx.const(weight.astype(np.float32)), bias)
    if attrs.get("transB", 0):
        b = ctx.transpose(b, [1, 0])
    y = aten_fn(aten.mm.default)(ctx, sub(node, shape), a, b)
    if alpha != 1.0:
        y = ctx.emit("MUL", [y, ctx.scalar_like(alpha, y)], like=y)
    if c is not None:
        c = c if beta == 1.0 else ctx.emit("MUL", [tensor(ctx, c), ctx.scalar_like(beta, y)], like=tensor(ctx, c))
        y = ctx.emit("ADD", [y, tensor(ctx, c)], shape, y.dtype)
    return y


@onnx_op("Einsum")
def einsum(ctx, node, inputs, attrs) -> ir.Tensor:
    """Einsum (opsets 13-28).

    Einsum of one or two operands: indices only one operand has and the output lacks are summed out of it
    first (SUM); one operand is then a transpose; two are one BATCH_MATMUL between transposes and reshapes
    (indices in both operands and the output batch, in both but not the output contract, in one operand and
    the output stay). Without "->" the output is the indices that appear once, in alphabetical order.

    Limits: at most two operands, no ellipsis, no repeated index within an operand (diagonals)."""
    equation = attrs["equation"]
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) > 2 or "." in equation:
        raise ctx.fail(f"einsum {equation!r}: only one or two operands without an ellipsis are supported")
    if not arrow:
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    operands = [operand(ctx, v) for v in inputs[:len(terms)]]
    if any(len(set(t)) != len(t) for t in terms) or any(c not in lhs for c in out) or len(set(out)) != len(out):
        raise ctx.fail(f"einsum {equation!r}: repeated or unknown indices have no lowering")
    for k, term in enumerate(terms):
        others = "".join(terms[:k] + terms[k + 1:]) + out
        lone = [i for i, c in enumerate(term) if c not in others]
        if lone:
            kept = [d for i, d in enumerate(operands[k].shape) if i not in lone]
            operands[k] = ctx.emit("SUM", [operands[k], ctx.const(np.array(lone, np.int32), name="axes")], kept,
                                   operands[k].dtype, keep_dims=False)
            terms[k] = "".join(c for i, c in enumerate(term) if i not in lone)
    if len(terms) == 1:
        return ctx.transpose(operands[0], [terms[0].index(c) for c in out])
    (ta, tb), (a, b) = terms, operands
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]
    size = {**dict(zip(ta, a.shape)), **dict(zip(tb, b.shape))}
    prod = lambda cs: int(np.prod([size[c] for c in cs], dtype=np.int64))  # noqa: E731
    a3 = ctx.reshape(ctx.transpose(a, [ta.index(c) for c in batch + left + contract]),
                     [prod(batch), prod(left), prod(contract)])
    b3 = ctx.reshape(ctx.transpose(b, [tb.index(c) for c in batch + contract + right]),
                     [prod(batch), prod(contract), prod(right)])
    y = ctx.emit("BATCH_MATMUL", [a3, b3], [prod(batch), prod(left), prod(right)], a.dtype, adj_x=False, adj_y=False,
                 asymmetric_quantize_inputs=False)
    order = batch + left + right
    y = ctx.reshape(y, [size[c] for c in order])
    return ctx.transpose(y, [order.index(c) for c in out])


# ---- normalisation ------------------------------------------------------------------------------------------
@onnx_op("BatchNormalization", same_shape=True)
def batch_norm(ctx, node, inputs, attrs) -> ir.Tensor | tuple[ir.Tensor | None, ...]:
    """BatchNormalization (opsets 13-28).

    as aten._native_batch_norm_legit_no_training (constant statistics, folded into x * scale + shift);
    statistics fed at run time as (x - mean) * rsqrt(var + epsilon) * scale + B; training_mode normalizes by the
    batch's own mean and (population) variance and outputs the running statistics momentum updates."""
    x, scale, bias, mean, var = inputs[:5]
    params = [scale, bias, mean, var]
    if attrs.get("training_mode", 0) or any(isinstance(v, ir.Tensor) and not v.is_constant for v in params):
        return _batch_norm_computed(ctx, node, x, [tensor(ctx, v) for v in params], attrs)
    fn = aten_fn(aten._native_batch_norm_legit_no_training.default)
    y = fn(ctx, sub(node, out_shape(node), x.dtype), x, tensor(ctx, scale), tensor(ctx, bias), tensor(ctx, mean),
           tensor(ctx, var), 0.1, attrs.get("epsilon", 1e-5))
    return y[0] if isinstance(y, (tuple, list)) else y


def _batch_norm_computed(ctx, node, x, params, attrs) -> ir.Tensor | tuple[ir.Tensor | None, ...]:
    scale, bias, mean, var = params
    if x.dtype.kind != "f":
        raise ctx.fail("BatchNormalization of integers is not defined")
    channels = x.shape[1]
    per_channel = (1, channels) + (1,) * (x.rank - 2)

    def binary(opcode, a, b, shape=None):
        opts = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL") else {}
        return ctx.emit(opcode, [a, b], x.shape if shape is None else shape, x.dtype, **opts)

    def channel(v):
        return ctx.reshape(ctx.cast(v, x.dtype), per_channel)

    eps = ctx.const(np.array(attrs.get("epsilon", 1e-5), x.dtype), name="epsilon")
    training = bool(attrs.get("training_mode", 0))
    if training:
        axes = ctx.const(np.array([0, *range(2, x.rank)], np.int32), name="axes")
        batch_mean = ctx.emit("MEAN", [x, axes], per_channel, x.dtype, keep_dims=True)
        centered = binary("SUB", x, batch_mean)
        batch_var = ctx.emit("MEAN", [binary("MUL", centered, centered), axes], per_channel, x.dtype, keep_dims=True)
        inv_std = ctx.emit("RSQRT", [binary("ADD", batch_var, eps, per_channel)], per_channel, x.dtype)
    else:
        centered = binary("SUB", x, channel(mean))
        inv_std = ctx.emit("RSQRT", [binary("ADD", channel(var), eps, per_channel)], per_channel, x.dtype)
    y = binary("ADD", binary("MUL", binary("MUL", centered, inv_std), channel(scale)), channel(bias))
    if not training:
        return y
    momentum = float(attrs.get("momentum", 0.9))

    def running(old, batch):
        old = ctx.cast(old, x.dtype)
        keep = binary("MUL", old, ctx.const(np.array(momentum, x.dtype), name="momentum"), (channels,))
        new = binary("MUL", ctx.reshape(batch, (channels,)), ctx.const(np.array(1 - momentum, x.dtype),
                                                                         name="complement"), (channels,))
        return binary("ADD", keep, new, (channels,))

    outs = [y]
    if 1 in node.used:
        outs.append(running(mean, batch_mean))
    else:
        outs.append(None)
    if 2 in node.used:
        outs.append(running(var, batch_var))
    else:
        outs.append(None)
    return tuple(outs)


@onnx_op("InstanceNormalization", same_shape=True)
def instance_norm(ctx, node, inputs, attrs) -> ir.Tensor:
    """InstanceNormalization (opsets 13-28).

    as aten.instance_norm with the input's own statistics."""
    x, scale, bias = inputs
    return aten_fn(aten.instance_norm.default)(ctx, node, x, tensor(ctx, scale), tensor(ctx, bias), None, None, True,
                                               0.1, attrs.get("epsilon", 1e-5), False)


@onnx_op("LayerNormalization", same_shape=True)
def layer_norm(ctx, node, inputs, attrs) -> ir.Tensor | tuple[ir.Tensor, ir.Tensor | None, ir.Tensor | None]:
    """LayerNormalization (opsets 17-28).

    as aten.layer_norm over the axes from `axis` on."""
    x = inputs[0]
    scale = tensor(ctx, inputs[1]) if len(inputs) > 1 else None
    bias = tensor(ctx, inputs[2]) if len(inputs) > 2 else None
    axis = attrs.get("axis", -1) % x.rank
    eps = attrs.get("epsilon", 1e-5)
    if node.single:
        return aten_fn(aten.layer_norm.default)(ctx, node, x, list(x.shape[axis:]), scale, bias, eps)
    y = aten_fn(aten.layer_norm.default)(ctx, sub(node, out_shape(node), x.dtype), x, list(x.shape[axis:]), scale,
                                         bias, eps)
    if not node.used & {1, 2}:
        return y
    if x.dtype != np.float32:
        raise ctx.fail("LayerNormalization's Mean and InvStdDev outputs of a non-float32 input have no lowering yet")
    axes = ctx.const(np.arange(axis, x.rank, dtype=np.int32), name="axes")
    stats = tuple(x.shape[:axis]) + (1,) * (x.rank - axis)
    mean = ctx.emit("MEAN", [x, axes], stats, x.dtype, keep_dims=True)
    dev = ctx.emit("SUB", [x, mean], like=x)
    var = ctx.emit("MEAN", [ctx.emit("MUL", [dev, dev], like=x), axes], stats, x.dtype, keep_dims=True)
    inv = exact.rsqrt(ctx, ctx.emit("ADD", [var, ctx.scalar_like(eps, var)], like=var))
    return y, mean if 1 in node.used else None, inv if 2 in node.used else None


@onnx_op("RMSNormalization")
def rms_norm(ctx, node, inputs, attrs) -> ir.Tensor:
    """RMSNormalization (opsets 23-28).

    x * RSQRT(MEAN(x * x over the axes from `axis` on) + epsilon) * scale."""
    x = inputs[0]
    if x.dtype != np.float32:
        raise ctx.fail("RMSNormalization of a non-float32 input has no lowering yet")
    axis = attrs.get("axis", -1) % x.rank
    axes = ctx.const(np.arange(axis, x.rank, dtype=np.int32), name="axes")
    stats = tuple(x.shape[:axis]) + (1,) * (x.rank - axis)
    ms = ctx.emit("MEAN", [ctx.emit("MUL", [x, x], like=x), axes], stats, x.dtype, keep_dims=True)
    inv = exact.rsqrt(ctx, ctx.emit("ADD", [ms, ctx.scalar_like(attrs.get("epsilon", 1e-5), ms)], like=ms))
    y = ctx.emit("MUL", [x, inv], like=x)
    scale = tensor(ctx, inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
    if scale is not None:
        y = ctx.emit("MUL", [y, ctx.cast(scale, x.dtype)], out_shape(node), x.dtype)
    return y


@onnx_op("GroupNormalization")
def group_norm(ctx, node, inputs, attrs) -> ir.Tensor:
    """GroupNormalization (opsets 18-28).

    as aten.group_norm (per-channel scale and bias, opset 21; per-group ones, opset 18, are expanded to their
    channels: at conversion for constants, by a GATHER for values computed at run time)."""
    x, scale, bias = inputs
    groups = attrs["num_groups"]
    c = x.shape[1]

    def per_channel(t):
        if t.is_constant:
            v = np.asarray(t.data)
            return ctx.const(np.repeat(v, c // groups) if v.size == groups and c != groups else v)
        if int(t.shape[0]) == groups and c != groups:
            index = ctx.const(np.repeat(np.arange(groups, dtype=np.int32), c // groups), name="channel_group")
            return ctx.emit("GATHER", [t, index], (c,), t.dtype, axis=0, batch_dims=0)
        return t

    return aten_fn(aten.group_norm.default)(ctx, node, x, groups, per_channel(scale), per_channel(bias),
                                            attrs.get("epsilon", 1e-5))


@onnx_op("Softmax", same_shape=True)
def softmax(ctx, node, inputs, attrs) -> ir.Tensor:
    """Softmax (opsets 13-28).

    as aten._softmax along `axis`."""
    return aten_fn(aten._softmax.default)(ctx, node, inputs[0], attrs.get("axis", -1), False)


@onnx_op("LogSoftmax", same_shape=True)
def log_softmax(ctx, node, inputs, attrs) -> ir.Tensor:
    """LogSoftmax (opsets 13-28).

    as aten._log_softmax along `axis`."""
    return aten_fn(aten._log_softmax.default)(ctx, node, inputs[0], attrs.get("axis", -1), False)


# ---- reductions ---------------------------------------------------------------------------------------------
def _reduce(target) -> OnnxFn:
    def lower(ctx, node, inputs, attrs) -> ir.Tensor:
        x = inputs[0]
        if len(inputs) > 1 and inputs[1] is not None:
            axes = const_list(inputs[1], "reduction axes", ctx)
        else:
            axes = list(attrs.get("axes", []))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.rank))
        return aten_fn(target)(ctx, node, x, [a % x.rank for a in axes], bool(attrs.get("keepdims", 1)))
    return lower


for _name, _target in {"ReduceMean": aten.mean.dim, "ReduceSum": aten.sum.dim_IntList, "ReduceMax": aten.amax.default,
                       "ReduceMin": aten.amin.default}.items():
    onnx_op(_name, doc=f"{_name} (opsets 13-28).\n\nas {_target} (axes from the input or the attribute)",
            parameters=[1], uint16_in_range=_name in ("ReduceMax", "ReduceMin"))(_reduce(_target))


@onnx_op("ArgMax", "ArgMin")
def arg_reduce(ctx, node, inputs, attrs) -> ir.Tensor:
    """ArgMax, ArgMin (opsets 13-28).

    as aten.argmax / argmin; select_last_index: the first index along the reversed axis (REVERSE_V2),
    counted from the end."""
    x = inputs[0]
    axis = attrs.get("axis", 0) % max(x.rank, 1)
    target = aten.argmax.default if node.op_type == "ArgMax" else aten.argmin.default
    keep = bool(attrs.get("keepdims", 1))
    if not attrs.get("select_last_index", 0) or x.rank == 0:
        return aten_fn(target)(ctx, node, x, axis, keep)
    size = x.shape[axis]
    if not isinstance(size, int):
        raise ctx.fail("select_last_index over a dynamic axis has no lowering yet")
    flipped = ctx.emit("REVERSE_V2", [x, ctx.const(np.array([axis], np.int32), name="axis")], like=x)
    index = aten_fn(target)(ctx, node, flipped, axis, keep)
    return ctx.emit("SUB", [ctx.scalar_like(size - 1, index), index], like=index)


# The recurrent layers (LSTM, GRU) register themselves from their own module.
