"""Elementwise lowerings: activations, unary math and broadcasting binary arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.node import Value
from litert_torch.lower.common.registry import (LoweringContext, lowers, narrow_int64, numpy_dtype, out_meta,
                                               schema_of)
from litert_torch.symbolic import Sym

aten = torch.ops.aten

# ---- unary ops that are exactly one TFLite builtin ------------------------------------------------------------
UNARY_BUILTINS = {
    aten.relu.default: "RELU",
    aten.relu6.default: "RELU6",
    aten.sigmoid.default: "LOGISTIC",
    aten.tanh.default: "TANH",
    aten.hardswish.default: "HARD_SWISH",
    aten.neg.default: "NEG",
    aten.abs.default: "ABS",
    aten.floor.default: "FLOOR",
    aten.ceil.default: "CEIL",
}


def _unary(target: Any, opcode: str):
    def lower_unary(ctx: LoweringContext, node, x: ir.Tensor) -> ir.Tensor:
        return ctx.emit(opcode, [x], like=x)

    lower_unary.__name__ = f"lower_{opcode.lower()}"
    lower_unary.__doc__ = f"{schema_of(target)}\n\nOne {opcode} op."
    return lower_unary


for _target, _opcode in UNARY_BUILTINS.items():
    lowers(_target)(_unary(_target, _opcode))


def _trig(target: Any, opcode: str):
    def lower_trig(ctx: LoweringContext, node, x: ir.Tensor) -> ir.Tensor:
        return ctx.emit(opcode, [x], like=x)

    lower_trig.__name__ = f"lower_{opcode.lower()}"
    lower_trig.__doc__ = f"""{schema_of(target)}

    One {opcode} op.

    Limits: XNNPACK's kernel is good to 2e-5 (absolute) for |x| < 1e7; past that it loses the argument."""
    return lower_trig


lowers(aten.sin.default)(_trig(aten.sin.default, "SIN"))
lowers(aten.cos.default)(_trig(aten.cos.default, "COS"))


@lowers(aten.exp.default)
def lower_exp(ctx, node, x) -> ir.Tensor:
    """exp(Tensor self) -> Tensor

    EXP(x / 2) squared, NaN passed through: right up to the top of the float32 range on every kernel set
    (lower/common/exact.py)."""
    return exact.exp(ctx, x)


@lowers(aten.log.default)
def lower_log(ctx, node, x) -> ir.Tensor:
    """log(Tensor self) -> Tensor

    LOG, split at 2**100 so that no kernel sees an input it gets wrong; +inf and NaN passed through
    (lower/common/exact.py)."""
    return exact.log(ctx, x)


@lowers(aten.sqrt.default)
def lower_sqrt(ctx, node, x) -> ir.Tensor:
    """sqrt(Tensor self) -> Tensor

    SQRT, split at 2**100 so that no kernel sees an input it gets wrong (lower/common/exact.py); three ops when
    the input is known to be positive."""
    return exact.sqrt(ctx, x)


@lowers(aten.rsqrt.default)
def lower_rsqrt(ctx, node, x) -> ir.Tensor:
    """rsqrt(Tensor self) -> Tensor

    RSQRT of x * 2**-8 when x is known to be positive (a variance plus epsilon), else 1 / sqrt(x)
    (lower/common/exact.py): +-inf at +-0, right up to the top of the float32 range."""
    return exact.rsqrt(ctx, x)


@lowers(aten.sign.default)
def lower_sign(ctx, node, x) -> ir.Tensor:
    """sign(Tensor self) -> Tensor

    SIGN, with 0 for NaN as PyTorch gives (SIGN returns NaN)."""
    y = ctx.emit("SIGN", [x], like=x)
    if x.dtype.kind != "f":
        return y
    return ctx.emit("SELECT_V2", [ctx.emit("NOT_EQUAL", [x, x], x.shape, np.bool_), ctx.scalar_like(0.0, x), y],
                    like=y)


# ---- clamps ---------------------------------------------------------------------------------------------------
# Clamps to these ranges are TFLite activations of their own, which later fuse into the op before them.
_CLAMP_ACTIVATIONS = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, 1.0): "RELU_0_TO_1"}


