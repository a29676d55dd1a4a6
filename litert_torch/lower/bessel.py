"""Modified Bessel functions: i0, i1 and their exponentially scaled forms i0e, i1e, and K0, K1 (plain and
scaled), in float32 to a few units of the last place.

Each is a Chebyshev expansion of a smooth, bounded part of the function, evaluated in the model by Clenshaw's
recurrence. The expansions are fitted at conversion time to the functions computed by mpmath at 30 digits
(the fits are cached), on two ranges:

    |x| <= 8:  i0e(x), i1e(x) / x                         (in x)
    |x| > 8:   sqrt|x| i0e(x), sqrt|x| i1e(|x|)            (in 8 / |x|, which stays in (0, 1])
    x <= 2:    K0(x) + log(x/2) I0(x), x (K1(x) - log(x/2) I1(x))   (in x: both are power series in x**2)
    x > 2:     sqrt(x) e**x K0(x), sqrt(x) e**x K1(x)       (in 2 / x)

I0 and I1 are the scaled forms times e**|x| (as e**(|x| + log i0e) from 80 on, so values up to the float32
limit do not overflow early; I0(+-inf) = inf, I1(+-inf) = +-inf, where PyTorch's
float32 functions overflow from about 89 on and give NaN at the infinities). K0 and K1 are NaN for x < 0 and +inf at 0,
as in PyTorch.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower import exact
from litert_torch.lower.registry import LoweringContext, lowers, out_meta
from litert_torch.symbolic import broadcast_shapes

aten = torch.ops.aten

DEGREE = 28  # every fit's coefficients fall below float32's resolution before this


def _op(ctx, opcode, *inputs):
    opts = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL", "DIV") else {}
    shape = broadcast_shapes(*[tuple(t.shape) for t in inputs])
    return ctx.emit(opcode, list(inputs), shape, np.float32, **opts)


def _c(ctx, value: float, like: ir.Tensor) -> ir.Tensor:
    return ctx.scalar_like(value, like)


@functools.lru_cache(maxsize=None)
def _fit(name: str, low: float, high: float) -> tuple[float, ...]:
    """Chebyshev coefficients on [low, high] of the part `name` of a Bessel function (see the module notes),
    from mpmath values at the Chebyshev points."""
    import mpmath

    mpmath.mp.dps = 30

    def part(t):
        t = mpmath.mpf(t)
        if name == "i0e_small":
            return mpmath.besseli(0, t) * mpmath.exp(-t)
        if name == "i1e_small_over_x":
            return mpmath.besseli(1, t) * mpmath.exp(-t) / t if t else mpmath.mpf(0.5)
        if name in ("i0e_large", "i1e_large"):  # t = 8 / x
            x = 8 / t
            return mpmath.sqrt(x) * mpmath.besseli(0 if name == "i0e_large" else 1, x) * mpmath.exp(-x)
        if name == "k0_small":
            return (mpmath.besselk(0, t) + mpmath.log(t / 2) * mpmath.besseli(0, t)) if t else -mpmath.euler
        if name == "k1_small":
            return t * (mpmath.besselk(1, t) - mpmath.log(t / 2) * mpmath.besseli(1, t)) if t else mpmath.mpf(1)
        if name in ("k0_large", "k1_large"):  # t = 2 / x
            x = 2 / t
            return mpmath.sqrt(x) * mpmath.exp(x) * mpmath.besselk(0 if name == "k0_large" else 1, x)
        raise KeyError(name)

    k = np.arange(DEGREE + 1)
    nodes = np.cos(np.pi * (k + 0.5) / (DEGREE + 1))
    points = 0.5 * (high - low) * nodes + 0.5 * (high + low)
    # the large-argument parts are taken at t -> 0 as their limits (the asymptotic series' first terms)
    values = []
    for p in points:
        if p == 0 and name.endswith("_large"):
            values.append(1 / math.sqrt(2 * math.pi) if name.startswith("i") else math.sqrt(math.pi / 2))
        else:
            values.append(float(part(p)))
    return tuple(float(c) for c in np.polynomial.chebyshev.chebfit(nodes, values, DEGREE))


def _clenshaw(ctx, x: ir.Tensor, name: str, low: float, high: float) -> ir.Tensor:
    """The fitted expansion `name` at x (taken inside [low, high])."""
    coefficients = _fit(name, low, high)
    # the expansion's variable in [-1, 1]
    t = _op(ctx, "SUB", _op(ctx, "MUL", x, _c(ctx, 2.0 / (high - low), x)), _c(ctx, (high + low) / (high - low), x))
    t2 = _op(ctx, "MUL", t, _c(ctx, 2.0, t))
    b1 = b2 = None
    for c in reversed(coefficients[1:]):
        b = _c(ctx, c, t) if b1 is None else _op(ctx, "ADD", _op(ctx, "MUL", t2, b1), _c(ctx, c, t))
        if b2 is not None:
            b = _op(ctx, "SUB", b, b2)
        b1, b2 = b, b1
    out = _op(ctx, "ADD", _op(ctx, "MUL", t, b1), _c(ctx, coefficients[0], t))
    return _op(ctx, "SUB", out, b2) if b2 is not None else out


def _select(ctx, cond, a, b):
    return ctx.emit("SELECT_V2", [cond, a, b], like=b)


def _less(ctx, x, value):
    return ctx.emit("LESS", [x, _c(ctx, value, x)], x.shape, np.bool_)


def _scaled_i(ctx, x: ir.Tensor, order: int) -> ir.Tensor:
    """i0e(x) or i1e(x)."""
    a = ctx.emit("ABS", [x], like=x)
    small = _less(ctx, a, 8.0)
    near = _select(ctx, small, a, _c(ctx, 8.0, a))
    far = _select(ctx, small, _c(ctx, 8.0, a), a)
    u = _op(ctx, "DIV", _c(ctx, 8.0, far), far)
    root = exact.sqrt(ctx, far)
    if order == 0:
        inner = _clenshaw(ctx, near, "i0e_small", 0.0, 8.0)
        outer = _op(ctx, "DIV", _clenshaw(ctx, u, "i0e_large", 0.0, 1.0), root)
        return _select(ctx, small, inner, outer)
    inner = _op(ctx, "MUL", _clenshaw(ctx, near, "i1e_small_over_x", 0.0, 8.0), near)
    outer = _op(ctx, "DIV", _clenshaw(ctx, u, "i1e_large", 0.0, 1.0), root)
    magnitude = _select(ctx, small, inner, outer)
    negative = _less(ctx, x, 0.0)
    return _select(ctx, negative, ctx.emit("NEG", [magnitude], like=magnitude), magnitude)


def _unscaled_i(ctx, x: ir.Tensor, order: int) -> ir.Tensor:
    """I0(x) or I1(x) = i0e / i1e times e**|x|."""
    scaled = _scaled_i(ctx, x, order)
    a = ctx.emit("ABS", [x], like=x)
    direct = _op(ctx, "MUL", scaled, exact.exp(ctx, _select(ctx, _less(ctx, a, 80.0), a, _c(ctx, 0.0, a))))
    magnitude = ctx.emit("ABS", [scaled], like=scaled)
    logged = exact.exp(ctx, _op(ctx, "ADD", a, exact.log(ctx, _select(ctx, _less(ctx, a, 80.0),
                                                                        _c(ctx, 1.0, a), magnitude))))
    if order == 1:
        logged = _select(ctx, _less(ctx, x, 0.0), ctx.emit("NEG", [logged], like=logged), logged)
    out = _select(ctx, _less(ctx, a, 80.0), direct, logged)
    infinite = ctx.emit("EQUAL", [a, _c(ctx, np.inf, a)], a.shape, np.bool_)
    out = _select(ctx, infinite, a if order == 0 else x, out)  # I0(+-inf) = inf, I1(+-inf) = +-inf
    return _select(ctx, ctx.emit("NOT_EQUAL", [x, x], x.shape, np.bool_), x, out)


def _k(ctx, x: ir.Tensor, order: int, scaled: bool) -> ir.Tensor:
    """K0 / K1 (times e**x when `scaled`); NaN below 0, +inf at 0."""
    small = _less(ctx, x, 2.0)
    near = _select(ctx, small, ctx.emit("MAXIMUM", [x, _c(ctx, 1e-30, x)], like=x), _c(ctx, 1.0, x))
    far = _select(ctx, small, _c(ctx, 2.0, x), x)
    log_half = exact.log(ctx, _op(ctx, "MUL", near, _c(ctx, 0.5, near)))
    if order == 0:
        inner = _op(ctx, "SUB", _clenshaw(ctx, near, "k0_small", 0.0, 2.0),
                    _op(ctx, "MUL", log_half, _unscaled_i(ctx, near, 0)))
    else:
        inner = _op(ctx, "ADD", _op(ctx, "DIV", _clenshaw(ctx, near, "k1_small", 0.0, 2.0), near),
                    _op(ctx, "MUL", log_half, _unscaled_i(ctx, near, 1)))
    if scaled:
        inner = _op(ctx, "MUL", inner, exact.exp(ctx, near))
    u = _op(ctx, "DIV", _c(ctx, 2.0, far), far)
    outer = _op(ctx, "DIV", _clenshaw(ctx, u, f"k{order}_large", 0.0, 1.0), exact.sqrt(ctx, far))
    if not scaled:
        outer = _op(ctx, "MUL", outer, exact.exp(ctx, ctx.emit("NEG", [far], like=far)))
    out = _select(ctx, small, inner, outer)
    out = _select(ctx, ctx.emit("EQUAL", [x, _c(ctx, 0.0, x)], x.shape, np.bool_), _c(ctx, np.inf, x), out)
    out = _select(ctx, _less(ctx, x, 0.0), _c(ctx, np.nan, x), out)
    return _select(ctx, ctx.emit("NOT_EQUAL", [x, x], x.shape, np.bool_), x, out)


def _lowering(fn):
    def lower(ctx, node, x):
        _, dtype = out_meta(node)
        return ctx.cast(fn(ctx, ctx.cast(x, np.float32)), dtype)

    return lower


for _targets, _fn, _doc in [
    ((aten.i0.default, aten.special_modified_bessel_i0.default), lambda c, x: _unscaled_i(c, x, 0),
     "I0(x), the modified Bessel function of order 0 (Chebyshev expansions; module notes)."),
    ((aten.special_i1.default, aten.special_modified_bessel_i1.default), lambda c, x: _unscaled_i(c, x, 1),
     "I1(x), the modified Bessel function of order 1 (Chebyshev expansions; module notes)."),
    ((aten.special_i0e.default,), lambda c, x: _scaled_i(c, x, 0), "e**-|x| I0(x) (Chebyshev expansions)."),
    ((aten.special_i1e.default,), lambda c, x: _scaled_i(c, x, 1), "e**-|x| I1(x) (Chebyshev expansions)."),
    ((aten.special_modified_bessel_k0.default,), lambda c, x: _k(c, x, 0, False),
     "K0(x) (Chebyshev expansions; NaN below 0, +inf at 0)."),
    ((aten.special_modified_bessel_k1.default,), lambda c, x: _k(c, x, 1, False),
     "K1(x) (Chebyshev expansions; NaN below 0, +inf at 0)."),
    ((aten.special_scaled_modified_bessel_k0.default,), lambda c, x: _k(c, x, 0, True),
     "e**x K0(x) (Chebyshev expansions; NaN below 0, +inf at 0)."),
    ((aten.special_scaled_modified_bessel_k1.default,), lambda c, x: _k(c, x, 1, True),
     "e**x K1(x) (Chebyshev expansions; NaN below 0, +inf at 0)."),
]:
    _lower = _lowering(_fn)
    _lower.__doc__ = _doc
    _lower.__name__ = _lower.__qualname__ = f"lower_{str(_targets[0]).split('.')[1]}"
    lowers(*_targets)(_lower)
