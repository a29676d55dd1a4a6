"""Separable interpolation: a resize of any rank, one axis at a time, as a gather of a few taps per output
position and their weighted sum.

Along one axis, output position `y` maps to a source coordinate `x` (the coordinate transform: half-pixel,
align-corners, asymmetric, crop-and-resize, ...). Nearest-neighbour picks one input index from `x` by its
rounding rule. Linear and cubic interpolation take the taps `floor(x) + o` for the offsets `o` of the kernel's
support and weigh each by the kernel at its distance from `x` (with antialiasing, the kernel stretched by
1 / scale when downscaling, and the weights normalized); taps past the edges read the edge (or are dropped and
the rest renormalized, `exclude_outside`). The result along the axis is

    out[..., y, ...] = sum_k  w[y, k] * in[..., clamp(idx[y, k]), ...]        GATHER (idx [out, taps]), MUL, SUM

The same formulas build the indices and weights either at conversion, in float64 numpy (sizes and scales known:
the tables become constants), or in the model with TFLite ops (`Traced`: a scale, size or region fed at run
time, and the number of output positions with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext
from litert_torch.symbolic import broadcast_shapes


class Traced:
    """A float32, int32 or bool tensor computed in the model; arithmetic on it emits TFLite ops."""

    __array_ufunc__ = None  # numpy arrays defer to these operators

    def __init__(self, ctx: LoweringContext, t: ir.Tensor):
        self.ctx, self.t = ctx, t

    @property
    def shape(self) -> tuple:
        return tuple(self.t.shape)

    def lift(self, v: Any) -> "Traced":
        if isinstance(v, Traced):
            return v
        return Traced(self.ctx, self.ctx.const(np.asarray(v, self.t.dtype).reshape(np.shape(v) or (1,)), name="k"))

    def _binary(self, opcode: str, other: Any, swap: bool = False, dtype: Any = None) -> "Traced":
        a, b = self, self.lift(other)
        if swap:
            a, b = b, a
        opts: dict[str, Any] = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL", "DIV") else {}
        shape = broadcast_shapes(a.shape, b.shape)
        return Traced(self.ctx, self.ctx.emit(opcode, [a.t, b.t], shape, dtype or a.t.dtype, **opts))

    def __add__(self, o): return self._binary("ADD", o)
    def __radd__(self, o): return self._binary("ADD", o, True)
    def __sub__(self, o): return self._binary("SUB", o)
    def __rsub__(self, o): return self._binary("SUB", o, True)
    def __mul__(self, o): return self._binary("MUL", o)
    def __rmul__(self, o): return self._binary("MUL", o, True)
    def __truediv__(self, o): return self._binary("DIV", o)
    def __rtruediv__(self, o): return self._binary("DIV", o, True)
    def __neg__(self): return Traced(self.ctx, self.ctx.emit("NEG", [self.t], like=self.t))
    def __lt__(self, o): return self._binary("LESS", o, dtype=np.bool_)
    def __le__(self, o): return self._binary("LESS_EQUAL", o, dtype=np.bool_)
    def __gt__(self, o): return self._binary("GREATER", o, dtype=np.bool_)
    def __ge__(self, o): return self._binary("GREATER_EQUAL", o, dtype=np.bool_)
    def __or__(self, o): return self._binary("LOGICAL_OR", o, dtype=np.bool_)
    def __ror__(self, o): return self._binary("LOGICAL_OR", o, True, dtype=np.bool_)

    def unary(self, opcode: str) -> "Traced":
        return Traced(self.ctx, self.ctx.emit(opcode, [self.t], like=self.t))


# A value of the per-axis arithmetic: a tensor computed in the model, or an array or number known at conversion.
Operand: TypeAlias = "Traced | np.ndarray | float"


def _traced(*values: Any) -> Traced | None:
    return next((v for v in values if isinstance(v, Traced)), None)


def floor(v) -> Operand:
    return v.unary("FLOOR") if isinstance(v, Traced) else np.floor(v)


def ceil(v) -> Operand:
    return v.unary("CEIL") if isinstance(v, Traced) else np.ceil(v)


def absolute(v) -> Operand:
    return v.unary("ABS") if isinstance(v, Traced) else np.abs(v)


def maximum(a, b) -> Operand:
    t = _traced(a, b)
    return t.lift(a)._binary("MAXIMUM", b) if t is not None else np.maximum(a, b)


def minimum(a, b) -> Operand:
    t = _traced(a, b)
    return t.lift(a)._binary("MINIMUM", b) if t is not None else np.minimum(a, b)


def equal(a, b) -> Operand:
    t = _traced(a, b)
    return t.lift(a)._binary("EQUAL", b, dtype=np.bool_) if t is not None else np.equal(a, b)


def where(cond, a, b) -> Operand:
    t = _traced(cond, a, b)
    if t is None:
        return np.where(cond, a, b)
    if not isinstance(cond, Traced) and np.ndim(cond) == 0:
        return a if cond else b
    like = _traced(a, b) or t
    a, b = like.lift(a), like.lift(b)
    cond = cond if isinstance(cond, Traced) else Traced(t.ctx, t.ctx.const(np.asarray(cond, np.bool_).reshape(np.shape(cond) or (1,)), name="k"))
    shape = broadcast_shapes(cond.shape, a.shape, b.shape)
    return Traced(t.ctx, t.ctx.emit("SELECT_V2", [cond.t, a.t, b.t], shape, a.t.dtype))


def reduce_sum_last(v) -> Traced | np.ndarray:
    """The sum over the last axis, kept as an axis of one."""
    if not isinstance(v, Traced):
        return v.sum(axis=-1, keepdims=True)
    shape = v.shape[:-1] + (1,)
    axis = v.ctx.const(np.array([len(v.shape) - 1], np.int32), name="axis")
    return Traced(v.ctx, v.ctx.emit("SUM", [v.t, axis], shape, v.t.dtype, keep_dims=True))


def as_float(v) -> Operand:
    """An int32 size or index as float32 in the model; a number at conversion stays as it is (Python and numpy
    promote it with the other operands as ONNX's reference implementation does)."""
    if isinstance(v, Traced):
        return Traced(v.ctx, v.ctx.cast(v.t, np.float32))
    return v if np.ndim(v) == 0 else np.asarray(v, np.float64)


def as_count(v) -> Traced | np.ndarray:
    """A float size as an int32 count: NaN and negatives count 0, and values past int32 are held at its largest
    (the cast of such a float has no defined result)."""
    if not isinstance(v, Traced):
        return as_index(v)
    v = where(equal(v, v), v, 0.0)
    return as_index(minimum(maximum(floor(v), 0.0), 2147483520.0))


def as_index(v) -> Traced | np.ndarray:
    """Whole-valued floats as int32 indices."""
    if isinstance(v, Traced):
        return Traced(v.ctx, v.ctx.cast(v.t, np.int32))
    return np.asarray(v).astype(np.int64)


def arange(ctx: LoweringContext, count: Any, dim: Any) -> Traced | np.ndarray:
    """0, 1, ..., count - 1 as a float column [dim, 1]: numpy for a static count, RANGE for a traced one."""
    if not isinstance(count, Traced):
        return np.arange(int(count), dtype=np.float64)[:, None]
    zero, one = (ctx.const(np.array(v, np.int32), name="range") for v in (0, 1))
    count_t = ctx.reshape(count.t, [])
    values = ctx.emit("RANGE", [zero, count_t, one], (dim,), np.int32)
    ctx.anchor(values)  # a size decided by values: later ops read it from this tensor's shape
    return Traced(ctx, ctx.cast(ctx.reshape(values, (dim, 1)), np.float32))


# ---- the per-axis tables ---------------------------------------------------------------------------------------
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True)
class Kernel:
    """What is interpolated and how: `mode` nearest / linear / cubic, the coordinate transform, the nearest
    rounding rule, the cubic coefficient, antialiasing, and whether taps outside the input are dropped."""

    mode: str
    coordinate: str = "half_pixel"
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    antialias: bool = False
    exclude_outside: bool = False