def clamp(ctx: LoweringContext, x: ir.Tensor, lo: float | None, hi: float | None) -> ir.Tensor:
    if lo is not None and hi is not None and x.dtype.kind == "f":
        opcode = _CLAMP_ACTIVATIONS.get((float(lo), float(hi)))
        if opcode:
            return ctx.emit(opcode, [x], like=x)
    if lo is not None and hi is None and float(lo) == 0.0 and x.dtype.kind == "f":
        return ctx.emit("RELU", [x], like=x)
    if x.dtype.kind in "iu":  # integer bounds convert to the tensor's type as PyTorch converts them (wrapping)
        lo = None if lo is None else int(np.array(int(lo)).astype(np.int64).astype(x.dtype))
        hi = None if hi is None else int(np.array(int(hi)).astype(np.int64).astype(x.dtype))
    y = x
    if lo is not None:
        y = ctx.emit("MAXIMUM", [y, ctx.scalar_like(lo, x)], like=x)
    if hi is not None:
        y = ctx.emit("MINIMUM", [y, ctx.scalar_like(hi, x)], like=x)
    return y


@lowers(aten.hardtanh.default)
def lower_hardtanh(ctx, node, x, min_val=-1.0, max_val=1.0) -> ir.Tensor:
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor

    RELU6 / RELU_N1_TO_1 / RELU_0_TO_1 for their ranges, MAXIMUM + MINIMUM otherwise."""
    return clamp(ctx, x, min_val, max_val)


@lowers(aten.clamp.default)
def lower_clamp(ctx, node, x, min=None, max=None) -> ir.Tensor:
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor

    Like hardtanh; either bound may be absent. A bool tensor clamped by numbers is clamped as the integer type
    PyTorch promotes it to."""
    return clamp(ctx, ctx.cast(x, out_meta(node)[1]), min, max)


# ---- composite activations ------------------------------------------------------------------------------------
@lowers(aten.hardsigmoid.default)
def lower_hardsigmoid(ctx, node, x) -> ir.Tensor:
    """hardsigmoid(Tensor self) -> Tensor

    relu6(x + 3) / 6: ADD with a fused RELU6, then MUL by 1/6 (TFLite has no hard-sigmoid builtin)."""
    shifted = ctx.emit("ADD", [x, ctx.scalar_like(3.0, x)], like=x, fused_activation_function="RELU6")
    return ctx.emit("MUL", [shifted, ctx.scalar_like(1.0 / 6.0, x)], like=x)


@lowers(aten.silu.default)
def lower_silu(ctx, node, x) -> ir.Tensor:
    """silu(Tensor self) -> Tensor

    x * sigmoid(x): LOGISTIC then MUL."""
    return ctx.emit("MUL", [x, ctx.emit("LOGISTIC", [x], like=x)], like=x)


@lowers(aten.gelu.default)
def lower_gelu(ctx, node, x, approximate="none") -> ir.Tensor:
    """gelu(Tensor self, *, str approximate="none") -> Tensor

    GELU; `approximate='tanh'` maps to the builtin's tanh form."""
    if approximate not in ("none", "tanh"):
        raise ctx.fail(f"gelu approximate={approximate!r} is not a known form")
    return ctx.emit("GELU", [x], like=x, approximate=approximate == "tanh")


@lowers(aten.leaky_relu.default)
def lower_leaky_relu(ctx, node, x, negative_slope=0.01) -> ir.Tensor:
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor

    LEAKY_RELU with alpha = negative_slope."""
    return ctx.emit("LEAKY_RELU", [x], like=x, alpha=float(negative_slope))


@lowers(aten.elu.default)
def lower_elu(ctx, node, x, alpha=1.0, scale=1.0, input_scale=1.0) -> ir.Tensor:
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor

    ELU for alpha = 1; relu(x) + alpha * elu(min(x, 0)) for other alphas (the builtin fixes alpha = 1);
    scale * (relu(x) + alpha * elu(input_scale * min(x, 0))) for the selu / celu forms.

    Limits: input_scale must be positive."""
    if input_scale <= 0:
        raise ctx.fail(f"elu with input_scale {input_scale} (not positive) has no lowering")
    if alpha == 1.0 and scale == 1.0 and input_scale == 1.0:
        return ctx.emit("ELU", [x], like=x)
    negative = ctx.emit("MINIMUM", [x, ctx.scalar_like(0.0, x)], like=x)
    if input_scale != 1.0:
        negative = ctx.emit("MUL", [negative, ctx.scalar_like(input_scale, x)], like=x)
    negative = ctx.emit("ELU", [negative], like=x)
    if alpha != 1.0:
        negative = ctx.emit("MUL", [negative, ctx.scalar_like(alpha, x)], like=x)
    out = ctx.emit("ADD", [ctx.emit("RELU", [x], like=x), negative], like=x)
    return out if scale == 1.0 else ctx.emit("MUL", [out, ctx.scalar_like(scale, x)], like=x)


