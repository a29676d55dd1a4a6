"""Pooling lowerings, exact to PyTorch's padding, ceil_mode and divisor rules."""

from __future__ import annotations

import itertools

from typing import Literal

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.aten.math_ops import extreme
from litert_torch.lower.aten.conv import TO_NCHW, TO_NHWC, explicit_padding, pair, tflite_padding
from litert_torch.lower.common.registry import LoweringContext, lowers, numpy_dtype, out_meta
from litert_torch.symbolic import all_static

aten = torch.ops.aten


def _pool_padding(ctx, xh, in_hw, out_hw, kernel, stride, padding, pad_value, allow_same: bool):
    """Pick SAME/VALID when exact, else pad explicitly (with `pad_value`) and use VALID. A dynamic size takes
    SAME/VALID only when exact at every size of its range."""
    modes = {tflite_padding(in_hw[i], out_hw[i], kernel[i], stride[i], padding[i]) for i in range(2)}
    if len(modes) == 1 and None not in modes and (allow_same or modes == {"VALID"}):
        return xh, modes.pop()
    pads = [explicit_padding(in_hw[i], out_hw[i], kernel[i], stride[i], padding[i]) for i in range(2)]
    if all(a == 0 and b == 0 for a, b in pads):
        return xh, "VALID"
    n, h, w, c = xh.shape
    shape = [n, h + sum(pads[0]), w + sum(pads[1]), c]
    paddings = ctx.const(np.array([[0, 0], *pads, [0, 0]], np.int32), name="paddings")
    if pad_value == 0:
        return ctx.emit("PAD", [xh, paddings], shape, xh.dtype), "VALID"
    return ctx.emit("PADV2", [xh, paddings, ctx.scalar_like(pad_value, xh)], shape, xh.dtype), "VALID"


@lowers(aten.max_pool2d.default)
def lower_max_pool2d(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False) -> ir.Tensor:
    """max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor

    MAX_POOL_2D; padding PyTorch treats as -inf is SAME padding or an explicit -inf PADV2. Dilated windows,
    and int32 values (LiteRT's MAX_POOL_2D takes 8- and 16-bit integers only), as the MAXIMUM of one strided
    slice per kernel tap (`pool_by_taps`), where a window holding a NaN gives NaN.

    Limits: MAX_POOL_2D compares past a NaN (in LiteRT's kernel and every delegate's), where PyTorch gives NaN
    for the window; marking those windows would take comparisons and selects that no delegate runs, so a
    convolutional network would no longer be delegated whole."""
    kernel = pair(kernel_size)
    stride = pair(stride) if stride else kernel
    padding, dilation = pair(padding), pair(dilation)
    out_shape, _ = out_meta(node)
    if dilation != [1, 1] or x.dtype == np.int32:
        return _torch_by_taps(ctx, x, out_shape, kernel, stride, padding, dilation, "max")
    x4 = x if x.rank == 4 else ctx.reshape(x, [1, *x.shape])
    shape4 = out_shape if x.rank == 4 else (1, *out_shape)
    xh = ctx.transpose(x4, TO_NHWC)
    xh, mode = _pool_padding(ctx, xh, x4.shape[2:], shape4[2:], kernel, stride, padding, -np.inf, True)

    y = ctx.emit("MAX_POOL_2D", [xh], [shape4[0], shape4[2], shape4[3], shape4[1]], x.dtype, padding=mode,
                 stride_h=stride[0], stride_w=stride[1], filter_height=kernel[0], filter_width=kernel[1],
                 fused_activation_function="NONE")
    return ctx.reshape(ctx.transpose(y, TO_NCHW), out_shape)


