"""The gamma family: lgamma, digamma and polygamma, in float32 to a few units of the last place over the whole
input range.

Positive arguments are shifted up by SHIFT (each shift step's term summed exactly as the recurrences give it) to
where the asymptotic (Stirling / Bernoulli) series is accurate to float32 with BERNOULLI terms. Negative arguments
use the reflection formulas, with sin and cos of pi * t for t = x - round(x) in [-1/2, 1/2], so that the poles at
the non-positive integers keep their digits whatever the size of x:

    lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)
    psi_n(x) = (-1)**n psi_n(1 - x) - pi * d^n/dx^n cot(pi x)

(the n-th derivative of cot(pi x) is pi**n P_n(cot(pi x)) for the polynomial P_0(c) = c,
P_{k+1}(c) = -(1 + c**2) P_k'(c), computed at conversion).

At the poles lgamma is +inf, digamma -1/x (its sign follows the zero's) or NaN, and polygamma (-1)**(n+1) inf;
at +inf lgamma and digamma are +inf and polygamma 0; digamma and polygamma are NaN at -inf (lgamma +inf).

Limits: polygamma orders above MAX_ORDER (the series' accuracy falls with the order).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.aten.math_ops import _sin_near_zero
from litert_torch.lower.common.registry import lowers, out_meta
from litert_torch.symbolic import broadcast_shapes

aten = torch.ops.aten

SHIFT = 16
LARGE = 1024.0  # from here on the series needs no shift
MAX_ORDER = 16
# B_2, B_4, ..., B_16
_BERNOULLI = [Fraction(1, 6), Fraction(-1, 30), Fraction(1, 42), Fraction(-1, 30), Fraction(5, 66),
              Fraction(-691, 2730), Fraction(7, 6), Fraction(-3617, 510)]


# ---- float32 helpers (shared with lower/aten/fitted.py) -----------------------------------------------------------
def float_op(ctx, opcode, *inputs) -> ir.Tensor:
    """`opcode` of float32 operands, broadcast (a scalar constant may come first)."""
    opts = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL", "DIV") else {}
    shape = broadcast_shapes(*[tuple(t.shape) for t in inputs])
    return ctx.emit(opcode, list(inputs), shape, np.float32, **opts)


def scalar(ctx, value: float, like: ir.Tensor) -> ir.Tensor:
    return ctx.scalar_like(value, like)


def select(ctx, cond, a, b) -> ir.Tensor:
    """SELECT_V2 of float32 operands, broadcast."""
    shape = broadcast_shapes(tuple(cond.shape), tuple(a.shape), tuple(b.shape))
    return ctx.emit("SELECT_V2", [cond, a, b], shape, np.float32)


def compare(ctx, opcode, x, value) -> ir.Tensor:
    return ctx.emit(opcode, [x, scalar(ctx, value, x)], x.shape, np.bool_)


def _poly(ctx, x: ir.Tensor, coefficients: list[float]) -> ir.Tensor:
    """c0 + c1 x + c2 x**2 + ... by Horner's rule."""
    acc = scalar(ctx, coefficients[-1], x)
    for c in reversed(coefficients[:-1]):
        acc = float_op(ctx, "ADD", float_op(ctx, "MUL", acc, x), scalar(ctx, c, x))
    return acc


def _power(ctx, x: ir.Tensor, k: int) -> ir.Tensor:
    """x**k for a small positive integer k, by squaring."""
    if k < 1:
        raise ValueError(f"_power takes a positive exponent, not {k}")
    out: ir.Tensor | None = None
    base = x
    while k:
        if k & 1:
            out = base if out is None else float_op(ctx, "MUL", out, base)
        k >>= 1
        if k:
            base = float_op(ctx, "MUL", base, base)
    if out is None:  # never: a positive k has a set bit
        raise ValueError("x**k with no factor")
    return out


def _float(ctx, node, x) -> tuple[ir.Tensor, np.dtype]:
    _, dtype = out_meta(node)
    return ctx.cast(x, np.float32), dtype


def _fraction_part(ctx, x: ir.Tensor) -> ir.Tensor:
    """t = x - round(x), in [-1/2, 1/2] (exact)."""
    return float_op(ctx, "SUB", x, ctx.emit("ROUND", [x], like=x))