# ---- binary arithmetic ----------------------------------------------------------------------------------------
def operand(ctx: LoweringContext, value, dtype: np.dtype) -> ir.Tensor:
    """A binary-op operand in the result's element type: TFLite binary ops need equal element types."""
    if isinstance(value, ir.Tensor):
        return ctx.cast(value, dtype)
    if isinstance(value, Sym):  # a size used as a number (x * x.shape[0]): read when the model runs
        return ctx.cast(ctx.reshape(ctx.size_tensor(value), []), dtype)
    if np.dtype(dtype) == np.int32 and isinstance(value, int) and not isinstance(value, bool):
        # a number of an int64 computation: the int64 extremes (sentinels) become the int32 ones
        return ctx.const(narrow_int64(np.array(value, np.int64), f"the number {value}"), dtype, "scalar")
    return ctx.const(np.array(value, dtype=dtype), dtype, "scalar")


# TFLite's kernels read int8 / uint8 / int16 tensors as quantized values: on plain narrow integers, ADD, SUB,
# MUL, DIV and the comparisons give wrong results or abort the process. Those run in int32 here, and the
# result is cast back (which wraps on overflow, as PyTorch's and ONNX's narrow integer arithmetic does).
NARROW_INTS = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16))
WIDENED_OPS = {"ADD", "SUB", "MUL", "DIV", "FLOOR_DIV", "FLOOR_MOD", "POW", "SQUARED_DIFFERENCE", "EQUAL",
               "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"}


def compute_dtype(opcode: str, dtype: np.dtype) -> np.dtype:
    """The element type `opcode` computes in for operands of `dtype` (int32 for narrow integers)."""
    return np.dtype(np.int32) if np.dtype(dtype) in NARROW_INTS and opcode in WIDENED_OPS else np.dtype(dtype)


# On bools, PyTorch's arithmetic is logic; TFLite's arithmetic kernels take no bools.
BOOL_OPS = {"MUL": "LOGICAL_AND", "MINIMUM": "LOGICAL_AND", "ADD": "LOGICAL_OR", "MAXIMUM": "LOGICAL_OR"}


def binary(ctx: LoweringContext, node, opcode: str, a, b) -> ir.Tensor:
    shape, dtype = out_meta(node)
    if dtype == np.bool_:
        if opcode not in BOOL_OPS:
            raise ctx.fail(f"{opcode} on bool tensors has no lowering")
        return ctx.emit(BOOL_OPS[opcode], [operand(ctx, a, dtype), operand(ctx, b, dtype)], shape, dtype)
    wide = compute_dtype(opcode, dtype)
    y = ctx.emit(opcode, [operand(ctx, a, wide), operand(ctx, b, wide)], shape, wide)
    return ctx.cast(y, dtype)


def _scaled(ctx: LoweringContext, value, alpha, dtype):
    if alpha == 1:
        return value
    if isinstance(value, ir.Tensor):
        return ctx.emit("MUL", [operand(ctx, value, dtype), ctx.const(np.array(alpha, dtype))], value.shape, dtype)
    return value * alpha


