"""Special functions evaluated by Chebyshev expansions fitted at conversion time: the Bessel functions J0, J1,
Y0 and Y1, the modified Bessel functions (i0, i1, i0e, i1e, K0, K1 and the scaled K0, K1), erfinv, ndtri and
erfcx, in float32 to a few units of the last place (J and Y in absolute terms near their zeros).

Each is a Chebyshev expansion of a smooth, bounded part of the function, evaluated in the model by Clenshaw's
recurrence. The expansions are fitted to the part computed by mpmath at 30 digits at the Chebyshev points (the
fits are cached).

Bessel functions, on two ranges each:

    |x| <= 8:  i0e(x), i1e(x) / x                         (in x)
    |x| > 8:   sqrt|x| i0e(x), sqrt|x| i1e(|x|)            (in 8 / |x|, which stays in (0, 1])
    x <= 2:    K0(x) + log(x/2) I0(x), x (K1(x) - log(x/2) I1(x))   (in x: both are power series in x**2)
    x > 2:     sqrt(x) e**x K0(x), sqrt(x) e**x K1(x)       (in 2 / x)

    |x| < 8:   J0(x), J1(x) / x, Y0(x) - (2/pi) log(x/2) J0(x), Y1(x) - (2/pi) (J1(x) log(x/2) - 1/x)
               (in x: each a power series in x**2, or x times one)
    |x| >= 8:  Hankel's P and Q of order 0 and 1 (in 8 / |x|): J = sqrt(2/(pi x)) (P cos chi - Q sin chi) and
               Y = sqrt(2/(pi x)) (P sin chi + Q cos chi), chi = x - (2 order + 1) pi / 4 (taken in float32,
               as PyTorch takes it)

I0 and I1 are the scaled forms times e**|x| (as e**(|x| + log i0e) from 80 on, so values up to the float32
limit do not overflow early; I0(+-inf) = inf, I1(+-inf) = +-inf, where PyTorch's float32 functions overflow from
about 89 on and give NaN at the infinities). K0 and K1 are NaN for x < 0 and +inf at 0, as in PyTorch; so are
Y0 and Y1, -inf at 0. J0, J1, Y0 and Y1 are NaN at the infinities, as in PyTorch.

erfinv(x) = x g(w) with w = -log((1 - x)(1 + x)) (from log1p, so no digit of a small x is lost): g in w below 5,
in sqrt(w) above (the form of Giles' single-precision erfinv); ndtri(p) = sqrt(2) erfinv(2p - 1) with w computed
from p itself, -log(4p) - log1p(-p), so tiny p keep their digits. erfcx(x) = e**(x**2) erfc(x): for x >= 0 an
expansion of (x + 4) erfcx(x), which tends to 1 / sqrt(pi), in (x - 4) / (x + 4), divided by x + 4; below 0,
2 e**(x**2) - erfcx(-x).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import lowers, out_meta, schema_of
from litert_torch.lower.aten.special import compare, float_op, scalar, select

aten = torch.ops.aten

DEGREE = 28  # every fit's coefficients fall below float32's resolution before this


def _bessel_part(name: str, t):
    """The part `name` of a Bessel function at t (module notes)."""
    import mpmath

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
    if name == "j0_small":
        return mpmath.besselj(0, t)
    if name == "j1_small_over_x":
        return mpmath.besselj(1, t) / t if t else mpmath.mpf(0.5)
    if name == "y0_small":  # Y0 less its logarithmic part: a power series in t**2
        return mpmath.bessely(0, t) - 2 / mpmath.pi * mpmath.log(t / 2) * mpmath.besselj(0, t)
    if name == "y1_small":  # Y1 less its logarithmic and polar parts: t times a power series in t**2
        return mpmath.bessely(1, t) - 2 / mpmath.pi * (mpmath.besselj(1, t) * mpmath.log(t / 2) - 1 / t)
    if name.startswith(("j0_", "j1_")) and name.endswith("_large"):  # t = 8 / x: Hankel's P and Q
        order, x = int(name[1]), 8 / t
        chi = x - (2 * order + 1) * mpmath.pi / 4
        j, y = mpmath.besselj(order, x), mpmath.bessely(order, x)
        scale = mpmath.sqrt(mpmath.pi * x / 2)
        if name.endswith("_p_large"):
            return scale * (j * mpmath.cos(chi) + y * mpmath.sin(chi))
        return scale * (y * mpmath.cos(chi) - j * mpmath.sin(chi))
    raise KeyError(name)


def _erf_part(name: str, t):
    """The parts of erfinv (in w, or in s = sqrt(w)) and of erfcx (in u = (x - 4) / (x + 4))."""
    import mpmath

    if name == "erfinv_central":  # g(w) = erfinv(x) / x, x = sqrt(1 - e**-w)
        if t == 0:
            return mpmath.sqrt(mpmath.pi) / 2
        x = mpmath.sqrt(-mpmath.expm1(-t))
        return mpmath.erfinv(x) / x
    if name == "erfinv_tail":  # the same in s = sqrt(w); x is 1 - e**-w / 2 to many more digits than 30
        with mpmath.workdps(120):
            x = mpmath.sqrt(-mpmath.expm1(-t * t))
            return +(mpmath.erfinv(x) / x)
    if name == "erfcx":  # (x + 4) erfcx(x), which tends to 1/sqrt(pi)
        x = 4 * (1 + t) / (1 - t)
        return (x + 4) * mpmath.exp(x * x) * mpmath.erfc(x)
    raise KeyError(name)


@functools.lru_cache(maxsize=None)
def _fit(name: str, low: float, high: float) -> tuple[float, ...]:
    """Chebyshev coefficients on [low, high] of the part `name` (module notes), from mpmath values at the
    Chebyshev points."""
    import mpmath

    mpmath.mp.dps = 30

    def part(t):
        t = mpmath.mpf(t)
        if name.startswith(("erfinv", "erfcx")):
            return _erf_part(name, t)
        return _bessel_part(name, t)

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
    scaled = float_op(ctx, "MUL", x, scalar(ctx, 2.0 / (high - low), x))
    t = float_op(ctx, "SUB", scaled, scalar(ctx, (high + low) / (high - low), x))
    t2 = float_op(ctx, "MUL", t, scalar(ctx, 2.0, t))
    b1 = b2 = None
    for c in reversed(coefficients[1:]):
        b = scalar(ctx, c, t) if b1 is None else float_op(ctx, "ADD", float_op(ctx, "MUL", t2, b1), scalar(ctx, c, t))
        if b2 is not None:
            b = float_op(ctx, "SUB", b, b2)
        b1, b2 = b, b1
    out = float_op(ctx, "ADD", float_op(ctx, "MUL", t, b1), scalar(ctx, coefficients[0], t))
    return float_op(ctx, "SUB", out, b2) if b2 is not None else out


def _scaled_i(ctx, x: ir.Tensor, order: int) -> ir.Tensor:
    """i0e(x) or i1e(x)."""
    a = ctx.emit("ABS", [x], like=x)
    small = compare(ctx, "LESS", a, 8.0)
    near = select(ctx, small, a, scalar(ctx, 8.0, a))
    far = select(ctx, small, scalar(ctx, 8.0, a), a)
    u = float_op(ctx, "DIV", scalar(ctx, 8.0, far), far)
    root = exact.sqrt(ctx, far)
    if order == 0:
        inner = _clenshaw(ctx, near, "i0e_small", 0.0, 8.0)
        outer = float_op(ctx, "DIV", _clenshaw(ctx, u, "i0e_large", 0.0, 1.0), root)
        return select(ctx, small, inner, outer)
    inner = float_op(ctx, "MUL", _clenshaw(ctx, near, "i1e_small_over_x", 0.0, 8.0), near)
    outer = float_op(ctx, "DIV", _clenshaw(ctx, u, "i1e_large", 0.0, 1.0), root)
    magnitude = select(ctx, small, inner, outer)
    negative = compare(ctx, "LESS", x, 0.0)
    return select(ctx, negative, ctx.emit("NEG", [magnitude], like=magnitude), magnitude)


def _unscaled_i(ctx, x: ir.Tensor, order: int) -> ir.Tensor:
    """I0(x) or I1(x) = i0e / i1e times e**|x|."""
    scaled = _scaled_i(ctx, x, order)
    a = ctx.emit("ABS", [x], like=x)
    moderate = select(ctx, compare(ctx, "LESS", a, 80.0), a, scalar(ctx, 0.0, a))
    direct = float_op(ctx, "MUL", scaled, exact.exp(ctx, moderate))
    magnitude = ctx.emit("ABS", [scaled], like=scaled)
    logged = exact.exp(ctx, float_op(ctx, "ADD", a, exact.log(ctx, select(ctx, compare(ctx, "LESS", a, 80.0),
                                                                        scalar(ctx, 1.0, a), magnitude))))
    if order == 1:
        logged = select(ctx, compare(ctx, "LESS", x, 0.0), ctx.emit("NEG", [logged], like=logged), logged)
    out = select(ctx, compare(ctx, "LESS", a, 80.0), direct, logged)
    infinite = ctx.emit("EQUAL", [a, scalar(ctx, np.inf, a)], a.shape, np.bool_)
    out = select(ctx, infinite, a if order == 0 else x, out)  # I0(+-inf) = inf, I1(+-inf) = +-inf
    return exact.keep_nan(ctx, x, out)


def _k(ctx, x: ir.Tensor, order: int, scaled: bool) -> ir.Tensor:
    """K0 / K1 (times e**x when `scaled`); NaN below 0, +inf at 0."""
    small = compare(ctx, "LESS", x, 2.0)
    near = select(ctx, small, ctx.emit("MAXIMUM", [x, scalar(ctx, 1e-30, x)], like=x), scalar(ctx, 1.0, x))
    far = select(ctx, small, scalar(ctx, 2.0, x), x)
    log_half = exact.log(ctx, float_op(ctx, "MUL", near, scalar(ctx, 0.5, near)))
    if order == 0:
        inner = float_op(ctx, "SUB", _clenshaw(ctx, near, "k0_small", 0.0, 2.0),
                    float_op(ctx, "MUL", log_half, _unscaled_i(ctx, near, 0)))
    else:
        inner = float_op(ctx, "ADD", float_op(ctx, "DIV", _clenshaw(ctx, near, "k1_small", 0.0, 2.0), near),
                    float_op(ctx, "MUL", log_half, _unscaled_i(ctx, near, 1)))
    if scaled:
        inner = float_op(ctx, "MUL", inner, exact.exp(ctx, near))
    u = float_op(ctx, "DIV", scalar(ctx, 2.0, far), far)
    outer = float_op(ctx, "DIV", _clenshaw(ctx, u, f"k{order}_large", 0.0, 1.0), exact.sqrt(ctx, far))
    if not scaled:
        outer = float_op(ctx, "MUL", outer, exact.exp(ctx, ctx.emit("NEG", [far], like=far)))
    out = select(ctx, small, inner, outer)
    out = select(ctx, ctx.emit("EQUAL", [x, scalar(ctx, 0.0, x)], x.shape, np.bool_), scalar(ctx, np.inf, x), out)
    out = select(ctx, compare(ctx, "LESS", x, 0.0), scalar(ctx, np.nan, x), out)
    return exact.keep_nan(ctx, x, out)


def _bessel_jy(ctx, x: ir.Tensor, order: int, second_kind: bool) -> ir.Tensor:
    """J0, J1, Y0 or Y1 (module notes): below 8 a fitted expansion (with Y's logarithmic and polar parts added),
    above it Hankel's form sqrt(2 / (pi x)) (P cos chi - Q sin chi) for J and (P sin chi + Q cos chi) for Y,
    chi = x - (2 order + 1) pi / 4 taken in float32 as PyTorch takes it. Y is NaN below 0 and -inf at 0; all
    four are NaN at the infinities, as in PyTorch."""
    a = ctx.emit("ABS", [x], like=x)
    small = compare(ctx, "LESS", a, 8.0)
    near = select(ctx, small, a, scalar(ctx, 8.0, a))
    far = select(ctx, small, scalar(ctx, 8.0, a), a)

    def j_near(k):
        if k == 0:
            return _clenshaw(ctx, near, "j0_small", 0.0, 8.0)
        return float_op(ctx, "MUL", _clenshaw(ctx, near, "j1_small_over_x", 0.0, 8.0), near)

    if not second_kind:
        inner = j_near(order)
    else:
        log_half = exact.log(ctx, float_op(ctx, "MUL", near, scalar(ctx, 0.5, near)))
        two_over_pi = scalar(ctx, 2.0 / math.pi, near)
        if order == 0:
            inner = float_op(ctx, "ADD", _clenshaw(ctx, near, "y0_small", 0.0, 8.0),
                             float_op(ctx, "MUL", two_over_pi, float_op(ctx, "MUL", log_half, j_near(0))))
        else:
            polar = float_op(ctx, "SUB", float_op(ctx, "MUL", j_near(1), log_half),
                             float_op(ctx, "DIV", scalar(ctx, 1.0, near), near))
            inner = float_op(ctx, "ADD", _clenshaw(ctx, near, "y1_small", 0.0, 8.0),
                             float_op(ctx, "MUL", two_over_pi, polar))
    u = float_op(ctx, "DIV", scalar(ctx, 8.0, far), far)
    p = _clenshaw(ctx, u, f"j{order}_p_large", 0.0, 1.0)
    q = _clenshaw(ctx, u, f"j{order}_q_large", 0.0, 1.0)
    chi = float_op(ctx, "SUB", far, scalar(ctx, (2 * order + 1) * math.pi / 4, far))
    cos, sin = ctx.emit("COS", [chi], like=chi), ctx.emit("SIN", [chi], like=chi)
    if second_kind:
        wave = float_op(ctx, "ADD", float_op(ctx, "MUL", p, sin), float_op(ctx, "MUL", q, cos))
    else:
        wave = float_op(ctx, "SUB", float_op(ctx, "MUL", p, cos), float_op(ctx, "MUL", q, sin))
    amplitude = float_op(ctx, "DIV", scalar(ctx, math.sqrt(2.0 / math.pi), far), exact.sqrt(ctx, far))
    out = select(ctx, small, inner, float_op(ctx, "MUL", amplitude, wave))
    if second_kind:
        out = select(ctx, ctx.emit("EQUAL", [x, scalar(ctx, 0.0, x)], x.shape, np.bool_), scalar(ctx, -np.inf, x), out)
        out = select(ctx, compare(ctx, "LESS", x, 0.0), scalar(ctx, np.nan, x), out)
    elif order == 1:  # odd
        out = select(ctx, compare(ctx, "LESS", x, 0.0), ctx.emit("NEG", [out], like=out), out)
    infinite = ctx.emit("EQUAL", [a, scalar(ctx, np.inf, a)], a.shape, np.bool_)
    out = select(ctx, infinite, scalar(ctx, np.nan, x), out)
    return exact.keep_nan(ctx, x, out)


def _erfinv_from(ctx, x: ir.Tensor, w: ir.Tensor) -> ir.Tensor:
    """x g(w) (module notes), for w = -log((1 - x)(1 + x)) >= 0."""
    central = compare(ctx, "LESS", w, 5.0)
    w_low = select(ctx, central, w, scalar(ctx, 5.0, w))
    s = exact.sqrt(ctx, select(ctx, central, scalar(ctx, 5.0, w), w))
    s = ctx.emit("MINIMUM", [s, scalar(ctx, 10.0, s)], like=s)  # past w = 100 (p below 1e-44) nothing is finite
    g = select(ctx, central, _clenshaw(ctx, w_low, "erfinv_central", 0.0, 5.0),
                _clenshaw(ctx, s, "erfinv_tail", math.sqrt(5.0), 10.0))
    return float_op(ctx, "MUL", x, g)


def _edges(ctx, out, at, low, high, low_value, high_value):
    """out with low_value where `at` == low, high_value where `at` == high, NaN outside [low, high] (and NaN)."""
    out = select(ctx, compare(ctx, "EQUAL", at, low), scalar(ctx, low_value, at), out)
    out = select(ctx, compare(ctx, "EQUAL", at, high), scalar(ctx, high_value, at), out)
    inside = ctx.emit("LOGICAL_AND", [ctx.emit("GREATER_EQUAL", [at, scalar(ctx, low, at)], at.shape, np.bool_),
                                      ctx.emit("LESS_EQUAL", [at, scalar(ctx, high, at)], at.shape, np.bool_)],
                      at.shape, np.bool_)
    return select(ctx, inside, out, scalar(ctx, np.nan, at))


def _erfinv(ctx, x: ir.Tensor) -> ir.Tensor:
    from litert_torch.lower.aten.math_ops import log1p

    inner = select(ctx, compare(ctx, "LESS", ctx.emit("ABS", [x], like=x), 1.0), x, scalar(ctx, 0.0, x))
    w = ctx.emit("NEG", [float_op(ctx, "ADD", log1p(ctx, inner), log1p(ctx, ctx.emit("NEG", [inner], like=inner)))],
                 like=inner)
    return _edges(ctx, _erfinv_from(ctx, inner, w), x, -1.0, 1.0, -np.inf, np.inf)


def _ndtri(ctx, p: ir.Tensor) -> ir.Tensor:
    from litert_torch.lower.aten.math_ops import log1p

    open_range = ctx.emit("LOGICAL_AND", [compare(ctx, "GREATER", p, 0.0), compare(ctx, "LESS", p, 1.0)], p.shape,
                          np.bool_)
    inner = select(ctx, open_range, p, scalar(ctx, 0.5, p))
    # w = -log(4 p (1 - p)), from p itself
    w = ctx.emit("NEG", [float_op(ctx, "ADD", exact.log(ctx, float_op(ctx, "MUL", inner, scalar(ctx, 4.0, inner))),
                             log1p(ctx, ctx.emit("NEG", [inner], like=inner)))], like=inner)
    w = ctx.emit("MAXIMUM", [w, scalar(ctx, 0.0, w)], like=w)
    x = float_op(ctx, "SUB", float_op(ctx, "MUL", inner, scalar(ctx, 2.0, inner)), scalar(ctx, 1.0, inner))
    out = float_op(ctx, "MUL", _erfinv_from(ctx, x, w), scalar(ctx, math.sqrt(2.0), x))
    return _edges(ctx, out, p, 0.0, 1.0, -np.inf, np.inf)


def _erfcx(ctx, x: ir.Tensor) -> ir.Tensor:
    a = ctx.emit("ABS", [x], like=x)
    big = ctx.emit("EQUAL", [a, scalar(ctx, np.inf, a)], a.shape, np.bool_)
    finite = select(ctx, big, scalar(ctx, 0.0, a), a)
    plus_four = float_op(ctx, "ADD", finite, scalar(ctx, 4.0, a))
    u = float_op(ctx, "DIV", float_op(ctx, "SUB", finite, scalar(ctx, 4.0, a)), plus_four)
    scaled = float_op(ctx, "DIV", _clenshaw(ctx, u, "erfcx", -1.0, 1.0), plus_four)
    positive = select(ctx, big, scalar(ctx, 0.0, a), scaled)  # erfcx(inf) = 0
    twice_growth = float_op(ctx, "MUL", exact.exp(ctx, float_op(ctx, "MUL", a, a)), scalar(ctx, 2.0, a))
    mirrored = float_op(ctx, "SUB", twice_growth, positive)
    out = select(ctx, compare(ctx, "LESS", x, 0.0), mirrored, positive)
    return exact.keep_nan(ctx, x, out)


def _lowering(fn):
    def lower(ctx, node, x) -> ir.Tensor:
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
    ((aten.special_bessel_j0.default,), lambda c, x: _bessel_jy(c, x, 0, False),
     "J0(x), the Bessel function of the first kind of order 0 (Chebyshev expansions; module notes)."),
    ((aten.special_bessel_j1.default,), lambda c, x: _bessel_jy(c, x, 1, False),
     "J1(x), the Bessel function of the first kind of order 1 (Chebyshev expansions; module notes)."),
    ((aten.special_bessel_y0.default,), lambda c, x: _bessel_jy(c, x, 0, True),
     "Y0(x), the Bessel function of the second kind of order 0 (Chebyshev expansions; NaN below 0)."),
    ((aten.special_bessel_y1.default,), lambda c, x: _bessel_jy(c, x, 1, True),
     "Y1(x), the Bessel function of the second kind of order 1 (Chebyshev expansions; NaN below 0)."),
    ((aten.erfinv.default,), _erfinv, "The inverse of erf (Chebyshev expansions in w = -log(1 - x**2))."),
    ((aten.special_ndtri.default,), _ndtri,
     "The inverse of the standard normal CDF, sqrt(2) erfinv(2p - 1) with tiny p keeping their digits."),
    ((aten.special_erfcx.default,), _erfcx, "e**(x**2) erfc(x) (a Chebyshev expansion in (x - 4) / (x + 4))."),
]:
    _lower = _lowering(_fn)
    _lower.__doc__ = f"{schema_of(_targets[0])}\n\n{_doc}"
    _lower.__name__ = _lower.__qualname__ = f"lower_{str(_targets[0]).split('.')[1]}"
    lowers(*_targets)(_lower)
