"""Grid sampling: the values of an [N, C, *spatial] input at an [N, *out, k] grid of normalised coordinates, for
PyTorch's grid_sampler_2d / grid_sampler_3d and ONNX's GridSample, in any of their modes (nearest, linear,
cubic), padding modes (zeros, border, reflection) and corner conventions.

Each output position reads the input at a few integer taps (1 for nearest, 2**k for linear, 4**k for cubic):
the tap indices and weights are computed elementwise from the grid, the taps read with one GATHER_ND each from
the channels-last input, and the weighted taps summed. The two frontends differ in where padding applies:

- PyTorch (nearest, linear): the continuous coordinate is clipped (border) or reflected and clipped
  (reflection); taps outside the input then read 0. Cubic: the coordinate stays as it is and each tap index is
  clipped or reflected.
- ONNX: a coordinate outside the sampling range is clamped (border) or reflected (reflection), and each tap
  index is then padded again by the same mode.
"""

from __future__ import annotations

import itertools

import numpy as np

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext
from litert_torch.symbolic import all_static

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # Keys' coefficient, PyTorch's and ONNX's


class _Ops:
    """Elementwise float32 helpers on one tensor shape."""

    def __init__(self, ctx: LoweringContext):
        self.ctx = ctx

    def c(self, value, like):
        return self.ctx.scalar_like(value, like)

    def add(self, a, b):
        return self.ctx.emit("ADD", [a, b if isinstance(b, ir.Tensor) else self.c(b, a)], like=a,
                             fused_activation_function="NONE")

    def sub(self, a, b):
        return self.ctx.emit("SUB", [a, b if isinstance(b, ir.Tensor) else self.c(b, a)], like=a,
                             fused_activation_function="NONE")

    def rsub(self, value, a):
        return self.ctx.emit("SUB", [self.c(value, a), a], like=a, fused_activation_function="NONE")

    def mul(self, a, b):
        return self.ctx.emit("MUL", [a, b if isinstance(b, ir.Tensor) else self.c(b, a)], like=a,
                             fused_activation_function="NONE")

    def unary(self, opcode, a):
        return self.ctx.emit(opcode, [a], like=a)

    def clip(self, a, lo, hi):
        return self.ctx.emit("MINIMUM", [self.ctx.emit("MAXIMUM", [a, self.c(lo, a)], like=a), self.c(hi, a)], like=a)

    def compare(self, opcode, a, value):
        return self.ctx.emit(opcode, [a, self.c(value, a)], a.shape, np.bool_)

    def select(self, cond, a, b):
        return self.ctx.emit("SELECT_V2", [cond, a, b], like=a)


def _unnormalize(o: _Ops, g, size: int, align_corners: bool):
    if align_corners:  # ((g + 1) / 2) * (size - 1)
        return o.mul(o.mul(o.add(g, 1.0), 0.5), float(size - 1))
    return o.mul(o.sub(o.mul(o.add(g, 1.0), float(size)), 1.0), 0.5)  # ((g + 1) * size - 1) / 2


def _bounds(size: int, align_corners: bool) -> tuple[float, float]:
    """The range reflection folds coordinates into: pixel centres at the corners, or pixel edges."""
    return (0.0, float(size - 1)) if align_corners else (-0.5, size - 0.5)


def _reflect(o: _Ops, t, low: float, high: float):
    """t folded into [low, high] by reflecting at its ends as often as needed (a zero-width range gives 0)."""
    span = high - low
    if span <= 0:
        return o.mul(t, 0.0)
    distance = o.unary("ABS", o.sub(t, low))
    extra = o.ctx.emit("FLOOR_MOD", [distance, o.c(span, distance)], like=distance)
    flips = o.unary("FLOOR", o.ctx.emit("DIV", [distance, o.c(span, distance)], like=distance,
                                        fused_activation_function="NONE"))
    odd = o.compare("EQUAL", o.ctx.emit("FLOOR_MOD", [flips, o.c(2.0, flips)], like=flips), 1.0)
    return o.select(odd, o.add(o.rsub(span, extra), low), o.add(extra, low))


def _coordinate(o: _Ops, g, size: int, mode: str, padding: str, align_corners: bool, onnx: bool):
    """The grid coordinate as a (padded) pixel coordinate of an axis of `size`."""
    t = _unnormalize(o, g, size, align_corners)
    if onnx:
        if mode == "nearest":
            t = o.unary("ROUND", t)
        low, high = _bounds(size, align_corners)
        if padding == "border":  # clamped only where it leaves [low, high]
            outside = o.ctx.emit("LOGICAL_OR", [o.compare("LESS", t, low), o.compare("GREATER", t, high)], t.shape,
                                 np.bool_)
            t = o.select(outside, o.clip(t, 0.0, float(size - 1)), t)
        elif padding == "reflection":  # the identity inside [low, high]
            t = _reflect(o, t, low, high)
        return t
    if mode == "cubic":
        return t
    if padding == "border":
        t = o.clip(t, 0.0, float(size - 1))
    elif padding == "reflection":
        t = o.clip(_reflect(o, t, *_bounds(size, align_corners)), 0.0, float(size - 1))
    return t