@lowers(aten.add.Tensor, aten.add.Scalar)
def lower_add(ctx, node, a, b, alpha=1) -> ir.Tensor:
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor

    ADD, broadcasting, operands cast to the result type; alpha != 1 scales the second operand first."""
    _, dtype = out_meta(node)
    return binary(ctx, node, "ADD", a, _scaled(ctx, b, alpha, dtype))


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def lower_sub(ctx, node, a, b, alpha=1) -> ir.Tensor:
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor

    SUB, broadcasting, operands cast to the result type; alpha != 1 scales the second operand first."""
    _, dtype = out_meta(node)
    return binary(ctx, node, "SUB", a, _scaled(ctx, b, alpha, dtype))


@lowers(aten.mul.Tensor, aten.mul.Scalar)
def lower_mul(ctx, node, a, b) -> ir.Tensor:
    """mul.Tensor(Tensor self, Tensor other) -> Tensor

    MUL, broadcasting, operands cast to the result type."""
    return binary(ctx, node, "MUL", a, b)


@lowers(aten.div.Tensor, aten.div.Scalar)
def lower_div(ctx, node, a, b) -> ir.Tensor:
    """div.Tensor(Tensor self, Tensor other) -> Tensor

    True division (integer operands are cast to the float result type first, as PyTorch does).
    A constant divisor becomes a MUL by its reciprocal only when that is exact (powers of 2)."""
    if not isinstance(b, ir.Tensor) and b != 0 and np.frexp(float(b))[0] in (0.5, -0.5):
        return binary(ctx, node, "MUL", a, 1.0 / float(b))
    return binary(ctx, node, "DIV", a, b)


@lowers(aten.div.Tensor_mode, aten.div.Scalar_mode)
def lower_div_mode(ctx, node, a, b, *, rounding_mode=None) -> ir.Tensor:
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor

    FLOOR_DIV for rounding_mode='floor'; DIV then rounding towards zero for 'trunc' (integer DIV already
    truncates)."""
    shape, dtype = out_meta(node)
    if rounding_mode is None:
        return lower_div(ctx, node, a, b)
    if rounding_mode == "floor":
        return binary(ctx, node, "FLOOR_DIV", a, b)
    quotient = binary(ctx, node, "DIV", a, b)
    if dtype.kind != "f":
        return quotient
    negative = ctx.emit("LESS", [quotient, ctx.scalar_like(0.0, quotient)], shape, np.bool_)
    return ctx.emit("SELECT_V2", [negative, ctx.emit("CEIL", [quotient], like=quotient),
                                  ctx.emit("FLOOR", [quotient], like=quotient)], shape, dtype)


@lowers(aten.floor_divide.default)
def lower_floor_divide(ctx, node, a, b) -> ir.Tensor:
    """floor_divide(Tensor self, Tensor other) -> Tensor

    a // b: division rounded towards minus infinity, as div(a, b, rounding_mode='floor')."""
    return lower_div_mode(ctx, node, a, b, rounding_mode="floor")


@lowers(aten.erf.default)
def lower_erf(ctx, node, x) -> ir.Tensor:
    """erf(Tensor self) -> Tensor

    erf (TFLite has no builtin): its Maclaurin series below 0.5, 2 * GELU(sqrt(2) x) / (sqrt(2) x) - 1 on x
    clamped to +-6 above, NaN passed through (lower/common/exact.py)."""
    return exact.erf(ctx, x)


@lowers(aten.remainder.Tensor, aten.remainder.Scalar)
def lower_remainder(ctx, node, a, b) -> ir.Tensor:
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor

    FLOOR_MOD: the result takes the divisor's sign, as in Python and torch.remainder."""
    return binary(ctx, node, "FLOOR_MOD", a, b)


