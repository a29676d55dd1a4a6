"""LOG, SQRT, RSQRT, EXP and erf in forms that are right over the whole float32 range on every kernel set.

LiteRT picks its XNNPACK kernels by the CPU, and some are wrong at the ends of the float32 range. Measured on an
AVX2 machine (single-op models, every float32 bit pattern sampled, against float64):

- LOG returns 88.376 for every x >= 2.4e38, for +inf, and for NaN;
- SQRT and RSQRT are off by half their value for x >= 2**126 (8.5e37), and RSQRT(+-0) is NaN, not +-inf;
- EXP overflows to inf for x in (88.38, 88.72], where e**x is still below FLT_MAX (and returned 0 for NaN on
  another machine).

The builtin (reference) kernels are right. The forms below keep each kernel inside the range where it is right,
with exact operations (multiplying by powers of two, MINIMUM / MAXIMUM with constants), so the model is right
whichever kernels run it, and stay in ops XNNPACK takes where they can (a comparison or SELECT would split its
partition). Inputs in the denormal range may be read as zero (XNNPACK flushes them), as elsewhere.

NaN: MINIMUM / MAXIMUM put the tensor that may hold NaN second, where LiteRT's builtin kernels (`a > b ? a : b`),
XNNPACK on x86 (which returns the second operand) and on Arm (which propagates NaN) all return it.

Where the input is known to be at least a small positive bound (rsqrt(var + eps) in a normalisation),
`lower_bound` sees it and a cheaper form is used.
"""

from __future__ import annotations

import math

import numpy as np

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext

FLOAT_MAX = float(np.finfo(np.float32).max)
_SPLIT = 2.0 ** 100  # SQRT, RSQRT and LOG are right below 2**126; large inputs are split or scaled past this
_SCALE_EXP = 8  # large inputs are multiplied by 2**-8 (exact) before SQRT / RSQRT
_SAFE_LOW = 2.0 ** -100  # inputs at least this large stay normal after that scaling


def _bool(ctx: LoweringContext, opcode: str, a: ir.Tensor, b: ir.Tensor) -> ir.Tensor:
    return ctx.emit(opcode, [a, b], a.shape, np.bool_)


def _pick(ctx: LoweringContext, cond: ir.Tensor, a: ir.Tensor, b: ir.Tensor, like: ir.Tensor) -> ir.Tensor:
    """SELECT_V2(cond, a, b) with the result shaped like `like` (a and b may be scalars)."""
    return ctx.emit("SELECT_V2", [cond, a, b], like=like)


def _scaled(ctx: LoweringContext, x: ir.Tensor, factor: float) -> ir.Tensor:
    return ctx.emit("MUL", [x, ctx.scalar_like(factor, x)], like=x)