def _sin_cos_pi(ctx, t: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """(sin(pi t), cos(pi t)) for t in [-1/2, 1/2], each with a small relative error near its zeros."""
    sin = _sin_near_zero(ctx, float_op(ctx, "MUL", t, scalar(ctx, math.pi, t)))
    rest = float_op(ctx, "SUB", scalar(ctx, 0.5, t), ctx.emit("ABS", [t], like=t))  # exact
    cos = _sin_near_zero(ctx, float_op(ctx, "MUL", rest, scalar(ctx, math.pi, t)))
    return sin, cos


def _is_pole(ctx, x: ir.Tensor) -> ir.Tensor:
    """x is 0 or a negative integer (not -inf)."""
    integer = ctx.emit("EQUAL", [x, ctx.emit("FLOOR", [x], like=x)], x.shape, np.bool_)
    return ctx.emit("LOGICAL_AND", [ctx.emit("LOGICAL_AND", [integer, compare(ctx, "LESS_EQUAL", x, 0.0)],
                                             x.shape, np.bool_), compare(ctx, "GREATER", x, -np.inf)],
                    x.shape, np.bool_)


# ---- lgamma ------------------------------------------------------------------------------------------------
def _lgamma_positive(ctx, x: ir.Tensor) -> ir.Tensor:
    """lgamma for x > 0: Stirling's series at w = x + 8 less log(x (x+1) ... (x+7)), or at x itself from 8 on
    (where the product could overflow)."""
    shifted = float_op(ctx, "ADD", x, scalar(ctx, 8.0, x))
    product = x
    for k in range(1, 8):
        product = float_op(ctx, "MUL", product, float_op(ctx, "ADD", x, scalar(ctx, float(k), x)))
    large = compare(ctx, "GREATER_EQUAL", x, 8.0)
    w = select(ctx, large, x, shifted)
    log_w = exact.log(ctx, w)
    inv = float_op(ctx, "DIV", scalar(ctx, 1.0, w), w)
    inv2 = float_op(ctx, "MUL", inv, inv)
    # 1/(12 w) - 1/(360 w^3) + 1/(1260 w^5) - 1/(1680 w^7)
    tail = float_op(ctx, "MUL", inv, _poly(ctx, inv2, [1 / 12, -1 / 360, 1 / 1260, -1 / 1680]))
    main = float_op(ctx, "SUB", float_op(ctx, "MUL", float_op(ctx, "SUB", w, scalar(ctx, 0.5, w)), log_w), w)
    out = float_op(ctx, "ADD", float_op(ctx, "ADD", main, scalar(ctx, 0.5 * math.log(2 * math.pi), main)), tail)
    correction = select(ctx, large, scalar(ctx, 0.0, x), exact.log(ctx, product))
    return float_op(ctx, "SUB", out, correction)


@lowers(aten.lgamma.default)
def lower_lgamma(ctx, node, x) -> ir.Tensor:
    """lgamma(Tensor self) -> Tensor

    log|Gamma(x)| (module notes): Stirling's series after shifting x up, the reflection formula below 0."""
    x, dtype = _float(ctx, node, x)
    negative = compare(ctx, "LESS", x, 0.0)
    mirrored = select(ctx, negative, float_op(ctx, "SUB", scalar(ctx, 1.0, x), x), x)
    # x = 0 would make log(0): the pole's +inf comes from the masks below
    safe = select(ctx, compare(ctx, "EQUAL", mirrored, 0.0), scalar(ctx, 1.0, x), mirrored)
    positive = _lgamma_positive(ctx, safe)
    sin, _ = _sin_cos_pi(ctx, _fraction_part(ctx, x))
    reflected = float_op(ctx, "SUB", exact.log(ctx, float_op(ctx, "DIV", scalar(ctx, math.pi, x), ctx.emit("ABS", [sin],
                                                                                             like=sin))),
                    positive)
    out = select(ctx, negative, reflected, positive)
    inf = scalar(ctx, np.inf, x)
    out = select(ctx, _is_pole(ctx, x), inf, out)
    out = select(ctx, compare(ctx, "EQUAL", ctx.emit("ABS", [x], like=x), np.inf), inf, out)
    return ctx.cast(out, dtype)


# ---- digamma and polygamma -----------------------------------------------------------------------------------
def _psi_positive(ctx, x: ir.Tensor, n: int) -> ir.Tensor:
    """psi_n(x) for x > 0: the asymptotic series at w = x + SHIFT with the shift's terms (for n = 0
    -sum 1/(x + k), for n >= 1 (-1)**(n+1) n! sum (x + k)**-(n+1)), or at w = x alone from LARGE on."""
    large = compare(ctx, "GREATER_EQUAL", x, LARGE)
    w = select(ctx, large, x, float_op(ctx, "ADD", x, scalar(ctx, float(SHIFT), x)))
    inv = float_op(ctx, "DIV", scalar(ctx, 1.0, w), w)
    inv2 = float_op(ctx, "MUL", inv, inv)
    terms = None
    for k in range(SHIFT):
        r = float_op(ctx, "DIV", scalar(ctx, 1.0, x), float_op(ctx, "ADD", x, scalar(ctx, float(k), x)) if k else x)
        term = r if n == 0 else _power(ctx, r, n + 1)
        terms = term if terms is None else float_op(ctx, "ADD", terms, term)
    terms = select(ctx, large, scalar(ctx, 0.0, x), terms)
    if n == 0:
        # psi(w) = log w - 1/(2w) - sum B_2k / (2k w^2k)
        series = _poly(ctx, inv2, [0.0] + [float(-b / (2 * (j + 1))) for j, b in enumerate(_BERNOULLI)])
        half_inv = float_op(ctx, "MUL", inv, scalar(ctx, 0.5, w))
        asymptotic = float_op(ctx, "ADD", float_op(ctx, "SUB", exact.log(ctx, w), half_inv), series)
        return float_op(ctx, "SUB", asymptotic, terms)
    sign = -1.0 if n % 2 == 0 else 1.0  # (-1)**(n+1)
    # w^-n ((n-1)! + n!/(2w) + sum B_2k (2k+n-1)! / (2k)! w^-2k), w^-n taken as (2**a / w)**n * 2**(-a n) so
    # that it does not go subnormal where the result is still a normal float32
    coefficients = [float(math.factorial(n - 1)), float(math.factorial(n)) / 2]
    tail = [float(b * math.factorial(2 * (j + 1) + n - 1) / math.factorial(2 * (j + 1)))
            for j, b in enumerate(_BERNOULLI)]
    a = math.ceil(math.log2(math.factorial(n)) / n) + 1
    scaled_power = _power(ctx, float_op(ctx, "MUL", inv, scalar(ctx, 2.0 ** a, inv)), n)
    body = float_op(ctx, "ADD", _poly(ctx, inv, coefficients), float_op(ctx, "MUL", inv2, _poly(ctx, inv2, tail)))
    asymptotic = float_op(ctx, "MUL", scaled_power, float_op(ctx, "MUL", body, scalar(ctx, 2.0 ** (-a * n), body)))
    total = float_op(ctx, "ADD", asymptotic, float_op(ctx, "MUL", terms, scalar(ctx, float(math.factorial(n)), terms)))
    return float_op(ctx, "MUL", total, scalar(ctx, sign, total))


def _cot_derivative(n: int) -> list[float]:
    """Coefficients (lowest first) of P_n, with d^n/dx^n cot(pi x) = pi**n P_n(cot(pi x))."""
    p = np.polynomial.Polynomial([0.0, 1.0])
    for _ in range(n):
        p = -(np.polynomial.Polynomial([1.0, 0.0, 1.0]) * p.deriv())
    return [float(c) for c in p.coef]


def polygamma(ctx, x: ir.Tensor, n: int) -> ir.Tensor:
    """psi_n(x) in float32 (module notes)."""
    negative = compare(ctx, "LESS", x, 0.0)
    mirrored = select(ctx, negative, float_op(ctx, "SUB", scalar(ctx, 1.0, x), x), x)
    safe = select(ctx, compare(ctx, "EQUAL", mirrored, 0.0), scalar(ctx, 1.0, x), mirrored)
    positive = _psi_positive(ctx, safe, n)
    sin, cos = _sin_cos_pi(ctx, _fraction_part(ctx, x))
    cot = float_op(ctx, "DIV", cos, sin)
    derivative = float_op(ctx, "MUL", _poly(ctx, cot, _cot_derivative(n)), scalar(ctx, math.pi ** (n + 1), cot))
    reflected = float_op(ctx, "SUB", float_op(ctx, "MUL", positive, scalar(ctx, (-1.0) ** n, positive)), derivative)
    out = select(ctx, negative, reflected, positive)
    pole = _is_pole(ctx, x)
    if n == 0:
        zero = compare(ctx, "EQUAL", x, 0.0)
        at_pole = select(ctx, zero, float_op(ctx, "DIV", scalar(ctx, -1.0, x), x), scalar(ctx, np.nan, x))
        at_inf = scalar(ctx, np.inf, x)
    else:
        at_pole = scalar(ctx, np.inf if n % 2 else -np.inf, x)
        at_inf = scalar(ctx, 0.0, x)
    out = select(ctx, pole, at_pole, out)
    out = select(ctx, compare(ctx, "EQUAL", x, np.inf), at_inf, out)
    return select(ctx, compare(ctx, "EQUAL", x, -np.inf), scalar(ctx, np.nan, x), out)


@lowers(aten.digamma.default)
def lower_digamma(ctx, node, x) -> ir.Tensor:
    """digamma(Tensor self) -> Tensor

    psi(x) = d/dx lgamma(x) (module notes)."""
    x, dtype = _float(ctx, node, x)
    return ctx.cast(polygamma(ctx, x, 0), dtype)


@lowers(aten.polygamma.default)
def lower_polygamma(ctx, node, n, x) -> ir.Tensor:
    """polygamma(int n, Tensor self) -> Tensor

    The n-th derivative of digamma (module notes). Limits: orders above MAX_ORDER."""
    n = int(n)
    if n < 0 or n > MAX_ORDER:
        raise ctx.fail(f"polygamma of order {n} has no lowering (orders 0 to {MAX_ORDER} have)")
    x, dtype = _float(ctx, node, x)
    return ctx.cast(polygamma(ctx, x, n), dtype)