@lowers(aten.fmod.Tensor, aten.fmod.Scalar)
def lower_fmod(ctx, node, a, b) -> ir.Tensor:
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor

    The remainder with the dividend's sign (C's fmod), exact: see `fmod`."""
    shape, dtype = out_meta(node)
    return fmod(ctx, operand(ctx, a, dtype), operand(ctx, b, dtype), shape)


def fmod(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor, shape) -> ir.Tensor:
    """C's fmod of two operands of one type, broadcast to `shape`. Floats: sign(a) * FLOOR_MOD(|a|, |b|), exact
    because FLOOR_MOD of non-negative operands is fmod itself (x mod 0 is NaN). Integers: FLOOR_MOD (the
    divisor's sign) less b where it is nonzero and the operands' signs differ, which cannot overflow."""
    dtype = a.dtype
    if dtype == np.bool_ or dtype.kind == "u" and dtype not in NARROW_INTS:
        raise ctx.fail(f"fmod of {dtype} values has no lowering")
    wide = compute_dtype("FLOOR_MOD", dtype)
    a, b = ctx.cast(a, wide), ctx.cast(b, wide)
    if wide.kind == "f":
        rest = ctx.emit("FLOOR_MOD", [ctx.emit("ABS", [a], like=a), ctx.emit("ABS", [b], like=b)], shape, wide)
        return ctx.emit("MUL", [rest, ctx.emit("SIGN", [a], like=a)], shape, wide)
    rest = ctx.emit("FLOOR_MOD", [a, b], shape, wide)
    zero = ctx.scalar_like(0, a)
    differ = ctx.emit("NOT_EQUAL", [ctx.emit("LESS", [a, zero], a.shape, np.bool_),
                                    ctx.emit("LESS", [b, zero], b.shape, np.bool_)], shape, np.bool_)
    shift = ctx.emit("LOGICAL_AND", [differ, ctx.emit("NOT_EQUAL", [rest, zero], shape, np.bool_)], shape, np.bool_)
    moved = ctx.emit("SUB", [rest, b], shape, wide)
    return ctx.cast(ctx.emit("SELECT_V2", [shift, moved, rest], shape, wide), dtype)


@lowers(aten.pow.Tensor_Scalar)
def lower_pow_scalar(ctx, node, x, exponent) -> ir.Tensor:
    """pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor

    x ** c: MUL for 2 and 3, SQRT for 0.5, RSQRT for -0.5, DIV for -1, POW otherwise (XNNPACK and NPUs
    take no POW; x * x * x is within an ulp of pow(x, 3))."""
    shape, dtype = out_meta(node)
    x = ctx.cast(x, dtype)
    if exponent == 1:
        return x
    if exponent == 2:
        return ctx.emit("MUL", [x, x], like=x)
    if exponent == 3:
        return ctx.emit("MUL", [ctx.emit("MUL", [x, x], like=x), x], like=x)
    if exponent == 0.5 and dtype.kind == "f":
        return exact.sqrt(ctx, x)
    if exponent == -0.5 and dtype.kind == "f":
        return exact.rsqrt(ctx, x)
    if exponent == -1 and dtype.kind == "f":
        return ctx.emit("DIV", [ctx.scalar_like(1.0, x), x], like=x)
    return ctx.emit("POW", [x, ctx.scalar_like(exponent, x)], like=x)


@lowers(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def lower_pow(ctx, node, a, b) -> ir.Tensor:
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor

    POW, broadcasting."""
    return binary(ctx, node, "POW", a, b)


def scalar_with(ctx, node, opcode: str, value: float, x) -> ir.Tensor:
    """`opcode`(value, x) with x cast to the node's result dtype: 1 / x, 2 ** x."""
    _, dtype = out_meta(node)
    x = ctx.cast(x, dtype)
    return ctx.emit(opcode, [ctx.scalar_like(value, x), x], like=x)


@lowers(aten.reciprocal.default)
def lower_reciprocal(ctx, node, x) -> ir.Tensor:
    """reciprocal(Tensor self) -> Tensor

    DIV of 1 by x."""
    return scalar_with(ctx, node, "DIV", 1.0, x)


@lowers(aten.round.default)
def lower_round(ctx, node, x) -> ir.Tensor:
    """round(Tensor self) -> Tensor

    ROUND (half to even, like torch.round)."""
    return ctx.emit("ROUND", [x], like=x)


@lowers(aten._to_copy.default)
def lower_to_copy(ctx, node, x, dtype=None, **kwargs) -> ir.Tensor:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor

    CAST to the new dtype (device and memory-format changes are nothing)."""
    _, out_dtype = out_meta(node)
    return ctx.cast(x, out_dtype)


@lowers(aten.prelu.default)
def lower_prelu(ctx, node, x, weight) -> ir.Tensor:
    """prelu(Tensor self, Tensor weight) -> Tensor

    PRELU with the slope broadcast over the channel axis (dim 1)."""
    alpha = weight if weight.rank != 1 or x.rank < 2 else ctx.reshape(weight, [weight.shape[0]] + [1] * (x.rank - 2))
    return ctx.emit("PRELU", [x, ctx.cast(alpha, x.dtype)], like=x)


# ---- comparisons, logic, selection ----------------------------------------------------------------------------
COMPARISONS = {
    aten.eq.Tensor: "EQUAL", aten.eq.Scalar: "EQUAL",
    aten.ne.Tensor: "NOT_EQUAL", aten.ne.Scalar: "NOT_EQUAL",
    aten.lt.Tensor: "LESS", aten.lt.Scalar: "LESS",
    aten.le.Tensor: "LESS_EQUAL", aten.le.Scalar: "LESS_EQUAL",
    aten.gt.Tensor: "GREATER", aten.gt.Scalar: "GREATER",
    aten.ge.Tensor: "GREATER_EQUAL", aten.ge.Scalar: "GREATER_EQUAL",
}


def common_dtype(node, positions=(0, 1)) -> np.dtype:
    """The dtype PyTorch computes in over the operands at `positions` (its type promotion rules)."""
    a, b = (node.inputs[i].promotion_operand() if isinstance(node.inputs[i], Value) else node.inputs[i]
            for i in positions)
    return numpy_dtype(torch.result_type(a, b))


def _comparison(target: Any, opcode: str):
    def lower_comparison(ctx, node, a, b) -> ir.Tensor:
        dtype = compute_dtype(opcode, common_dtype(node))
        shape, _ = out_meta(node)
        return ctx.emit(opcode, [operand(ctx, a, dtype), operand(ctx, b, dtype)], shape, np.bool_)

    lower_comparison.__name__ = f"lower_{opcode.lower()}"
    lower_comparison.__doc__ = f"{schema_of(target)}\n\n{opcode} on operands promoted to a common type."
    return lower_comparison


for _target, _opcode in COMPARISONS.items():
    lowers(_target)(_comparison(_target, _opcode))


@lowers(aten.logical_not.default)
def lower_logical_not(ctx, node, x) -> ir.Tensor:
    """logical_not(Tensor self) -> Tensor

    LOGICAL_NOT (x != 0 first for non-bool inputs)."""
    return ctx.emit("LOGICAL_NOT", [as_bool(ctx, x)], x.shape, np.bool_)


def as_bool(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    if x.dtype == np.bool_:
        return x
    return ctx.emit("NOT_EQUAL", [x, ctx.scalar_like(0, x)], x.shape, np.bool_)


def _logical(target: Any, opcode: str):
    def lower_logical(ctx, node, a, b) -> ir.Tensor:
        shape, _ = out_meta(node)
        return ctx.emit(opcode, [as_bool(ctx, a), as_bool(ctx, b)], shape, np.bool_)

    lower_logical.__doc__ = f"{schema_of(target)}\n\n{opcode} on bool tensors."
    return lower_logical


lowers(aten.logical_and.default)(_logical(aten.logical_and.default, "LOGICAL_AND"))
lowers(aten.logical_or.default)(_logical(aten.logical_or.default, "LOGICAL_OR"))
lowers(aten.logical_xor.default)(_logical(aten.logical_xor.default, "NOT_EQUAL"))


# ---- bitwise ops ----------------------------------------------------------------------------------------------
# TFLite has BITWISE_XOR and RIGHT_SHIFT of integers, and no AND, OR or left shift: those are built from sums,
# which are exact where no sum overflows.
def _and_exact(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor, shape) -> ir.Tensor:
    """a & b of int32 values within 17 bits: (a + b - (a ^ b)) >> 1, as a + b = (a ^ b) + 2 (a & b)."""
    total = ctx.emit("ADD", [a, b], shape, np.int32, fused_activation_function="NONE")
    twice = ctx.emit("SUB", [total, ctx.emit("BITWISE_XOR", [a, b], shape, np.int32)], shape, np.int32,
                     fused_activation_function="NONE")
    return ctx.emit("RIGHT_SHIFT", [twice, ctx.scalar_like(1, twice)], shape, np.int32)


def _halves(ctx: LoweringContext, x: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """(x >> 16, x - (x >> 16) * 65536) of int32 values: the signed high half and the low half in [0, 65535]."""
    high = ctx.emit("RIGHT_SHIFT", [x, ctx.scalar_like(16, x)], x.shape, np.int32)
    low = ctx.emit("SUB", [x, ctx.emit("MUL", [high, ctx.scalar_like(65536, x)], x.shape, np.int32,
                                       fused_activation_function="NONE")],
                   x.shape, np.int32, fused_activation_function="NONE")
    return high, low


def integer_and_or(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor, shape, dtype, kind: str) -> ir.Tensor:
    """a & b (kind "and") or a | b (kind "or") of integers of `dtype`: (a + b - (a ^ b)) / 2 in int32 for 8- and
    16-bit types and on the 16-bit halves of 32-bit ones (no sum overflows); a | b = (a ^ b) + (a & b), whose
    bits are disjoint (no carry)."""
    dtype = np.dtype(dtype)
    wa, wb = ctx.cast(a, np.int32), ctx.cast(b, np.int32)
    if dtype.itemsize < 4:
        both = _and_exact(ctx, wa, wb, shape)
    else:
        (ha, la), (hb, lb) = _halves(ctx, wa), _halves(ctx, wb)
        high = ctx.emit("MUL", [_and_exact(ctx, ha, hb, shape), ctx.scalar_like(65536, wa)], shape, np.int32,
                        fused_activation_function="NONE")
        both = ctx.emit("ADD", [high, _and_exact(ctx, la, lb, shape)], shape, np.int32,
                        fused_activation_function="NONE")
    if kind == "or":
        both = ctx.emit("ADD", [ctx.emit("BITWISE_XOR", [wa, wb], shape, np.int32), both], shape, np.int32,
                        fused_activation_function="NONE")
    return ctx.cast(both, dtype)


def _bitwise(target: Any, kind: str):
    def lower_bitwise(ctx, node, a, b) -> ir.Tensor:
        shape, dtype = out_meta(node)
        a, b = operand(ctx, a, dtype), operand(ctx, b, dtype)
        if dtype == np.bool_:
            return ctx.emit({"and": "LOGICAL_AND", "or": "LOGICAL_OR", "xor": "NOT_EQUAL"}[kind], [a, b], shape, dtype)
        if kind == "xor":
            return ctx.emit("BITWISE_XOR", [a, b], shape, dtype)
        return integer_and_or(ctx, a, b, shape, dtype, kind)

    lower_bitwise.__name__ = f"lower_bitwise_{kind}"
    lower_bitwise.__doc__ = schema_of(target) + "\n\n" + {
        "and": "LOGICAL_AND of bools; of integers (TFLite has no AND) (a + b - (a ^ b)) / 2 with BITWISE_XOR and "
               "RIGHT_SHIFT, on 16-bit halves of 32-bit values so that no sum overflows.",
        "or": "LOGICAL_OR of bools; of integers (a ^ b) + (a & b), the AND as for bitwise_and.",
        "xor": "NOT_EQUAL of bools, BITWISE_XOR of integers.",
    }[kind]
    return lower_bitwise


def _overloads(*names: str) -> list:
    return [getattr(getattr(aten, op), overload) for op, overload in (n.split(".") for n in names)
            if hasattr(aten, op) and hasattr(getattr(aten, op), overload)]


# (the decompositions turn the other __and__ / __or__ / __xor__ overloads into these)
for _kind, _targets in [("and", _overloads("bitwise_and.Tensor", "bitwise_and.Scalar", "__and__.Tensor")),
                        ("or", _overloads("bitwise_or.Tensor", "bitwise_or.Scalar", "__or__.Tensor")),
                        ("xor", _overloads("bitwise_xor.Tensor", "bitwise_xor.Scalar"))]:
    lowers(*_targets)(_bitwise(_targets[0], _kind))


@lowers(aten.bitwise_not.default)
def lower_bitwise_not(ctx, node, x) -> ir.Tensor:
    """bitwise_not(Tensor self) -> Tensor

    LOGICAL_NOT of bools; BITWISE_XOR with all ones (-1, or the maximum of an unsigned type) of integers."""
    if x.dtype == np.bool_:
        return ctx.emit("LOGICAL_NOT", [x], x.shape, np.bool_)
    ones = np.array(np.iinfo(x.dtype).max if x.dtype.kind == "u" else -1, x.dtype)
    return ctx.emit("BITWISE_XOR", [x, ctx.const(ones, name="ones")], x.shape, x.dtype)


def _shift(target: Any, left: bool):
    def lower_shift(ctx, node, a, b) -> ir.Tensor:
        shape, dtype = out_meta(node)
        if dtype.kind not in "iu":
            raise ctx.fail(f"a bit shift of {dtype} values (PyTorch shifts integers only)")
        bits = 8 * dtype.itemsize
        x, s = ctx.cast(operand(ctx, a, dtype), np.int32), ctx.cast(operand(ctx, b, dtype), np.int32)
        zero = ctx.scalar_like(0, s)
        outside = ctx.emit("LOGICAL_OR", [ctx.emit("LESS", [s, zero], s.shape, np.bool_),
                                          ctx.emit("GREATER_EQUAL", [s, ctx.scalar_like(bits, s)], s.shape, np.bool_)],
                           s.shape, np.bool_)
        inside = ctx.emit("SELECT_V2", [outside, zero, s], s.shape, np.int32)
        if left:  # x * 2**s, wrapping (int32 MUL wraps; the CAST back keeps the type's low bits)
            powers = ctx.const(np.array([1 << k for k in range(31)] + [-(1 << 31)], np.int32), name="powers")
            y = ctx.emit("MUL", [x, ctx.emit("GATHER", [powers, inside], s.shape, np.int32, axis=0, batch_dims=0)],
                         shape, np.int32, fused_activation_function="NONE")
            y = ctx.emit("SELECT_V2", [outside, zero, y], shape, np.int32)
        elif dtype.kind == "u":  # an unsigned value shifted by its width or more is 0
            y = ctx.emit("SELECT_V2", [outside, zero, ctx.emit("RIGHT_SHIFT", [x, inside], shape, np.int32)],
                         shape, np.int32)
        else:  # a signed one, by its width or more (or a negative count), keeps its sign: 0 or -1
            count = ctx.emit("SELECT_V2", [outside, ctx.scalar_like(bits - 1, s), s], s.shape, np.int32)
            y = ctx.emit("RIGHT_SHIFT", [x, count], shape, np.int32)
        return ctx.cast(y, dtype)

    lower_shift.__name__ = "lower_left_shift" if left else "lower_right_shift"
    lower_shift.__doc__ = schema_of(target) + "\n\n" + (
        "x * 2**s in int32 (a GATHER of the power, MUL wrapping as PyTorch's shift drops high bits), cast back; "
        "0 where s < 0 or s >= the type's width, as PyTorch gives." if left else
        "RIGHT_SHIFT (arithmetic) in int32, cast back; a count below 0 or of the type's width or more gives 0 for "
        "unsigned types and the sign (0 or -1) for signed ones, as PyTorch gives.")
    return lower_shift


for _left, _targets in [
        (True, _overloads("bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar",
                          "bitwise_left_shift.Scalar_Tensor", "__lshift__.Tensor", "__lshift__.Scalar")),
        (False, _overloads("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
                           "bitwise_right_shift.Scalar_Tensor", "__rshift__.Tensor", "__rshift__.Scalar"))]:
    lowers(*_targets)(_shift(_targets[0], _left))


@lowers(aten.where.self, aten.where.Scalar, aten.where.ScalarSelf, aten.where.ScalarOther)
def lower_where(ctx, node, cond, a, b) -> ir.Tensor:
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor

    SELECT_V2 (broadcasting) on operands promoted to the result type (a number as a constant of it)."""
    shape, dtype = out_meta(node)
    return ctx.emit("SELECT_V2", [as_bool(ctx, cond), operand(ctx, a, dtype), operand(ctx, b, dtype)], shape, dtype)