def _taps(o: _Ops, t, mode: str):
    """[(integer-valued tap index, weight or None)] along one axis."""
    if mode == "nearest":
        return [(o.unary("ROUND", t), None)]
    base = o.unary("FLOOR", t)
    f = o.sub(t, base)
    if mode == "linear":
        return [(base, o.rsub(1.0, f)), (o.add(base, 1.0), f)]
    a = CUBIC_A

    def near(x):  # ((a + 2) x - (a + 3)) x^2 + 1, for |x| <= 1
        return o.add(o.mul(o.mul(o.sub(o.mul(x, a + 2), a + 3), x), x), 1.0)

    def far(x):  # ((a x - 5a) x + 8a) x - 4a, for 1 < |x| < 2
        return o.sub(o.mul(o.add(o.mul(o.sub(o.mul(x, a), 5 * a), x), 8 * a), x), 4 * a)

    g = o.rsub(1.0, f)
    weights = [far(o.add(f, 1.0)), near(f), near(g), far(o.add(g, 1.0))]
    return [(o.add(base, float(k - 1)) if k != 1 else base, w) for k, w in enumerate(weights)]


def _tap_index(o: _Ops, i, size: int, padding: str, align_corners: bool, onnx: bool, mode: str):
    """(index clipped into the axis, in-range mask or None) of a tap, after the tap padding of the frontend."""
    tap_padding = padding if onnx or mode == "cubic" else "zeros"
    if tap_padding == "border":
        return o.clip(i, 0.0, float(size - 1)), None
    if tap_padding == "reflection":
        return o.clip(_reflect(o, i, *_bounds(size, align_corners)), 0.0, float(size - 1)), None
    inside = o.ctx.emit("LOGICAL_AND", [o.compare("GREATER_EQUAL", i, 0.0),
                                        o.compare("LESS_EQUAL", i, float(size - 1))], i.shape, np.bool_)
    return o.clip(i, 0.0, float(size - 1)), inside


# The most taps one output position reads (4**3 for cubic sampling of a volume).
MAX_TAPS = 64


def grid_sample(ctx: LoweringContext, x: ir.Tensor, grid: ir.Tensor, mode: str, padding: str, align_corners: bool,
                *, onnx: bool) -> ir.Tensor:
    """The [N, C, *out] samples of `x` [N, C, *spatial] at `grid` [N, *out, k] (k = the spatial rank; grid[..., 0]
    indexes the last spatial axis). Computed in float32."""
    if mode not in MODES or padding not in PADDINGS:
        raise ctx.fail(f"grid sampling with mode {mode!r} and padding {padding!r} is not defined")
    k = x.rank - 2
    if k < 1 or grid.rank != k + 2 or grid.shape[-1] != k:
        raise ctx.fail(f"grid sampling of an input {list(x.shape)} at a grid {list(grid.shape)}")
    if not all_static([*x.shape, *grid.shape]):
        raise ctx.fail("grid sampling over dynamic sizes has no lowering")
    if x.dtype.kind != "f":
        raise ctx.fail(f"grid sampling of {x.dtype} values has no lowering")
    taps_per_axis = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
    if taps_per_axis ** k > MAX_TAPS:
        raise ctx.fail(f"{mode} grid sampling of a {k}-D input reads {taps_per_axis ** k} taps per output "
                       f"(the limit is {MAX_TAPS})")
    n, c, *spatial = (int(d) for d in x.shape)
    out = [int(d) for d in grid.shape[1:-1]]
    o = _Ops(ctx)
    dtype = x.dtype
    xf, gf = ctx.cast(x, np.float32), ctx.cast(grid, np.float32)
    channels_last = ctx.transpose(xf, (0, *range(2, k + 2), 1))
    per_axis = []
    for axis, size in enumerate(spatial):
        comp = k - 1 - axis
        g = ctx.reshape(ctx.slice(gf, [0] * (k + 1) + [comp], [n, *out, 1]), [n, *out])
        t = _coordinate(o, g, size, mode, padding, align_corners, onnx)
        per_axis.append([(*_tap_index(o, i, size, padding, align_corners, onnx, mode), w)
                         for i, w in _taps(o, t, mode)])
    batch = ctx.const(np.broadcast_to(np.arange(n, dtype=np.int32).reshape([n] + [1] * len(out)),
                                      [n, *out]).copy().reshape([n, *out, 1]), name="batch")
    total: ir.Tensor | None = None
    for combo in itertools.product(*per_axis):
        weight, mask = None, None
        for _, inside, w in combo:
            if w is not None:
                weight = w if weight is None else o.mul(weight, w)
            if inside is not None:
                mask = inside if mask is None else ctx.emit("LOGICAL_AND", [mask, inside], inside.shape, np.bool_)
        if mask is not None:
            keep = ctx.cast(mask, np.float32)
            weight = keep if weight is None else o.mul(weight, keep)
        index = ctx.emit("CONCATENATION", [batch, *(ctx.reshape(ctx.cast(i, np.int32), [n, *out, 1])
                                                    for i, _, _ in combo)],
                         [n, *out, k + 1], np.int32, axis=k + 1, fused_activation_function="NONE")
        values = ctx.emit("GATHER_ND", [channels_last, index], [n, *out, c], np.float32)
        if weight is not None:
            values = ctx.emit("MUL", [values, ctx.reshape(weight, [n, *out, 1])], [n, *out, c], np.float32,
                              fused_activation_function="NONE")
        total = values if total is None else o.add(total, values)
    if total is None:  # never: every axis has a tap, so there is at least one corner
        raise TypeError("grid sampling with no taps")
    y = ctx.transpose(total, (0, k + 1, *range(1, k + 1)))
    return ctx.cast(y, dtype)