def _nan_flags(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """1.0 where `x` is NaN, else 0.0 (`x`'s dtype): pooled as `x` is, it marks the windows holding a NaN."""
    one, zero = ctx.scalar_like(1.0, x), ctx.scalar_like(0.0, x)
    return ctx.emit("SELECT_V2", [exact.is_nan(ctx, x), one, zero], like=x)


def _nan_where(ctx: LoweringContext, flags: ir.Tensor, y: ir.Tensor) -> ir.Tensor:
    """`y`, NaN where the pooled `flags` are set: max pooling kernels compare past a NaN, PyTorch propagates it."""
    hit = ctx.emit("GREATER", [flags, ctx.scalar_like(0.0, flags)], flags.shape, np.bool_)
    return ctx.emit("SELECT_V2", [hit, ctx.scalar_like(np.nan, y), y], like=y)


@lowers(aten.max_pool2d_with_indices.default)
def lower_max_pool2d_with_indices(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False) -> tuple[ir.Tensor, ir.Tensor | None]:
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)

    (values, indices) of max pooling: the values as aten.max_pool2d when nothing reads the indices; else
    both tap by tap (`pool_by_taps`, the index within each H x W plane, the first of equal maxima)."""
    if 1 in node.used:
        kernel = pair(kernel_size)
        return _torch_by_taps(ctx, x, node.outputs[0].shape, kernel, pair(stride) if stride else kernel,
                              pair(padding), pair(dilation), "max", indices="plane")
    values = node.with_value(node.outputs[0].shape, node.outputs[0].dtype)
    return lower_max_pool2d(ctx, values, x, kernel_size, stride, padding, dilation, ceil_mode), None


@lowers(aten.adaptive_max_pool2d.default)
def lower_adaptive_max_pool2d(ctx, node, x, output_size) -> tuple[ir.Tensor, ir.Tensor | None]:
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)

    (values, indices): the values as MAX_POOL_2D where the windows are equal (the input size a multiple of
    the output size), else axis by axis (the maximum over a window is the maximum over its rows of the maximum
    over its columns): per output row and then per output column, REDUCE_MAX of PyTorch's window
    [floor(i * in / out), ceil((i + 1) * in / out)), concatenated; the input's NaN flags, reduced the same way,
    make a window holding a NaN NaN.

    With the indices read: `adaptive_argmax` (both, window by window, axis by axis).

    Limits: uneven windows and indices need static sizes."""
    out_shape = node.outputs[0].shape
    oh, ow = out_shape[-2:]
    h, w = x.shape[-2:]
    if 1 in node.used:
        sizes, outs = _adaptive_sizes(ctx, x, out_shape, 2, "adaptive max pooling with indices")
        values, index = adaptive_argmax(ctx, x, sizes, outs)
        return values, ctx.cast(index, numpy_dtype(node.outputs[1].dtype))
    if not all_static([h, w]):
        raise ctx.fail(f"adaptive max pooling from a dynamic {h}x{w} to {oh}x{ow} has no lowering")
    if h % oh or w % ow:
        flags = _nan_flags(ctx, x) if x.dtype.kind == "f" else None
        for axis, size, out in ((x.rank - 2, h, oh), (x.rank - 1, w, ow)):
            x = _adaptive_max_along(ctx, x, axis, size, out)
            flags = _adaptive_max_along(ctx, flags, axis, size, out) if flags is not None else None
        return (x if flags is None else _nan_where(ctx, flags, x)), None
    values = node.with_value(out_shape, node.outputs[0].dtype)
    kernel = [h // oh, w // ow]
    return lower_max_pool2d(ctx, values, x, kernel, kernel, 0, 1, False), None


def adaptive_argmax(ctx: LoweringContext, x: ir.Tensor, sizes: list[int], outs: list[int]) -> tuple[ir.Tensor, ir.Tensor]:
    """(values, int32 indices) of adaptive max pooling over the last len(sizes) axes, the index flat within each
    spatial block, as PyTorch's: the first maximum in row-major order, or the last NaN where the window holds
    one. Axis by axis from the last: per output position and window offset t, the candidate (a GATHER of the
    window's t-th entry along the axis, clamped, with a constant mask for windows shorter than t + 1) replaces
    the best so far where it is greater or NaN; its index is its position along the axis times the axis'
    stride plus the index carried from the later axes. Taking the first strict maximum of each row, then of
    the rows, gives the first in row-major order; the last NaN of the last row holding one is the last NaN."""
    rank, spatial = x.rank, len(sizes)
    strides = [int(np.prod(sizes[k + 1:])) for k in range(spatial)]
    values, index = x, None
    for k in reversed(range(spatial)):
        axis, size, out = rank - spatial + k, sizes[k], outs[k]
        windows = adaptive_windows(size, out)
        longest = max(b - a for a, b in windows)
        shape = list(values.shape)
        shape[axis] = out
        view = [1] * rank
        view[axis] = out
        best = best_index = None
        for t in range(longest):
            rows = np.array([min(a + t, b - 1) for a, b in windows], np.int32)
            inside = np.array([a + t < b for a, b in windows])
            taps = ctx.const(rows, name="taps")
            piece = ctx.emit("GATHER", [values, taps], shape, values.dtype, axis=axis, batch_dims=0)
            where = ctx.const((rows * strides[k]).reshape(view), name="tap_index")
            if index is not None:
                where = ctx.emit("ADD", [ctx.emit("GATHER", [index, taps], shape, np.int32, axis=axis, batch_dims=0),
                                         where], shape, np.int32, fused_activation_function="NONE")
            if best is None:
                best, best_index = piece, where
                continue
            take = ctx.emit("GREATER", [piece, best], shape, np.bool_)
            if piece.dtype.kind == "f":
                take = ctx.emit("LOGICAL_OR", [take, exact.is_nan(ctx, piece)], shape, np.bool_)
            if not inside.all():
                take = ctx.emit("LOGICAL_AND", [take, ctx.const(inside.reshape(view), name="inside")], shape,
                                np.bool_)
            best = ctx.emit("SELECT_V2", [take, piece, best], shape, values.dtype)
            best_index = ctx.emit("SELECT_V2", [take, where, best_index], shape, np.int32)
        if best is None or best_index is None:
            raise ctx.fail("adaptive max pooling over an empty window")
        if best_index.shape != tuple(shape):
            best_index = ctx.emit("BROADCAST_TO", [best_index, ctx.dims_tensor(shape)], shape, np.int32)
        values, index = best, best_index
    if index is None:
        raise ctx.fail("adaptive max pooling over no axis")
    return values, index


def _adaptive_max_along(ctx: LoweringContext, x, axis: int, size: int, out: int):
    """x with `axis` reduced from `size` to `out` by the maximum over each of PyTorch's adaptive windows."""
    if size == out:
        return x
    axis_t = ctx.const(np.array([axis], np.int32), name="axis")
    parts = []
    for i in range(out):
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        begins, sizes = [0] * x.rank, list(x.shape)
        begins[axis], sizes[axis] = start, end - start
        window = ctx.slice(x, begins, sizes)
        sizes[axis] = 1
        parts.append(ctx.emit("REDUCE_MAX", [window, axis_t], sizes, x.dtype, keep_dims=True))
    shape = list(x.shape)
    shape[axis] = out
    return ctx.emit("CONCATENATION", parts, shape, x.dtype, axis=axis, fused_activation_function="NONE")


def avg_pool_divisors(in_hw, out_hw, kernel, stride, padding, count_include_pad, divisor_override) -> np.ndarray:
    """The divisor PyTorch uses for each output position of avg_pool2d, shape [out_h, out_w]."""
    def extents(size, out, k, s, p):
        full, clipped = [], []
        for i in range(out):
            start = i * s - p
            end = min(start + k, size + p)
            full.append(end - start)
            clipped.append(min(end, size) - max(start, 0))
        return np.array(full), np.array(clipped)

    full_h, clip_h = extents(in_hw[0], out_hw[0], kernel[0], stride[0], padding[0])
    full_w, clip_w = extents(in_hw[1], out_hw[1], kernel[1], stride[1], padding[1])
    if divisor_override:
        return np.full([out_hw[0], out_hw[1]], float(divisor_override))
    if count_include_pad:
        return np.outer(full_h, full_w).astype(np.float64)
    return np.outer(clip_h, clip_w).astype(np.float64)


@lowers(aten.avg_pool2d.default)
def lower_avg_pool2d(ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None) -> ir.Tensor:
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor

    AVERAGE_POOL_2D, exact for every padding / ceil_mode / count_include_pad / divisor_override.

    TFLite divides each window by the number of real (unpadded) cells it covers. Where PyTorch's divisor
    differs, the input is zero-padded explicitly (so every window is full and TFLite divides by kh * kw) and the
    result is multiplied by the constant kh * kw / divisor per output position.
    """
    kernel = pair(kernel_size)
    stride = pair(stride) if stride else kernel
    padding = pair(padding)
    out_shape, _ = out_meta(node)
    x4 = x if x.rank == 4 else ctx.reshape(x, [1, *x.shape])
    shape4 = out_shape if x.rank == 4 else (1, *out_shape)
    in_hw, out_hw = x4.shape[2:], shape4[2:]
    if not all_static([*in_hw, *out_hw]):
        return ctx.reshape(ctx.transpose(_dynamic_avg_pool(ctx, x4, shape4, kernel, stride, padding, ceil_mode,
                                                           count_include_pad, divisor_override), TO_NCHW), out_shape)
    divisors = avg_pool_divisors(in_hw, out_hw, kernel, stride, padding, count_include_pad, divisor_override)
    tfl_divisors = avg_pool_divisors(in_hw, out_hw, kernel, stride, padding, False, None)
    xh = ctx.transpose(x4, TO_NHWC)
    exact_same = np.array_equal(divisors, tfl_divisors)
    xh, mode = _pool_padding(ctx, xh, in_hw, out_hw, kernel, stride, padding, 0.0, exact_same)
    y = ctx.emit("AVERAGE_POOL_2D", [xh], [shape4[0], out_hw[0], out_hw[1], shape4[1]], x.dtype, padding=mode,
                 stride_h=stride[0], stride_w=stride[1], filter_height=kernel[0], filter_width=kernel[1],
                 fused_activation_function="NONE")
    if mode == "VALID":
        # Every VALID window (after any explicit padding) is full: TFLite divided by kh * kw.
        scale = (kernel[0] * kernel[1]) / divisors
        if not np.all(scale == 1.0):
            y = ctx.emit("MUL", [y, ctx.const(scale.reshape(1, out_hw[0], out_hw[1], 1).astype(x.dtype),
                                              name="divisor_fix")], like=y)
    return ctx.reshape(ctx.transpose(y, TO_NCHW), out_shape)


def _dynamic_avg_pool(ctx, x4, shape4, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """avg_pool2d over dynamic sizes, in NHWC. The window sums come from AVERAGE_POOL_2D over the zero-padded
    input (every window full, so TFLite divides by kh * kw); PyTorch's divisor is kh * kw, the override, or
    the count of real cells, which the same pooling of a padded mask of ones gives at run time."""
    in_hw, out_hw = x4.shape[2:], shape4[2:]
    pads = [explicit_padding(in_hw[i], out_hw[i], kernel[i], stride[i], padding[i]) for i in range(2)]
    xh = ctx.transpose(x4, TO_NHWC)
    n, h, w, c = xh.shape
    padded = [n, h + sum(pads[0]), w + sum(pads[1]), c]
    paddings = ctx.const(np.array([[0, 0], *pads, [0, 0]], np.int32), name="paddings")
    is_padded = any(p for pair_ in pads for p in pair_)
    if is_padded:
        xh = ctx.emit("PAD", [xh, paddings], padded, xh.dtype)
    options = dict(padding="VALID", stride_h=stride[0], stride_w=stride[1], filter_height=kernel[0],
                   filter_width=kernel[1], fused_activation_function="NONE")
    y = ctx.emit("AVERAGE_POOL_2D", [xh], [shape4[0], out_hw[0], out_hw[1], shape4[1]], x4.dtype, **options)
    full = kernel[0] * kernel[1]
    if divisor_override:
        scale = full / float(divisor_override)
        return y if scale == 1.0 else ctx.emit("MUL", [y, ctx.scalar_like(scale, y)], like=y)
    if count_include_pad or not is_padded:
        return y
    ones = ctx.emit("FILL", [ctx.dims_tensor([1, h, w, 1]), ctx.scalar_like(1.0, y)], [1, h, w, 1], y.dtype)
    mask = ctx.emit("PAD", [ones, paddings], [1, padded[1], padded[2], 1], y.dtype)
    share = ctx.emit("AVERAGE_POOL_2D", [mask], [1, out_hw[0], out_hw[1], 1], y.dtype, **options)
    return ctx.emit("DIV", [y, share], like=y, fused_activation_function="NONE")


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


@lowers(aten.adaptive_avg_pool2d.default, aten._adaptive_avg_pool2d.default)
def lower_adaptive_avg_pool2d(ctx: LoweringContext, node, x, output_size) -> ir.Tensor:
    """adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor

    Global pooling is MEAN over H and W; equal windows are AVERAGE_POOL_2D; uneven windows are two
    FULLY_CONNECTED products with the constant pooling matrices (adaptive pooling is linear in the input)."""
    out_shape, _ = out_meta(node)
    oh, ow = out_shape[-2:]
    h, w = x.shape[-2:]
    if (oh, ow) == (1, 1):
        axes = ctx.const(np.array([x.rank - 2, x.rank - 1], np.int32), name="axes")
        return ctx.emit("MEAN", [x, axes], out_shape, x.dtype, keep_dims=True)
    if h % oh == 0 and w % ow == 0:
        x4 = x if x.rank == 4 else ctx.reshape(x, [1, *x.shape])
        kernel = [h // oh, w // ow]
        y = ctx.emit("AVERAGE_POOL_2D", [ctx.transpose(x4, TO_NHWC)], [x4.shape[0], oh, ow, x4.shape[1]], x.dtype,
                     padding="VALID", stride_h=kernel[0], stride_w=kernel[1], filter_height=kernel[0],
                     filter_width=kernel[1], fused_activation_function="NONE")
        return ctx.reshape(ctx.transpose(y, TO_NCHW), out_shape)

    def matrix(size, out):
        m = np.zeros([out, size], np.float64)
        for i, (a, b) in enumerate(adaptive_windows(size, out)):
            m[i, a:b] = 1.0 / (b - a)
        return m.astype(x.dtype)

    # Pool W: [.., H, W] x [ow, W]^T -> [.., H, ow]; then H the same way on the transposed tensor.
    lead = list(x.shape[:-2])
    by_w = ctx.emit("FULLY_CONNECTED", [x, ctx.const(matrix(w, ow), name="pool_w"), None], [*lead, h, ow],
                    x.dtype, keep_num_dims=True, fused_activation_function="NONE")
    perm = [*range(len(lead)), len(lead) + 1, len(lead)]
    by_h = ctx.emit("FULLY_CONNECTED", [ctx.transpose(by_w, perm), ctx.const(matrix(h, oh), name="pool_h"), None],
                    [*lead, ow, oh], x.dtype, keep_num_dims=True, fused_activation_function="NONE")
    return ctx.transpose(by_h, perm)


def _adaptive_avg_along(ctx: LoweringContext, x, axis: int, size: int, out: int):
    """x with `axis` reduced from `size` to `out` by the mean over each of PyTorch's adaptive windows: one
    FULLY_CONNECTED with the constant pooling matrix, the axis moved last and back."""
    if size == out:
        return x
    m = np.zeros([out, size], np.float64)
    for i, (a, b) in enumerate(adaptive_windows(size, out)):
        m[i, a:b] = 1.0 / (b - a)
    perm = list(range(x.rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    xt = ctx.transpose(x, perm)
    y = ctx.emit("FULLY_CONNECTED", [xt, ctx.const(m.astype(x.dtype), name="pool_matrix"), None],
                 [*xt.shape[:-1], out], x.dtype, keep_num_dims=True, fused_activation_function="NONE")
    return ctx.transpose(y, perm)


def _adaptive_sizes(ctx, x, out_shape, spatial: int, what: str):
    sizes = list(x.shape[-spatial:])
    if not all_static(sizes):
        raise ctx.fail(f"{what} from a dynamic {'x'.join(map(str, sizes))} input has no lowering")
    return sizes, list(out_shape[-spatial:])


@lowers(aten._adaptive_avg_pool3d.default)
def lower_adaptive_avg_pool3d(ctx: LoweringContext, node, x, output_size) -> ir.Tensor:
    """_adaptive_avg_pool3d(Tensor self, SymInt[3] output_size) -> Tensor

    Global pooling is MEAN over D, H and W; otherwise the mean over PyTorch's windows, axis by axis (the
    windows are products of one range per axis, so the mean is separable): one FULLY_CONNECTED with a constant
    pooling matrix per axis whose size changes.

    Limits: static spatial sizes."""
    out_shape, _ = out_meta(node)
    sizes, outs = _adaptive_sizes(ctx, x, out_shape, 3, "adaptive average pooling")
    if outs == [1, 1, 1]:
        axes = ctx.const(np.array([x.rank - 3, x.rank - 2, x.rank - 1], np.int32), name="axes")
        return ctx.emit("MEAN", [x, axes], out_shape, x.dtype, keep_dims=True)
    for k, (size, out) in enumerate(zip(sizes, outs)):
        x = _adaptive_avg_along(ctx, x, x.rank - 3 + k, size, out)
    return x


@lowers(aten.adaptive_max_pool3d.default)
def lower_adaptive_max_pool3d(ctx, node, x, output_size) -> tuple[ir.Tensor, ir.Tensor | None]:
    """adaptive_max_pool3d(Tensor self, int[3] output_size) -> (Tensor, Tensor)

    (values, indices): the maximum over PyTorch's windows axis by axis (REDUCE_MAX per window, concatenated;
    the maximum over a product of ranges is separable); the input's NaN flags, reduced the same way, make a
    window holding a NaN NaN.

    With the indices read: `adaptive_argmax`.

    Limits: static spatial sizes."""
    out_shape = node.outputs[0].shape
    sizes, outs = _adaptive_sizes(ctx, x, out_shape, 3, "adaptive max pooling")
    if 1 in node.used:
        values, index = adaptive_argmax(ctx, x, sizes, outs)
        return values, ctx.cast(index, numpy_dtype(node.outputs[1].dtype))
    flags = _nan_flags(ctx, x) if x.dtype.kind == "f" else None
    for k, (size, out) in enumerate(zip(sizes, outs)):
        axis = x.rank - 3 + k
        x = _adaptive_max_along(ctx, x, axis, size, out)
        flags = _adaptive_max_along(ctx, flags, axis, size, out) if flags is not None else None
    return (x if flags is None else _nan_where(ctx, flags, x)), None


# ---- pooling of any rank, dilation and padding, tap by tap -------------------------------------------------------
def _tap_positions(size_out: int, stride: int, dilation: int, kernel: int, begin: int) -> np.ndarray:
    """[out, kernel] input positions each window reads along one axis (may fall in the padding)."""
    return (np.arange(size_out)[:, None] * stride - begin) + np.arange(kernel)[None, :] * dilation


def pool_by_taps(ctx: LoweringContext, x, out_spatial, kernel, strides, dilations, pads, kind: str, *,
                 count_include_pad: bool = False, divisor_override=None, indices: str | None = None,
                 order: Literal["C", "F"] = "C") -> ir.Tensor | tuple[ir.Tensor, ir.Tensor]:
    """Max, average or sum (`kind`) pooling of an [N, C, *spatial] input with any number of spatial axes, strides, dilations
    and (begin, end) pads per axis, as the elementwise MAXIMUM (or sum) of one strided slice per kernel tap of
    the padded input. The windows start at o * stride - begin; taps outside the input never win a max, and an
    average divides by the taps inside the input (`count_include_pad`: inside the input and its pads, not the
    ceil-mode overhang; `divisor_override`: that number). `indices` "flat" also returns the argmax as ONNX's
    index over the whole [N, C, *spatial] input, "plane" as PyTorch's index within each spatial plane; the
    first of equal maxima wins; `order` "F" numbers the spatial positions column-major (ONNX's storage_order 1).

    The spatial sizes must be static (the slices and divisors are computed at conversion)."""
    spatial = list(x.shape[2:])
    rank = x.rank
    if not all(isinstance(d, int) for d in [*spatial, *out_spatial]):
        raise ctx.fail("pooling of dynamic spatial sizes with these options has no lowering")
    positions = [_tap_positions(o, s, d, k, b) for o, s, d, k, (b, _) in
                 zip(out_spatial, strides, dilations, kernel, pads)]
    # pad so that every tap of every window lies inside the padded input
    before = [max(0, -int(p.min())) for p in positions]
    after = [max(0, int(p.max()) - (size - 1)) for p, size in zip(positions, spatial)]
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    else:
        fill = 0.0
    xp = x
    if any(before) or any(after):
        padded = list(x.shape[:2]) + [s + b + a for s, b, a in zip(spatial, before, after)]
        paddings = ctx.const(np.array([[0, 0], [0, 0], *zip(before, after)], np.int32), name="paddings")
        xp = ctx.emit("PADV2", [x, paddings, ctx.const(np.array(fill, x.dtype), name="fill")], padded, x.dtype)
    out_shape = tuple(x.shape[:2]) + tuple(out_spatial)
    taps = list(itertools.product(*[range(k) for k in kernel]))
    best: ir.Tensor | None = None
    best_index: ir.Tensor | None = None
    total: ir.Tensor | None = None
    seen = np.zeros(out_spatial, bool)  # the output positions whose window has had a tap inside the input
    for tap in taps:
        begin = [0, 0] + [int(positions[i][0, t]) + before[i] for i, t in enumerate(tap)]
        end = [0, 0] + [begin[2 + i] + (out_spatial[i] - 1) * strides[i] + 1 for i in range(rank - 2)]
        piece = ctx.emit("STRIDED_SLICE", [xp, ctx.const(np.array(begin, np.int32), name="begin"),
                                           ctx.const(np.array(end, np.int32), name="end"),
                                           ctx.const(np.array([1, 1, *strides], np.int32), name="strides")],
                         out_shape, x.dtype, begin_mask=3, end_mask=3, shrink_axis_mask=0, ellipsis_mask=0,
                         new_axis_mask=0, offset=False)
        if kind != "max":
            total = piece if total is None else ctx.emit("ADD", [total, piece], like=piece,
                                                         fused_activation_function="NONE")
            continue
        if indices is None:
            if best is None:
                best = piece
            elif piece.dtype.kind == "f":  # NaN propagates
                best = extreme(ctx, "MAXIMUM", best, piece, out_shape, propagate=True)
            else:
                best = ctx.emit("MAXIMUM", [best, piece], like=piece)
            continue
        # the tap's input position per output, and whether it lies in the input
        grids = np.meshgrid(*[positions[i][:, t] for i, t in enumerate(tap)], indexing="ij")
        inside = np.all([(g >= 0) & (g < size) for g, size in zip(grids, spatial)], axis=0)
        flat = np.ravel_multi_index([np.clip(g, 0, size - 1) for g, size in zip(grids, spatial)], spatial,
                                    order=order)
        where = ctx.const(flat.astype(np.int32).reshape((1, 1, *out_spatial)), name="tap_index")
        if best is None:
            best, best_index, seen = piece, where, inside
            continue
        better = ctx.emit("GREATER", [piece, best], out_shape, np.bool_)
        if piece.dtype.kind == "f":  # PyTorch takes a NaN as the maximum, the last NaN of a window
            better = ctx.emit("LOGICAL_OR", [better, exact.is_nan(ctx, piece)], out_shape, np.bool_)
        # a tap in the padding never wins; the first tap inside the input wins over padding
        take = better if np.all(seen) else ctx.emit(
            "LOGICAL_OR", [better, ctx.const((~seen).reshape((1, 1, *out_spatial)), name="unseen")],
            out_shape, np.bool_)
        if not np.all(inside):
            take = ctx.emit("LOGICAL_AND", [take, ctx.const(inside.reshape((1, 1, *out_spatial)), name="inside")],
                            out_shape, np.bool_)
        best = ctx.emit("SELECT_V2", [take, piece, best], out_shape, x.dtype)
        best_index = ctx.emit("SELECT_V2", [take, where, best_index], out_shape, np.int32)
        seen = seen | inside
    if kind != "max":
        if total is None:
            raise ctx.fail("pooling over an empty window")
        if kind == "sum":
            return total
        if divisor_override:
            count = np.full(out_spatial, float(divisor_override))
        else:
            count = np.ones(out_spatial)
            for i, (p, size, (b, e)) in enumerate(zip(positions, spatial, pads)):
                low, high = (-b, size + e) if count_include_pad else (0, size)
                per = ((p >= low) & (p < high)).sum(axis=1).astype(np.float64)
                count = count * per.reshape([-1 if j == i else 1 for j in range(len(spatial))])
        divisor = ctx.const(count.reshape((1, 1, *out_spatial)).astype(x.dtype), name="divisor")
        return ctx.emit("DIV", [total, divisor], like=total, fused_activation_function="NONE")
    if best is None:
        raise ctx.fail("pooling over an empty window")
    if indices is None:
        return best
    if best_index is None:
        raise ctx.fail("max pooling indices over an empty window")
    if indices == "flat":
        n, c = x.shape[:2]
        if not all(isinstance(d, int) for d in (n, c)):
            raise ctx.fail("max pooling indices of a dynamic batch or channel count have no lowering")
        plane = int(np.prod(spatial))
        base = (np.arange(n * c).reshape(n, c) * plane).astype(np.int32).reshape((n, c) + (1,) * len(spatial))
        best_index = ctx.emit("ADD", [best_index, ctx.const(base, name="plane_start")], out_shape, np.int32,
                              fused_activation_function="NONE")
    elif best_index.shape != out_shape:
        best_index = ctx.emit("BROADCAST_TO", [best_index, ctx.dims_tensor(out_shape)], out_shape, np.int32)
    return best, best_index


def _torch_by_taps(ctx, x, out_shape, kernel, stride, padding, dilation, kind, **options):
    """`pool_by_taps` for a PyTorch pooling op (symmetric padding; an unbatched input gets a batch of one)."""
    spatial = len(kernel)
    unbatched = x.rank == spatial + 1
    xb = ctx.reshape(x, [1, *x.shape]) if unbatched else x
    result = pool_by_taps(ctx, xb, list(out_shape[-spatial:]), kernel, stride, dilation,
                          [(p, p) for p in padding], kind, **options)
    if not unbatched:
        return result
    if isinstance(result, tuple):
        return tuple(ctx.reshape(r, list(out_shape)) for r in result)
    return ctx.reshape(result, list(out_shape))


def _triple(v, n=3) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(a) for a in (v * n if len(v) == 1 else v)]


@lowers(aten.max_pool3d_with_indices.default)
def lower_max_pool3d_with_indices(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False) -> tuple[ir.Tensor, ir.Tensor | None]:
    """max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)

    (values, indices) of 3-D max pooling as the MAXIMUM of one strided slice per kernel tap; the indices (when
    read) within each D x H x W volume, the first of equal maxima."""
    kernel = _triple(kernel_size)
    stride = _triple(stride) if stride else kernel
    want = "plane" if 1 in node.used else None
    result = _torch_by_taps(ctx, x, node.outputs[0].shape, kernel, stride, _triple(padding), _triple(dilation),
                            "max", indices=want)
    return result if want else (result, None)


@lowers(aten.avg_pool3d.default)
def lower_avg_pool3d(ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None) -> ir.Tensor:
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor

    3-D average pooling as the sum of one strided slice per kernel tap over PyTorch's divisor (the taps in
    the input, or with `count_include_pad` in the input and its padding, or `divisor_override`)."""
    kernel = _triple(kernel_size)
    stride = _triple(stride) if stride else kernel
    shape, _ = out_meta(node)
    return _torch_by_taps(ctx, x, shape, kernel, stride, _triple(padding), [1, 1, 1], "avg",
                          count_include_pad=bool(count_include_pad), divisor_override=divisor_override)