def source_coordinates(kernel: Kernel, y, scale, in_size, out_size, roi=None) -> tuple[Operand, Operand | None]:
    """The source coordinate of each output position `y` ([out, 1]) along one axis, and where crop-and-resize
    falls outside the input (None for the other transforms). `scale` is the axis's output/input scale factor,
    `out_size` the whole number of output positions; the transforms that speak of the output width use
    scale * in_size, as ONNX defines them."""
    width = scale * in_size
    mode = kernel.coordinate
    outside = None
    if mode == "align_corners":
        x = where(equal(width, 1.0), 0.0 * y, y * (in_size - 1) / (width - 1))
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        x = where(equal(width, 1.0), 0.0 * y + (end - start) * (in_size - 1) / 2,
                  y * (end - start) * (in_size - 1) / (width - 1))
        x = x + start * (in_size - 1)
        outside = (x < 0.0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = where(equal(width, 1.0), 0.0 * y - 0.5, (y + 0.5) / scale - 0.5)
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - as_float(out_size) / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(mode)
    return x, outside


def nearest_index(kernel: Kernel, x) -> Operand:
    """The one input index nearest to `x` by the kernel's rounding rule (unclamped)."""
    rule = kernel.nearest
    if rule == "round_prefer_floor":  # halves go down
        return ceil(x - 0.5)
    if rule == "round_prefer_ceil":
        return floor(x + 0.5)
    if rule == "floor":
        return floor(x)
    if rule == "ceil":
        return ceil(x)
    raise ValueError(rule)


def _kernel_weight(kernel: Kernel, d):
    """The linear (triangle) or cubic (Keys, coefficient A) kernel at distances `d`."""
    d = absolute(d)
    if kernel.mode == "linear":
        return maximum(1.0 - d, 0.0)
    a = kernel.cubic_a
    d2 = d * d
    d3 = d2 * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return where(d <= 1.0, near, where(d < 2.0, far, 0.0 * d))


def tap_offsets(ctx: LoweringContext, kernel: Kernel, scale, in_size, what: str) -> tuple[Traced | np.ndarray, Operand]:
    """The tap offsets from floor(x) as a float row [1, taps] and the stretch of the kernel: the kernel's
    support (1 linear, 2 cubic) in input pixels, widened by 1 / scale when antialiasing a downscale (a run-time
    scale gives a run-time number of taps). The stretch is held at 1 / (2 * in_size) or more, which changes no
    output (a smaller scale leaves no output position) and bounds the taps by the input size whatever scale the
    model is given."""
    support = 1.0 if kernel.mode == "linear" else 2.0
    if not kernel.antialias:
        first = 1 - int(support)
        return np.arange(first, first + 2 * int(support), dtype=np.float64)[None, :], 1.0
    stretch = maximum(minimum(scale, 1.0), 0.5 / in_size)
    start = floor(-support / stretch) + 1
    if not isinstance(start, Traced) and not isinstance(stretch, Traced):  # a traced scale traces both
        first = int(start)
        return np.arange(first, 2 - first, dtype=np.float64)[None, :], float(stretch)
    count = as_count(2.0 - 2.0 * start)
    taps = ctx.space.fresh(f"{what}.taps", 2, None)
    k = arange(ctx, count, taps)  # [taps, 1]
    if not isinstance(k, Traced):
        raise TypeError("a traced start gives a traced count of taps")
    row = Traced(ctx, ctx.reshape(k.t, (1, taps)))
    return row + start, stretch


@dataclass
class AxisTable:
    """How one axis is resampled: `index` [out] (nearest) or [out, taps] input indices already clamped,
    `weight` [out, taps] (None for nearest), and `outside` [out] positions that take the extrapolation value
    (None when there are none)."""

    index: Any
    weight: Any
    outside: Any


def axis_table(ctx: LoweringContext, kernel: Kernel, in_size, out_size, out_dim, scale, roi=None,
               what: str = "resize") -> AxisTable:
    """The gather indices and weights of one axis: `in_size` and `out_size` are ints or int32 `Traced` scalars,
    `scale` a float or a float32 `Traced` scalar, `out_dim` the output size as the IR knows it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _axis_table(ctx, kernel, in_size, out_size, out_dim, scale, roi, what)


def _axis_table(ctx, kernel, in_size, out_size, out_dim, scale, roi, what) -> AxisTable:
    y = arange(ctx, out_size, out_dim)
    fin = as_float(in_size)
    x, outside = source_coordinates(kernel, y, scale, fin, out_size, roi)
    last = fin - 1.0
    if kernel.mode == "nearest":
        index = maximum(minimum(nearest_index(kernel, x), last), 0.0)
        return AxisTable(as_index(index), None, outside)
    base = floor(x)
    ratio = x - base
    offsets, stretch = tap_offsets(ctx, kernel, scale, fin, what)
    weight = _kernel_weight(kernel, (offsets - ratio) * stretch)  # [out, taps]
    taps = base + offsets
    if kernel.exclude_outside:
        weight = where((taps < 0.0) | (taps > last), 0.0 * weight, weight)
    if kernel.exclude_outside or kernel.antialias:
        total = reduce_sum_last(weight)
        weight = weight / where(equal(total, 0.0), 1.0 + 0.0 * total, total)
    index = maximum(minimum(taps, last), 0.0)
    return AxisTable(as_index(index), weight, outside)


def _tensor(ctx: LoweringContext, v: Any, dtype: Any) -> ir.Tensor:
    if isinstance(v, Traced):
        return ctx.cast(v.t, dtype)
    return ctx.const(np.asarray(v).astype(dtype), name="table")


def resample_axis(ctx: LoweringContext, x: ir.Tensor, axis: int, table: AxisTable, out_dim: Any,
                  extrapolation: float = 0.0) -> ir.Tensor:
    """`x` resampled along `axis` by `table` (for linear / cubic, `x` is float32)."""
    rank = x.rank
    out_shape = tuple(x.shape[:axis]) + (out_dim,) + tuple(x.shape[axis + 1:])
    trailing = (1,) * (rank - axis - 1)
    index = _tensor(ctx, table.index, np.int32)
    if table.weight is None:
        index = ctx.reshape(index, (out_dim,))
        out = ctx.emit("GATHER", [x, index], out_shape, x.dtype, axis=axis, batch_dims=0)
    else:
        taps = index.shape[1]
        gathered = ctx.emit("GATHER", [x, index], out_shape[:axis + 1] + (taps,) + out_shape[axis + 1:], x.dtype,
                            axis=axis, batch_dims=0)
        weight = ctx.reshape(_tensor(ctx, table.weight, np.float32), (out_dim, taps) + trailing)
        weighted = ctx.emit("MUL", [gathered, weight], gathered.shape, x.dtype, fused_activation_function="NONE")
        out = ctx.emit("SUM", [weighted, ctx.const(np.array([axis + 1], np.int32), name="axis")], out_shape,
                       x.dtype, keep_dims=False)
    if table.outside is not None:
        outside = table.outside
        if not isinstance(outside, Traced) and not np.any(outside):
            return out
        mask = ctx.reshape(_tensor(ctx, outside, np.bool_), (out_dim,) + trailing)
        value = ctx.const(np.array(extrapolation, x.dtype), name="extrapolation")
        out = ctx.emit("SELECT_V2", [mask, value, out], out_shape, x.dtype)
    return out


def to_float(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    return ctx.cast(x, np.float32)


def from_float(ctx: LoweringContext, y: ir.Tensor, dtype: Any) -> ir.Tensor:
    """A float32 result back in `dtype`: integers rounded half to even and saturated, as ONNX casts them."""
    dtype = np.dtype(dtype)
    if dtype == y.dtype:
        return y
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        y = ctx.emit("ROUND", [y], like=y)
        y = ctx.emit("MAXIMUM", [y, ctx.const(np.array(float(info.min), np.float32), name="low")], like=y)
        y = ctx.emit("MINIMUM", [y, ctx.const(np.array(float(info.max), np.float32), name="high")], like=y)
    return ctx.cast(y, dtype)