def is_nan(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """NOT_EQUAL(x, x): true exactly where x is NaN."""
    return _bool(ctx, "NOT_EQUAL", x, x)


def keep_nan(ctx: LoweringContext, x: ir.Tensor, y: ir.Tensor) -> ir.Tensor:
    """y, with NaN wherever x is NaN."""
    return _pick(ctx, is_nan(ctx, x), x, y, y)


def exp(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """e**x as EXP(x / 2) squared (no early overflow near the top of the range), NaN passed through."""
    half = ctx.emit("EXP", [_scaled(ctx, x, 0.5)], like=x)
    return keep_nan(ctx, x, ctx.emit("SQUARE", [half], like=x))


def log(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """log(x) = LOG(min(x, 2**100)) + LOG(max(x * 2**-100, 1)): the first term is x's own LOG up to 2**100, the
    second is 0 there and log(x) - 100 log 2 above (MINIMUM, LOG, MUL, MAXIMUM, LOG, ADD); then +inf and NaN
    are passed through (LESS_EQUAL, SELECT_V2)."""
    low = ctx.emit("LOG", [ctx.emit("MINIMUM", [ctx.scalar_like(_SPLIT, x), x], like=x)], like=x)
    high = ctx.emit("LOG", [ctx.emit("MAXIMUM", [ctx.scalar_like(1.0, x), _scaled(ctx, x, 1.0 / _SPLIT)],
                                     like=x)], like=x)
    y = ctx.emit("ADD", [low, high], like=x)
    finite = _bool(ctx, "LESS_EQUAL", x, ctx.scalar_like(FLOAT_MAX, x))  # false for +inf and NaN
    return _pick(ctx, finite, y, x, x)


def sqrt(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """sqrt(x) = max(SQRT(x * 2**-8) * 2**4, SQRT(min(x, 2**100))): the first is right from 2**-118 on, the
    second up to 2**100 (MUL, SQRT, MUL, MINIMUM, SQRT, MAXIMUM). When x is known to be at least 2**-100, the second
    alone (MUL, SQRT, MUL)."""
    root = ctx.emit("SQRT", [_scaled(ctx, x, 2.0 ** -_SCALE_EXP)], like=x)
    high = _scaled(ctx, root, 2.0 ** (_SCALE_EXP // 2))
    if _at_least(ctx, x, _SAFE_LOW):
        return high
    low = ctx.emit("SQRT", [ctx.emit("MINIMUM", [ctx.scalar_like(_SPLIT, x), x], like=x)], like=x)
    # `low` second: it is NaN for every negative or NaN x (`high` is -0 for a tiny negative x, flushed)
    return ctx.emit("MAXIMUM", [high, low], like=x)


def rsqrt(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """1 / sqrt(x). When x is known to be at least 2**-100 (a variance plus epsilon): RSQRT(x * 2**-8) * 2**-4.
    Otherwise 1 / `sqrt(x)`, which is +-inf at +-0 where RSQRT gives NaN."""
    if _at_least(ctx, x, _SAFE_LOW):
        inv = ctx.emit("RSQRT", [_scaled(ctx, x, 2.0 ** -_SCALE_EXP)], like=x)
        return _scaled(ctx, inv, 2.0 ** -(_SCALE_EXP // 2))
    return ctx.emit("DIV", [ctx.scalar_like(1.0, x), sqrt(ctx, x)], like=x)


# erf below this magnitude comes from its Maclaurin series (7 terms: the first omitted one is under 1e-9 of the
# result there), above it from 2 * GELU(sqrt(2) x) / (sqrt(2) x) - 1 on x clamped to +-6 (erf is +-1 in float32
# beyond 4), so that tiny GELU values flushed to zero and inf / inf never reach the quotient.
_ERF_SERIES_LIMIT = 0.5
_ERF_TERMS = 7
_ERF_CLAMP = 6.0


def erf(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """erf(x) for every float32 x, NaN passed through (TFLite has no erf builtin)."""
    x2 = ctx.emit("MUL", [x, x], like=x)
    coefficients = [2.0 / math.sqrt(math.pi) * (-1.0) ** n / (math.factorial(n) * (2 * n + 1))
                    for n in range(_ERF_TERMS)]
    acc = ctx.scalar_like(coefficients[-1], x)
    for c in reversed(coefficients[:-1]):
        acc = ctx.emit("ADD", [ctx.emit("MUL", [acc, x2], like=x), ctx.scalar_like(c, x)], like=x)
    near = ctx.emit("MUL", [acc, x], like=x)
    clamped = ctx.emit("MAXIMUM", [ctx.emit("MINIMUM", [x, ctx.scalar_like(_ERF_CLAMP, x)], like=x),
                                   ctx.scalar_like(-_ERF_CLAMP, x)], like=x)
    scaled = ctx.emit("MUL", [clamped, ctx.scalar_like(math.sqrt(2.0), x)], like=x)
    ratio = ctx.emit("DIV", [ctx.emit("GELU", [scaled], like=x, approximate=False), scaled], like=x)
    far = ctx.emit("SUB", [ctx.emit("MUL", [ratio, ctx.scalar_like(2.0, x)], like=x), ctx.scalar_like(1.0, x)],
                   like=x)
    small = _bool(ctx, "LESS", ctx.emit("ABS", [x], like=x), ctx.scalar_like(_ERF_SERIES_LIMIT, x))
    return keep_nan(ctx, x, _pick(ctx, small, near, far, x))


# ---- what is known of a tensor's range ---------------------------------------------------------------------
_NON_NEGATIVE = {"SQUARE", "SQUARED_DIFFERENCE", "ABS", "RELU", "RELU6", "RELU_0_TO_1", "EXP", "LOGISTIC",
                 "SQRT"}
_PRODUCER_SEARCH = 64  # how far back in the ops emitted so far a producer is looked for


def _producer(ctx: LoweringContext, t: ir.Tensor) -> ir.Op | None:
    ops = ctx.graph.ops
    for op in reversed(ops[-_PRODUCER_SEARCH:]):
        if any(o is t for o in op.outputs):
            return op
    return None


def lower_bound(ctx: LoweringContext, t: ir.Tensor, depth: int = 6) -> float | None:
    """A value every element of `t` is known to be at least (NaN aside), from the ops that made it, or None."""
    if t.is_constant:
        data = np.asarray(t.data)
        return float(data.min()) if data.size and data.dtype.kind == "f" and not np.isnan(data).any() else None
    op = _producer(ctx, t) if depth > 0 else None
    if op is None:
        return None
    if op.opcode in _NON_NEGATIVE or (op.opcode == "MUL" and len(op.inputs) == 2 and op.inputs[0] is op.inputs[1]):
        return 0.0
    bounds = [lower_bound(ctx, i, depth - 1) if i is not None else None for i in op.inputs[:2]]
    first, second = (bounds + [None, None])[:2]
    if op.opcode == "ADD" and op.options.get("fused_activation_function", "NONE") == "NONE" and \
            first is not None and second is not None:
        return first + second
    if op.opcode == "MUL" and first is not None and second is not None and min(first, second) >= 0:
        return first * second
    if op.opcode in ("MEAN", "REDUCE_MAX", "REDUCE_MIN") and first is not None:
        return first
    if op.opcode == "SUM" and first is not None and first >= 0:
        return 0.0
    return None


def _at_least(ctx: LoweringContext, t: ir.Tensor, bound: float) -> bool:
    low = lower_bound(ctx, t)
    return low is not None and low >= bound
