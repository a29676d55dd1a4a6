"""Elementwise math with no single TFLite builtin, in forms that stay accurate over the whole input range (log1p
and expm1 near 0, where LOG(1 + x) and EXP(x) - 1 lose every digit), and statistics that return two results
(var_mean)."""

from __future__ import annotations

import math

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.aten.elementwise import operand, scalar_with
from litert_torch.lower.aten.reduce import lower_var, reduce, scan_along
from litert_torch.lower.common.registry import LoweringContext, lowers, normalize_dim, out_meta
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


def log1p(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    near = _series(ctx, x, [(-1.0) ** k / (k + 1) for k in range(SERIES_TERMS)])
    far = exact.log(ctx, ctx.emit("ADD", [x, ctx.scalar_like(1.0, x)], like=x))
    return _select(ctx, _small(ctx, x), near, far)


@lowers(aten.log1p.default)
def lower_log1p(ctx, node, x) -> ir.Tensor:
    """log1p(Tensor self) -> Tensor

    log(1 + x): its Taylor series for |x| < 0.1 (where LOG(1 + x) would lose the digits of x), LOG(1 + x)
    elsewhere."""
    shape, dtype = out_meta(node)
    return log1p(ctx, ctx.cast(x, dtype))


@lowers(aten.expm1.default)
def lower_expm1(ctx, node, x) -> ir.Tensor:
    """expm1(Tensor self) -> Tensor

    exp(x) - 1: its Taylor series for |x| < 0.1 (where EXP(x) - 1 would lose the digits of x), EXP(x) - 1
    elsewhere."""
    shape, dtype = out_meta(node)
    x = ctx.cast(x, dtype)
    near = _series(ctx, x, [1.0 / float(np.prod(np.arange(1, k + 2))) for k in range(SERIES_TERMS)])
    far = ctx.emit("SUB", [exact.exp(ctx, x), ctx.scalar_like(1.0, x)], like=x)
    return _select(ctx, _small(ctx, x), near, far)  # NaN is not small: it takes the far branch and stays NaN


@lowers(aten.exp2.default)
def lower_exp2(ctx, node, x) -> ir.Tensor:
    """exp2(Tensor self) -> Tensor

    POW(2, x)."""
    return scalar_with(ctx, node, "POW", 2.0, x)


@lowers(aten.atan2.default)
def lower_atan2(ctx, node, a, b) -> ir.Tensor:
    """atan2(Tensor self, Tensor other) -> Tensor

    ATAN2 on operands promoted to the float result type, each broadcast to the result's shape first (the
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
def lower_isnan(ctx, node, x) -> ir.Tensor:
    """isnan(Tensor self) -> Tensor

    NOT_EQUAL(x, x): only NaN differs from itself (integers never are NaN)."""
    shape, _ = out_meta(node)
    x = x if x.dtype.kind == "f" else ctx.cast(x, np.int32)  # narrow integer comparisons would abort
    return ctx.emit("NOT_EQUAL", [x, x], shape, np.bool_)


@lowers(aten.clamp.Tensor)
def lower_clamp_tensor(ctx, node, x, min=None, max=None) -> ir.Tensor:
    """clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor

    MAXIMUM with `min`, then MINIMUM with `max` (tensors or numbers), broadcasting, in the result type; NaN in
    `x` or a bound gives NaN, as in PyTorch (`extreme`)."""
    shape, dtype = out_meta(node)
    y = operand(ctx, x, dtype)
    for opcode, bound in (("MAXIMUM", min), ("MINIMUM", max)):
        if bound is None:
            continue
        b = operand(ctx, bound, dtype)
        both = broadcast_shapes(y.shape, b.shape)
        y = extreme(ctx, opcode, y, b, both, propagate=True) if dtype.kind == "f" \
            else ctx.emit(opcode, [y, b], both, dtype)
    return ctx.reshape(y, shape) if tuple(y.shape) != tuple(shape) else y


@lowers(aten.round.decimals)
def lower_round_decimals(ctx, node, x, *, decimals=0) -> ir.Tensor:
    """round.decimals(Tensor self, *, int decimals) -> Tensor

    ROUND(x * 10^d) / 10^d (ROUND(x / 10^-d) * 10^-d for negative d), as torch.round computes it."""
    if decimals == 0:
        return ctx.emit("ROUND", [x], like=x)
    scale = ctx.scalar_like(10.0 ** abs(decimals), x)
    if decimals > 0:
        return ctx.emit("DIV", [ctx.emit("ROUND", [ctx.emit("MUL", [x, scale], like=x)], like=x), scale], like=x)
    return ctx.emit("MUL", [ctx.emit("ROUND", [ctx.emit("DIV", [x, scale], like=x)], like=x), scale], like=x)


@lowers(aten.var_mean.correction)
def lower_var_mean(ctx, node, x, dim=None, *, correction=None, keepdim=False) -> tuple[ir.Tensor, ir.Tensor]:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)

    (var, mean): var as aten.var.correction, mean as MEAN over the same dims."""
    var_node = node.with_value(node.outputs[0].shape, node.outputs[0].dtype)
    mean_node = node.with_value(node.outputs[1].shape, node.outputs[1].dtype)
    var = lower_var(ctx, var_node, x, dim, correction=correction, keepdim=keepdim)
    mean = reduce(ctx, mean_node, "MEAN", x, dim, keepdim)
    return var, mean


# ---- logarithms in other bases, inverse and hyperbolic trigonometry ------------------------------------------
def _float_input(ctx: LoweringContext, node, x: ir.Tensor) -> ir.Tensor:
    shape, dtype = out_meta(node)
    if dtype.kind != "f":
        raise ctx.fail(f"{node.op} with a {dtype} result has no lowering")
    return ctx.cast(x, dtype)


def _times(ctx: LoweringContext, x: ir.Tensor, c: float) -> ir.Tensor:
    return ctx.emit("MUL", [x, ctx.scalar_like(c, x)], like=x)


def _plus(ctx: LoweringContext, x: ir.Tensor, c: float) -> ir.Tensor:
    return ctx.emit("ADD", [x, ctx.scalar_like(c, x)], like=x)


def _op(ctx: LoweringContext, opcode: str, *inputs: ir.Tensor) -> ir.Tensor:
    return ctx.emit(opcode, list(inputs), like=inputs[0])


def _log_base(ctx, node, x, base: float):
    x = _float_input(ctx, node, x)
    return _times(ctx, exact.log(ctx, x), 1.0 / float(np.log(base)))


@lowers(aten.log2.default)
def lower_log2(ctx, node, x) -> ir.Tensor:
    """log2(Tensor self) -> Tensor

    log(x) (the whole-range form, lower/common/exact.py) times 1 / log(2)."""
    return _log_base(ctx, node, x, 2.0)


@lowers(aten.log10.default)
def lower_log10(ctx, node, x) -> ir.Tensor:
    """log10(Tensor self) -> Tensor

    log(x) (the whole-range form, lower/common/exact.py) times 1 / log(10)."""
    return _log_base(ctx, node, x, 10.0)


@lowers(aten.trunc.default)
def lower_trunc(ctx, node, x) -> ir.Tensor:
    """trunc(Tensor self) -> Tensor

    FLOOR(max(0, x)) + CEIL(min(0, x)): rounding toward zero in ops XNNPACK takes (x second in the MAXIMUM /
    MINIMUM, so that NaN passes through)."""
    shape, dtype = out_meta(node)
    if dtype.kind != "f":
        return x
    zero = ctx.scalar_like(0.0, x)
    up = ctx.emit("FLOOR", [ctx.emit("MAXIMUM", [zero, x], like=x)], like=x)
    down = ctx.emit("CEIL", [ctx.emit("MINIMUM", [zero, x], like=x)], like=x)
    return _op(ctx, "ADD", up, down)


def _ones_like(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    return ctx.emit("FILL", [ctx.dims_tensor(x.shape), ctx.const(np.array(1.0, x.dtype))], like=x)


def _one_minus_square(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """(1 - x)(1 + x): 1 - x**2 without the cancellation near |x| = 1."""
    one = ctx.scalar_like(1.0, x)
    return _op(ctx, "MUL", ctx.emit("SUB", [one, x], like=x), _plus(ctx, x, 1.0))


@lowers(aten.atan.default)
def lower_atan(ctx, node, x) -> ir.Tensor:
    """atan(Tensor self) -> Tensor

    ATAN2(x, 1)."""
    x = _float_input(ctx, node, x)
    return ctx.emit("ATAN2", [x, _ones_like(ctx, x)], like=x)


def _asin_acos(ctx, node, x, asin: bool):
    x = _float_input(ctx, node, x)
    root = ctx.emit("SQRT", [_one_minus_square(ctx, x)], like=x)
    return ctx.emit("ATAN2", [x, root] if asin else [root, x], like=x)


@lowers(aten.asin.default)
def lower_asin(ctx, node, x) -> ir.Tensor:
    """asin(Tensor self) -> Tensor

    asin(x) = ATAN2(x, sqrt((1 - x)(1 + x))): accurate up to |x| = 1, NaN beyond (the root of a negative
    number). The root's input is at most 1, inside SQRT's good range."""
    return _asin_acos(ctx, node, x, True)


@lowers(aten.acos.default)
def lower_acos(ctx, node, x) -> ir.Tensor:
    """acos(Tensor self) -> Tensor

    acos(x) = ATAN2(sqrt((1 - x)(1 + x)), x), as asin."""
    return _asin_acos(ctx, node, x, False)


def _cody_waite(value: float, parts: int = 3) -> list[float]:
    """float32 terms summing to `value`, each but the last with its low 12 significand bits zero, so that k * term
    is exact for |k| < 2**12."""
    out, rest = [], value
    for _ in range(parts - 1):
        bits = np.array(rest, np.float32).view(np.uint32) & np.uint32(0xFFFFF000)
        term = float(bits.view(np.float32))
        out.append(term)
        rest -= term
    return [*out, float(np.float32(rest))]


_PI = _cody_waite(float(np.pi))


def _sin_near_zero(ctx: LoweringContext, t: ir.Tensor) -> ir.Tensor:
    """sin t with a relative error of float32 rounding also for tiny |t| (SIN kernels are accurate in absolute
    terms, about 1e-8, which is every digit of sin 1e-7): below |t| = 0.1 the series to t**7 (next term below
    3e-15 relative), SIN above."""
    t2 = _op(ctx, "MUL", t, t)
    poly = _plus(ctx, _times(ctx, t2, -1.0 / 5040), 1.0 / 120)
    poly = _plus(ctx, _op(ctx, "MUL", poly, t2), -1.0 / 6)
    poly = _op(ctx, "MUL", t, _plus(ctx, _op(ctx, "MUL", poly, t2), 1.0))
    small = ctx.emit("LESS", [_op(ctx, "ABS", t), ctx.scalar_like(0.1, t)], t.shape, np.bool_)
    return ctx.emit("SELECT_V2", [small, poly, _op(ctx, "SIN", t)], like=t)


def _minus_multiple_of_pi(ctx: LoweringContext, x: ir.Tensor, m: ir.Tensor) -> ir.Tensor:
    """x - m * pi, pi in three parts: each product exact (m a multiple of 1/2 below 2**11), each difference exact
    by Sterbenz's lemma where the result is small, which is where it matters."""
    for part in _PI:
        x = _op(ctx, "SUB", x, _times(ctx, m, part))
    return x


@lowers(aten.tan.default)
def lower_tan(ctx, node, x) -> ir.Tensor:
    """tan(Tensor self) -> Tensor

    tan x = sin r / (s * sin e): r = x - k*pi (k = floor(x/pi + 1/2)) measured from the nearest zero, e = x -
    (j + 1/2)*pi (j = floor(x/pi)) from the nearest pole, each computed from x in exact steps (cos r is s * sin e,
    s = 2(k - j) - 1). Near a pole e keeps its digits where cos x, or pi/2 - |r|, of a float32 x loses all of
    them (sin x / cos x gives tan(1.5707964) off by a fifth).

    Limits: exact reduction for |x| < 4e3, within SIN's accuracy up to 1e7."""
    x = _float_input(ctx, node, x)
    q = _times(ctx, x, 1.0 / np.pi)
    j = _op(ctx, "FLOOR", q)
    k = _op(ctx, "FLOOR", _plus(ctx, q, 0.5))
    r = _minus_multiple_of_pi(ctx, x, k)
    e = _minus_multiple_of_pi(ctx, x, _plus(ctx, j, 0.5))
    s = _plus(ctx, _times(ctx, _op(ctx, "SUB", k, j), 2.0), -1.0)
    cos_r = _op(ctx, "MUL", s, _sin_near_zero(ctx, e))
    return ctx.emit("DIV", [_sin_near_zero(ctx, r), cos_r], like=x)


_LN2 = float(np.log(2.0))
# Past this magnitude sqrt(x**2 + 1) is |x| in float32 (and x**2 would overflow past 1.8e19): asinh and acosh
# are log(2|x|) there.
_HUGE = 2.0 ** 28


def _cosh_parts(ctx: LoweringContext, a: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """(e**a / 2, e**-a / 2) for a = |x|, the first without overflowing before cosh does."""
    half = exact.exp(ctx, _plus(ctx, a, -_LN2))
    return half, ctx.emit("DIV", [ctx.scalar_like(0.25, a), half], like=a)


@lowers(aten.cosh.default)
def lower_cosh(ctx, node, x) -> ir.Tensor:
    """cosh(Tensor self) -> Tensor

    e**(|x| - log 2) + 0.25 / e**(|x| - log 2): (e**x + e**-x) / 2 with no early overflow."""
    x = _float_input(ctx, node, x)
    up, down = _cosh_parts(ctx, _op(ctx, "ABS", x))
    return _op(ctx, "ADD", up, down)


@lowers(aten.sinh.default)
def lower_sinh(ctx, node, x) -> ir.Tensor:
    """sinh(Tensor self) -> Tensor

    sign(x) * sinh(|x|): its Maclaurin series below 1 (where e**a - e**-a cancels), e**(a - log 2) -
    0.25 / e**(a - log 2) above."""
    x = _float_input(ctx, node, x)
    a = _op(ctx, "ABS", x)
    a2 = _op(ctx, "MUL", a, a)
    acc = ctx.scalar_like(1.0 / float(np.prod(np.arange(1, 2 * SERIES_TERMS))), a)
    for k in range(SERIES_TERMS - 2, -1, -1):
        acc = _plus(ctx, _op(ctx, "MUL", acc, a2), 1.0 / float(np.prod(np.arange(1, 2 * k + 2))))
    near = _op(ctx, "MUL", acc, a)
    up, down = _cosh_parts(ctx, a)
    far = ctx.emit("SUB", [up, down], like=a)
    small = ctx.emit("LESS", [a, ctx.scalar_like(1.0, a)], a.shape, np.bool_)
    magnitude = _select(ctx, small, near, far)
    return _op(ctx, "MUL", magnitude, ctx.emit("SIGN", [x], like=x))


@lowers(aten.asinh.default)
def lower_asinh(ctx, node, x) -> ir.Tensor:
    """asinh(Tensor self) -> Tensor

    sign(x) * asinh(|x|): log1p(a + a**2 / (1 + sqrt(1 + a**2))) (no cancellation near 0), log(a) + log 2
    past 2**28."""
    x = _float_input(ctx, node, x)
    a = _op(ctx, "ABS", x)
    capped = ctx.emit("MINIMUM", [ctx.scalar_like(_HUGE, a), a], like=a)
    sq = _op(ctx, "MUL", capped, capped)
    root = ctx.emit("SQRT", [_plus(ctx, sq, 1.0)], like=a)
    near = log1p(ctx, _op(ctx, "ADD", capped, ctx.emit("DIV", [sq, _plus(ctx, root, 1.0)], like=a)))
    far = _plus(ctx, exact.log(ctx, a), _LN2)
    huge = ctx.emit("GREATER", [a, ctx.scalar_like(_HUGE, a)], a.shape, np.bool_)
    return _op(ctx, "MUL", _select(ctx, huge, far, near), ctx.emit("SIGN", [x], like=x))


@lowers(aten.acosh.default)
def lower_acosh(ctx, node, x) -> ir.Tensor:
    """acosh(Tensor self) -> Tensor

    log1p((x - 1) + sqrt((x - 1)(x + 1))) (no cancellation near 1; NaN below 1), log(x) + log 2 past
    2**28."""
    x = _float_input(ctx, node, x)
    # kept within [-2, 2**28]: below 1 the result is NaN either way, and (x - 1)(x + 1) must not overflow
    capped = ctx.emit("MAXIMUM", [ctx.scalar_like(-2.0, x), ctx.emit("MINIMUM", [ctx.scalar_like(_HUGE, x), x],
                                                                      like=x)], like=x)
    t = _plus(ctx, capped, -1.0)
    root = ctx.emit("SQRT", [_op(ctx, "MUL", t, _plus(ctx, capped, 1.0))], like=x)
    near = log1p(ctx, _op(ctx, "ADD", t, root))
    far = _plus(ctx, exact.log(ctx, x), _LN2)
    huge = ctx.emit("GREATER", [x, ctx.scalar_like(_HUGE, x)], x.shape, np.bool_)
    return _select(ctx, huge, far, near)


@lowers(aten.atanh.default)
def lower_atanh(ctx, node, x) -> ir.Tensor:
    """atanh(Tensor self) -> Tensor

    sign(x) * 0.5 * log1p(2a / (1 - a)) for a = |x|: accurate near 0 and near +-1, +-inf at +-1, NaN
    beyond."""
    x = _float_input(ctx, node, x)
    a = _op(ctx, "ABS", x)
    ratio = ctx.emit("DIV", [_times(ctx, a, 2.0), ctx.emit("SUB", [ctx.scalar_like(1.0, a), a], like=a)], like=a)
    return _op(ctx, "MUL", _times(ctx, log1p(ctx, ratio), 0.5), ctx.emit("SIGN", [x], like=x))


@lowers(aten.erfc.default)
def lower_erfc(ctx, node, x) -> ir.Tensor:
    """erfc(Tensor self) -> Tensor

    1 - erf(x) (lower/common/exact.py).

    Limits: absolute error a few 1e-7; where erfc(x) is below 1e-3 (x > 2.3) its relative accuracy is lost."""
    x = _float_input(ctx, node, x)
    return ctx.emit("SUB", [ctx.scalar_like(1.0, x), exact.erf(ctx, x)], like=x)


def _sign_bit(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """True where x is negative, -0.0 included (1 / -0.0 is -inf)."""
    zero = ctx.scalar_like(0.0, x)
    below = ctx.emit("LESS", [x, zero], x.shape, np.bool_)
    negative_zero = ctx.emit("LESS", [ctx.emit("DIV", [ctx.scalar_like(1.0, x), x], like=x), zero], x.shape,
                             np.bool_)
    return ctx.emit("LOGICAL_OR", [below, negative_zero], x.shape, np.bool_)


@lowers(aten.signbit.default)
def lower_signbit(ctx, node, x) -> ir.Tensor:
    """signbit(Tensor self) -> Tensor

    x < 0 or 1 / x < 0 (-0.0 has its sign bit set); integers: x < 0.

    Limits: a NaN's sign bit is not read (False)."""
    if x.dtype.kind != "f":
        shape, _ = out_meta(node)
        return ctx.emit("LESS", [ctx.cast(x, np.int32), ctx.const(np.zeros((), np.int32))], shape, np.bool_)
    return _sign_bit(ctx, x)


@lowers(aten.copysign.Tensor)
def lower_copysign(ctx, node, a, b) -> ir.Tensor:
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor

    |a| with the sign of b (-0.0's included): SELECT_V2(signbit(b), -|a|, |a|), operands broadcast.

    Limits: a NaN b gives |a| whatever its sign bit."""
    shape, dtype = out_meta(node)
    a, b = operand(ctx, a, dtype), operand(ctx, b, dtype)
    magnitude = ctx.emit("ABS", [a], like=a)
    negative = _sign_bit(ctx, b)
    return ctx.emit("SELECT_V2", [negative, ctx.emit("NEG", [magnitude], like=magnitude), magnitude], shape, dtype)


def _bits(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """The int32 bit pattern of float32 values."""
    return ctx.emit("BITCAST", [x], x.shape, np.int32)


def _float_of(ctx: LoweringContext, bits: ir.Tensor) -> ir.Tensor:
    return ctx.emit("BITCAST", [bits], bits.shape, np.float32)


def _int_scalar(ctx: LoweringContext, value: int) -> ir.Tensor:
    return ctx.const(np.array(value, np.int32), name="k")


@lowers(aten.special_spherical_bessel_j0.default)
def lower_spherical_bessel_j0(ctx, node, x) -> ir.Tensor:
    """special_spherical_bessel_j0(Tensor x) -> Tensor

    sin(x) / x, as PyTorch computes it: its Taylor polynomial in x**2 (to x**12) below |x| = 0.5, SIN / x
    above; 0 at +-inf, NaN for NaN."""
    shape, dtype = out_meta(node)
    x = ctx.cast(x, np.float32)
    t2 = _op(ctx, "MUL", x, x)
    poly = None
    for k in range(6, -1, -1):  # sum of (-1)**k x**(2k) / (2k + 1)!, by Horner's rule
        c = (-1.0) ** k / math.factorial(2 * k + 1)
        poly = ctx.scalar_like(c, x) if poly is None else _plus(ctx, _op(ctx, "MUL", poly, t2), c)
    ratio = _op(ctx, "DIV", _op(ctx, "SIN", x), x)
    small = ctx.emit("LESS", [_op(ctx, "ABS", x), ctx.scalar_like(0.5, x)], x.shape, np.bool_)
    out = ctx.emit("SELECT_V2", [small, poly, ratio], like=x)
    infinite = ctx.emit("EQUAL", [_op(ctx, "ABS", x), ctx.scalar_like(np.inf, x)], x.shape, np.bool_)
    return ctx.cast(ctx.emit("SELECT_V2", [infinite, ctx.scalar_like(0.0, x), out], like=x), dtype)


@lowers(aten.nextafter.default)
def lower_nextafter(ctx, node, x, y) -> ir.Tensor:
    """nextafter(Tensor self, Tensor other) -> Tensor

    The float32 next to x towards y: x's bit pattern plus or minus one (up for a positive x moving up or a
    negative one moving down), the smallest subnormal with y's direction from 0, y itself where x == y, NaN
    where either is."""
    shape, dtype = out_meta(node)
    if np.dtype(dtype) != np.float32:
        raise ctx.fail(f"nextafter in {np.dtype(dtype)} has no lowering (float32)")
    x, y = operand(ctx, x, dtype), operand(ctx, y, dtype)
    if list(x.shape) != list(shape):
        x = ctx.emit("BROADCAST_TO", [x, ctx.dims_tensor(shape)], shape, x.dtype)
    zero = ctx.scalar_like(0.0, x)
    up = ctx.emit("GREATER", [y, x], shape, np.bool_)
    positive = ctx.emit("GREATER", [x, zero], shape, np.bool_)
    away = ctx.emit("EQUAL", [up, positive], shape, np.bool_)  # the magnitude grows
    bits = _bits(ctx, x)
    step = ctx.emit("SELECT_V2", [away, _int_scalar(ctx, 1), _int_scalar(ctx, -1)], shape, np.int32)
    moved = ctx.emit("ADD", [bits, step], shape, np.int32, fused_activation_function="NONE")
    # from +-0: the smallest subnormal of y's sign (bit patterns 1 and 0x80000001)
    from_zero = ctx.emit("SELECT_V2", [up, _int_scalar(ctx, 1), _int_scalar(ctx, -2147483647)], shape, np.int32)
    at_zero = ctx.emit("EQUAL", [x, zero], shape, np.bool_)
    out = _float_of(ctx, ctx.emit("SELECT_V2", [at_zero, from_zero, moved], shape, np.int32))
    same = ctx.emit("EQUAL", [x, y], shape, np.bool_)
    out = ctx.emit("SELECT_V2", [same, y, out], shape, np.float32)
    either_nan = ctx.emit("LOGICAL_OR", [ctx.emit("NOT_EQUAL", [x, x], shape, np.bool_),
                                         ctx.emit("NOT_EQUAL", [y, y], shape, np.bool_)], shape, np.bool_)
    return ctx.emit("SELECT_V2", [either_nan, ctx.scalar_like(np.nan, x), out], shape, np.float32)


@lowers(aten.frexp.Tensor)
def lower_frexp(ctx, node, x) -> tuple[ir.Tensor, ir.Tensor]:
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)

    (mantissa, exponent) with x = mantissa * 2**exponent and 0.5 <= |mantissa| < 1, read from the bit
    pattern in integer ops (a subnormal's fraction bits converted to float first, which normalises them, so no
    float op ever sees a subnormal); 0, inf and NaN give (x, 0), as PyTorch."""
    if np.dtype(x.dtype) != np.float32:
        raise ctx.fail(f"frexp of {np.dtype(x.dtype)} has no lowering (float32)")
    shape = list(x.shape)

    def i32(opcode, a, b):
        return ctx.emit(opcode, [a, b], shape, np.int32, fused_activation_function="NONE")

    bits = _bits(ctx, x)
    negative = ctx.emit("LESS", [bits, _int_scalar(ctx, 0)], shape, np.bool_)  # the sign bit, -0.0's too
    magnitude = ctx.emit("SELECT_V2", [negative, i32("SUB", bits, _int_scalar(ctx, -2147483648)), bits], shape,
                         np.int32)
    tiny = ctx.emit("LESS", [magnitude, _int_scalar(ctx, 1 << 23)], shape, np.bool_)
    normalised = _bits(ctx, ctx.cast(magnitude, np.float32))  # a subnormal's fraction, exactly, as a normal float
    work = ctx.emit("SELECT_V2", [tiny, normalised, magnitude], shape, np.int32)
    biased = ctx.emit("RIGHT_SHIFT", [work, _int_scalar(ctx, 23)], shape, np.int32)
    fraction = i32("SUB", work, i32("MUL", biased, _int_scalar(ctx, 1 << 23)))
    half = _float_of(ctx, i32("ADD", fraction, _int_scalar(ctx, 126 << 23)))
    exponent = i32("SUB", biased, ctx.emit("SELECT_V2", [tiny, _int_scalar(ctx, 126 + 149), _int_scalar(ctx, 126)],
                                           shape, np.int32))
    mantissa = ctx.emit("SELECT_V2", [negative, ctx.emit("NEG", [half], like=half), half], like=x)
    plain = ctx.emit("LOGICAL_OR", [ctx.emit("EQUAL", [magnitude, _int_scalar(ctx, 0)], shape, np.bool_),
                                    ctx.emit("GREATER_EQUAL", [magnitude, _int_scalar(ctx, 0x7F800000)], shape,
                                             np.bool_)], shape, np.bool_)  # 0, inf and NaN
    mantissa = ctx.emit("SELECT_V2", [plain, x, mantissa], like=x)
    exponent = ctx.emit("SELECT_V2", [plain, _int_scalar(ctx, 0), exponent], shape, np.int32)
    return mantissa, exponent


@lowers(aten.isinf.default)
def lower_isinf(ctx, node, x) -> ir.Tensor:
    """isinf(Tensor self) -> Tensor

    |x| == inf (integers are never infinite)."""
    shape, _ = out_meta(node)
    if x.dtype.kind != "f":
        return ctx.const(np.zeros(shape, np.bool_))
    return ctx.emit("EQUAL", [ctx.emit("ABS", [x], like=x), ctx.scalar_like(np.inf, x)], shape, np.bool_)


# The largest [..., P, R, M] difference tensor cdist materialises (elements).
MAX_CDIST_DIFFERENCES = 1 << 24


@lowers(aten._cdist_forward.default)
def lower_cdist(ctx, node, x1, x2, p, compute_mode=None) -> ir.Tensor:
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor

    Pairwise p-norm distances of the rows of x1 [..., P, M] and x2 [..., R, M], computed the way PyTorch
    chooses: for p = 2 with more than 25 rows on a side (or compute_mode 1), sqrt(max(|a|^2 + |b|^2 - 2 a.b,
    1e-30)) with one BATCH_MATMUL; otherwise from the differences [..., P, R, M]: SUM of squares and SQRT
    (p = 2), SUM of ABS (p = 1), REDUCE_MAX of ABS (p = inf), the count of nonzero ones (p = 0), POW else.

    Limits: the differences tensor holds at most MAX_CDIST_DIFFERENCES elements; static sizes."""
    shape, dtype = out_meta(node)
    if dtype.kind != "f":
        raise ctx.fail(f"cdist of {dtype} values has no lowering")
    p = float(p)
    mode = 0 if compute_mode is None else int(compute_mode)
    rows1, rows2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    batch = tuple(shape[:-2])
    if not all(isinstance(d, int) for d in (*shape, m)):
        raise ctx.fail("cdist over dynamic sizes has no lowering")
    a = ctx.emit("BROADCAST_TO", [x1, ctx.dims_tensor([*batch, rows1, m])], [*batch, rows1, m], dtype) \
        if tuple(x1.shape[:-2]) != batch else x1
    b = ctx.emit("BROADCAST_TO", [x2, ctx.dims_tensor([*batch, rows2, m])], [*batch, rows2, m], dtype) \
        if tuple(x2.shape[:-2]) != batch else x2
    if p == 2 and (mode == 1 or (mode == 0 and (rows1 > 25 or rows2 > 25))):
        norms1 = ctx.emit("SUM", [ctx.emit("MUL", [a, a], like=a), ctx.const(np.array([-1], np.int32), name="axis")],
                          [*batch, rows1, 1], dtype, keep_dims=True)
        norms2 = ctx.emit("SUM", [ctx.emit("MUL", [b, b], like=b), ctx.const(np.array([-1], np.int32), name="axis")],
                          [*batch, rows2, 1], dtype, keep_dims=True)
        dots = ctx.emit("BATCH_MATMUL", [a, b], shape, dtype, adj_x=False, adj_y=True, asymmetric_quantize_inputs=False)
        norms2 = ctx.reshape(norms2, [*batch, 1, rows2])
        total = ctx.emit("ADD", [ctx.emit("ADD", [norms1, norms2], shape, dtype),
                                 ctx.emit("MUL", [dots, ctx.scalar_like(-2.0, dots)], like=dots)], shape, dtype)
        total = ctx.emit("MAXIMUM", [ctx.scalar_like(1e-30, total), total], like=total)
        return exact.sqrt(ctx, total)
    size = int(np.prod([*batch, rows1, rows2, m], dtype=np.int64))
    if size > MAX_CDIST_DIFFERENCES:
        raise ctx.fail(f"cdist of {rows1} x {rows2} rows of {m} values would hold {size} differences (the limit is "
                       f"{MAX_CDIST_DIFFERENCES})")
    diff = ctx.emit("SUB", [ctx.reshape(a, [*batch, rows1, 1, m]), ctx.reshape(b, [*batch, 1, rows2, m])],
                    [*batch, rows1, rows2, m], dtype)
    axis = ctx.const(np.array([-1], np.int32), name="axis")
    if p == 2:
        return exact.sqrt(ctx, ctx.emit("SUM", [ctx.emit("MUL", [diff, diff], like=diff), axis], shape, dtype,
                                        keep_dims=False))
    magnitude = ctx.emit("ABS", [diff], like=diff)
    if p == 1:
        return ctx.emit("SUM", [magnitude, axis], shape, dtype, keep_dims=False)
    if p == float("inf"):
        return ctx.emit("REDUCE_MAX", [magnitude, axis], shape, dtype, keep_dims=False)
    if p == 0:
        nonzero = ctx.cast(ctx.emit("NOT_EQUAL", [diff, ctx.scalar_like(0.0, diff)], diff.shape, np.bool_), dtype)
        return ctx.emit("SUM", [nonzero, axis], shape, dtype, keep_dims=False)
    if p < 0:
        raise ctx.fail(f"cdist with p={p} is not defined (p must be non-negative)")
    powered = ctx.emit("POW", [magnitude, ctx.scalar_like(p, magnitude)], like=magnitude)
    total = ctx.emit("SUM", [powered, axis], shape, dtype, keep_dims=False)
    return ctx.emit("POW", [total, ctx.scalar_like(1.0 / p, total)], like=total)


# ---- NaN-aware extremes, hypot, ldexp, dist ------------------------------------------------------------------
def _may_be_nan(x: ir.Tensor) -> bool:
    return x.dtype.kind == "f" and not (x.is_constant and not np.isnan(x.values).any())


def extreme(ctx: LoweringContext, opcode: str, a: ir.Tensor, b: ir.Tensor, shape, *, propagate: bool) -> ir.Tensor:
    """MAXIMUM / MINIMUM of two float tensors (broadcasting) with PyTorch's NaN rule: NaN where either operand is
    (`propagate`: maximum, minimum, clamp), or the other operand where one is, NaN only where both are (fmax,
    fmin). LiteRT's kernels give one operand or the other where one is NaN (XNNPACK on x86 the second), so each
    operand that can hold NaN (not a constant without one) is tested and selected explicitly."""
    out = ctx.emit(opcode, [a, b], shape, a.dtype)
    for x, other in ((b, a), (a, b)):
        if _may_be_nan(x):
            out = ctx.emit("SELECT_V2", [exact.is_nan(ctx, x), x if propagate else other, out], shape, a.dtype)
    return out


def _extreme_lowering(ctx, node, opcode: str, a, b, propagate: bool) -> ir.Tensor:
    shape, dtype = out_meta(node)
    if dtype.kind != "f":
        from litert_torch.lower.aten.elementwise import binary

        return binary(ctx, node, opcode, a, b)
    return extreme(ctx, opcode, operand(ctx, a, dtype), operand(ctx, b, dtype), shape, propagate=propagate)


@lowers(aten.maximum.default)
def lower_maximum(ctx, node, a, b) -> ir.Tensor:
    """maximum(Tensor self, Tensor other) -> Tensor

    The larger operand, NaN where either is (MAXIMUM, and SELECT_V2 on a float operand that can hold NaN)."""
    return _extreme_lowering(ctx, node, "MAXIMUM", a, b, propagate=True)


@lowers(aten.minimum.default)
def lower_minimum(ctx, node, a, b) -> ir.Tensor:
    """minimum(Tensor self, Tensor other) -> Tensor

    The smaller operand, NaN where either is (MINIMUM, and SELECT_V2 on a float operand that can hold NaN)."""
    return _extreme_lowering(ctx, node, "MINIMUM", a, b, propagate=True)


@lowers(aten.fmax.default)
def lower_fmax(ctx, node, a, b) -> ir.Tensor:
    """fmax(Tensor self, Tensor other) -> Tensor

    The larger operand, the other one where one is NaN (MAXIMUM and SELECT_V2)."""
    return _extreme_lowering(ctx, node, "MAXIMUM", a, b, propagate=False)


@lowers(aten.fmin.default)
def lower_fmin(ctx, node, a, b) -> ir.Tensor:
    """fmin(Tensor self, Tensor other) -> Tensor

    The smaller operand, the other one where one is NaN (MINIMUM and SELECT_V2)."""
    return _extreme_lowering(ctx, node, "MINIMUM", a, b, propagate=False)


@lowers(aten.hypot.default)
def lower_hypot(ctx, node, a, b) -> ir.Tensor:
    """hypot(Tensor self, Tensor other) -> Tensor

    sqrt(a**2 + b**2) without overflow or underflow: m * sqrt(1 + (n / m)**2) with m, n the larger and smaller
    magnitude (0 where m is), +inf where either is infinite (even with a NaN), as C's hypot."""
    shape, dtype = out_meta(node)
    wide = np.dtype(np.float32)
    a = _broadcast_to(ctx, _abs(ctx, operand(ctx, a, wide)), shape)
    b = _broadcast_to(ctx, _abs(ctx, operand(ctx, b, wide)), shape)
    big = ctx.emit("MAXIMUM", [a, b], shape, wide)
    small = ctx.emit("MINIMUM", [a, b], shape, wide)
    zero = ctx.emit("EQUAL", [big, ctx.scalar_like(0.0, big)], shape, np.bool_)
    ratio = ctx.emit("DIV", [small, ctx.emit("SELECT_V2", [zero, ctx.scalar_like(1.0, big), big], like=big)],
                     like=big)
    root = exact.sqrt(ctx, _plus(ctx, ctx.emit("MUL", [ratio, ratio], like=ratio), 1.0))
    out = ctx.emit("MUL", [big, root], like=big)
    nan = ctx.emit("LOGICAL_OR", [exact.is_nan(ctx, a), exact.is_nan(ctx, b)], shape, np.bool_)
    out = ctx.emit("SELECT_V2", [nan, ctx.scalar_like(np.nan, out), out], like=out)
    infinite = ctx.emit("LOGICAL_OR", [ctx.emit("EQUAL", [a, ctx.scalar_like(np.inf, a)], shape, np.bool_),
                                       ctx.emit("EQUAL", [b, ctx.scalar_like(np.inf, b)], shape, np.bool_)],
                        shape, np.bool_)
    out = ctx.emit("SELECT_V2", [infinite, ctx.scalar_like(np.inf, out), out], like=out)
    return ctx.cast(out, dtype)


def _abs(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    return ctx.emit("ABS", [x], like=x)


@lowers(aten.ldexp.Tensor)
def lower_ldexp(ctx, node, a, b) -> ir.Tensor:
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor

    a * 2**b, as PyTorch computes it (the power in floating point)."""
    shape, dtype = out_meta(node)
    power = ctx.emit("POW", [ctx.const(np.array(2.0, dtype), name="two"), operand(ctx, b, dtype)],
                     tuple(b.shape) if isinstance(b, ir.Tensor) else (), dtype)
    return ctx.emit("MUL", [operand(ctx, a, dtype), power], shape, dtype, fused_activation_function="NONE")


@lowers(aten.dist.default)
def lower_dist(ctx, node, a, b, p=2) -> ir.Tensor:
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor

    The p-norm of a - b over every element: sqrt(sum(d**2)) for p = 2, the count of nonzero differences for
    p = 0, max / min |d| for p = +-inf, sum(|d|**p)**(1/p) otherwise."""
    shape, dtype = out_meta(node)
    a_shape = tuple(a.shape) if isinstance(a, ir.Tensor) else ()
    b_shape = tuple(b.shape) if isinstance(b, ir.Tensor) else ()
    both = tuple(broadcast_shapes(a_shape, b_shape))
    d = _abs(ctx, ctx.emit("SUB", [operand(ctx, a, dtype), operand(ctx, b, dtype)], both, dtype))
    p = float(p)
    if not both:
        d = ctx.reshape(d, (1,))
    axes = ctx.const(np.arange(max(len(both), 1), dtype=np.int32), name="axes")

    def over_all(opcode, t):
        return ctx.emit(opcode, [t, axes], (), t.dtype, keep_dims=False)

    if p == 0:
        nonzero = ctx.cast(ctx.emit("NOT_EQUAL", [d, ctx.scalar_like(0.0, d)], d.shape, np.bool_), dtype)
        return over_all("SUM", nonzero)
    if np.isinf(p):
        out = over_all("REDUCE_MAX" if p > 0 else "REDUCE_MIN", d)
        nan = over_all("REDUCE_ANY", exact.is_nan(ctx, d))
        return ctx.emit("SELECT_V2", [nan, ctx.scalar_like(np.nan, out), out], like=out)
    if p == 2:
        return exact.sqrt(ctx, over_all("SUM", ctx.emit("MUL", [d, d], like=d)))
    if p == 1:
        return over_all("SUM", d)
    total = over_all("SUM", ctx.emit("POW", [d, ctx.scalar_like(p, d)], like=d))
    return ctx.emit("POW", [total, ctx.scalar_like(1.0 / p, total)], like=total)


@lowers(aten.narrow_copy.default)
def lower_narrow_copy(ctx, node, x, dim, start, length) -> ir.Tensor:
    """narrow_copy(Tensor self, int dim, SymInt start, SymInt length) -> Tensor

    SLICE of `length` positions from `start` along `dim` (a negative start counts from the end)."""
    axis = dim + x.rank if dim < 0 else dim
    size = x.shape[axis]
    begin = start + size if isinstance(start, int) and start < 0 else start
    begins, sizes = [0] * x.rank, list(x.shape)
    begins[axis], sizes[axis] = begin, length
    return ctx.slice(x, begins, sizes)


@lowers(aten.logcumsumexp.default)
def lower_logcumsumexp(ctx, node, x, dim) -> ir.Tensor:
    """logcumsumexp(Tensor self, int dim) -> Tensor

    log(cumsum(exp(x))) along `dim` without overflow: a doubling scan of logaddexp(a, b) = max + log1p(exp(
    -|a - b|)), -inf and +inf kept where the larger operand is one, NaN where either is."""
    shape, dtype = out_meta(node)
    if dtype.kind != "f":
        raise ctx.fail(f"logcumsumexp of {dtype} values has no lowering")
    work = np.dtype(np.float32)
    x = ctx.cast(x, work)
    if x.rank == 0:
        return ctx.cast(x, dtype)

    def add_exp(earlier, later):
        a, b = earlier[0], later[0]
        big = ctx.emit("MAXIMUM", [a, b], like=b)
        gap = ctx.emit("NEG", [ctx.emit("ABS", [ctx.emit("SUB", [a, b], like=b)], like=b)], like=b)
        out = ctx.emit("ADD", [big, log1p(ctx, ctx.emit("EXP", [gap], like=b))], like=b)
        infinite = ctx.emit("EQUAL", [ctx.emit("ABS", [big], like=b), ctx.scalar_like(np.inf, b)], b.shape,
                            np.bool_)
        out = ctx.emit("SELECT_V2", [infinite, big, out], like=b)
        nan = ctx.emit("LOGICAL_OR", [exact.is_nan(ctx, a), exact.is_nan(ctx, b)], b.shape, np.bool_)
        return [ctx.emit("SELECT_V2", [nan, ctx.scalar_like(np.nan, b), out], like=b)]

    return ctx.cast(scan_along(ctx, [x], normalize_dim(dim, x.rank), [-np.inf], add_exp)[0], dtype)
