"""Resizing (interpolate / upsample) as TFLite's NHWC resize builtins."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import LoweringError
from litert_torch.lower.common import grid_sample
from litert_torch.lower.common import interpolate as ip
from litert_torch.lower.aten.conv import TO_NCHW, TO_NHWC
from litert_torch.lower.common.registry import LoweringContext, lowers, out_meta, schema_of
from litert_torch.symbolic import all_static, is_static, same_size

aten = torch.ops.aten


def check_scales(ctx: LoweringContext, in_hw, out_hw, scales) -> None:
    """PyTorch maps output to input coordinates with the given scale factor when there is one; TFLite always
    uses in/out. They agree only when scale == out/in."""
    if not scales:
        return
    for size, out, scale in zip(in_hw, out_hw, scales):
        if not is_static(size) or not is_static(out):
            if scale is None or float(scale) != int(scale) or not same_size(out, size * int(scale)):
                raise ctx.fail(f"scale factor {scale} does not map every size {size} onto exactly {out} pixels; "
                               "use an integer scale factor for a dynamic size")
            continue
        if scale is not None and not np.isclose(1.0 / float(scale), size / out, rtol=0, atol=1e-12):
            raise ctx.fail(f"scale factor {scale} does not map {size} pixels onto exactly {out}; pass size= "
                           "instead of scale_factor= (or recompute_scale_factor=True)")


def resize(ctx: LoweringContext, node, x, opcode: str, align_corners: bool, half_pixel: bool, scales) -> ir.Tensor:
    shape, _ = out_meta(node)
    try:
        check_scales(ctx, x.shape[2:], shape[2:], scales)
    except LoweringError:
        if not all_static([*x.shape[2:], *shape[2:]]):
            raise
        # a scale factor that is not TFLite's in/out ratio: the general form computes PyTorch's
        mode = ("nearest-exact" if half_pixel else "nearest") if opcode == "RESIZE_NEAREST_NEIGHBOR" else "linear"
        return separable(ctx, node, x, mode, align_corners, scales)
    y = ctx.emit(opcode, [ctx.transpose(x, TO_NHWC), ctx.dims_tensor(shape[2:]) if not all_static(shape[2:])
                          else ctx.const(np.array(shape[2:], np.int32), name="size")],
                 [shape[0], shape[2], shape[3], shape[1]], x.dtype, align_corners=bool(align_corners),
                 half_pixel_centers=bool(half_pixel))
    return ctx.transpose(y, TO_NCHW)


@lowers(aten.upsample_bilinear2d.vec)
def lower_upsample_bilinear_vec(ctx, node, x, output_size, align_corners, scale_factors) -> ir.Tensor:
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor

    RESIZE_BILINEAR; align_corners=False is TFLite's half_pixel_centers.

    Limits: scale factors must map the input size onto the output size exactly."""
    return resize(ctx, node, x, "RESIZE_BILINEAR", align_corners, not align_corners, scale_factors)


@lowers(aten.upsample_bilinear2d.default)
def lower_upsample_bilinear(ctx, node, x, output_size, align_corners, scales_h=None, scales_w=None) -> ir.Tensor:
    """upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    RESIZE_BILINEAR; align_corners=False is TFLite's half_pixel_centers."""
    return resize(ctx, node, x, "RESIZE_BILINEAR", align_corners, not align_corners, [scales_h, scales_w])


@lowers(aten.upsample_nearest2d.vec)
def lower_upsample_nearest_vec(ctx, node, x, output_size, scale_factors) -> ir.Tensor:
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor

    RESIZE_NEAREST_NEIGHBOR with floor(dst * in / out) source pixels, as PyTorch's 'nearest'.

    Limits: scale factors must map the input size onto the output size exactly."""
    return resize(ctx, node, x, "RESIZE_NEAREST_NEIGHBOR", False, False, scale_factors)


@lowers(aten.upsample_nearest2d.default)
def lower_upsample_nearest(ctx, node, x, output_size, scales_h=None, scales_w=None) -> ir.Tensor:
    """upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor

    RESIZE_NEAREST_NEIGHBOR with floor(dst * in / out) source pixels, as PyTorch's 'nearest'."""
    return resize(ctx, node, x, "RESIZE_NEAREST_NEIGHBOR", False, False, [scales_h, scales_w])


@lowers(aten._upsample_nearest_exact2d.vec)
def lower_upsample_nearest_exact_vec(ctx, node, x, output_size, scale_factors) -> ir.Tensor:
    """_upsample_nearest_exact2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor

    RESIZE_NEAREST_NEIGHBOR with half-pixel centres, as PyTorch's 'nearest-exact'."""
    return resize(ctx, node, x, "RESIZE_NEAREST_NEIGHBOR", False, True, scale_factors)


# ---- interpolation of any rank and mode, one axis at a time ------------------------------------------------------
def _torch_nearest_table(in_size: int, out_size: int, scale, exact: bool) -> ip.AxisTable:
    """PyTorch's nearest source pixels, computed in float32 as its kernels do: floor(dst * s), or
    floor((dst + 0.5) * s) for nearest-exact, with s = 1 / scale_factor or in / out."""
    s = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    dst = np.arange(out_size, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    index = np.minimum(np.floor(dst * s).astype(np.int64), in_size - 1)
    return ip.AxisTable(index, None, None)


def separable(ctx: LoweringContext, node, x, mode: str, align_corners: bool, scales) -> ir.Tensor:
    """F.interpolate over every spatial axis as the gather-and-weigh resize of `interpolate`: "nearest" and
    "nearest-exact" with PyTorch's source pixels, "linear" (linear / bilinear / trilinear) and "cubic" (bicubic,
    A = -0.75, taps clamped to the edge) with half-pixel or align-corners coordinates. Source coordinates of a
    given scale factor use 1 / scale_factor, as PyTorch does."""
    shape, _ = out_meta(node)
    spatial = list(range(2, x.rank))
    scales = list(scales) if scales else [None] * len(spatial)
    if not all_static([*x.shape[2:], *shape[2:]]):
        raise ctx.fail(f"{mode} interpolation of dynamic spatial sizes has no lowering")
    y = x
    if mode in ("linear", "cubic"):
        if x.dtype.kind != "f":
            raise ctx.fail(f"{mode} interpolation of {x.dtype} values has no lowering")
        y = ip.to_float(ctx, x)
    kernel = ip.Kernel(mode, "align_corners" if align_corners else "half_pixel") if mode in ("linear", "cubic") \
        else None
    for axis, scale in zip(spatial, scales):
        size, out = int(x.shape[axis]), int(shape[axis])
        if size == out and (scale is None or float(scale) == 1.0):
            continue
        if kernel is None:
            table = _torch_nearest_table(size, out, scale, mode == "nearest-exact")
        else:
            ratio = out / size if align_corners or not scale else float(scale)
            table = ip.axis_table(ctx, kernel, size, out, out, ratio)
        y = ip.resample_axis(ctx, y, axis, table, out)
    if y is x:
        return x
    return ip.from_float(ctx, y, x.dtype) if kernel is not None else y


def _vec(scale_factors, n):
    return list(scale_factors) if scale_factors else [None] * n


@lowers(aten.upsample_bicubic2d.default)
def lower_upsample_bicubic(ctx, node, x, output_size, align_corners, scales_h=None, scales_w=None) -> ir.Tensor:
    """upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    Bicubic (A = -0.75) as four clamped taps per output pixel along H, then W: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "cubic", align_corners, [scales_h, scales_w])


@lowers(aten.upsample_bicubic2d.vec)
def lower_upsample_bicubic_vec(ctx, node, x, output_size, align_corners, scale_factors) -> ir.Tensor:
    """upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor

    Bicubic (A = -0.75) as four clamped taps per output pixel along H, then W: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "cubic", align_corners, _vec(scale_factors, 2))


@lowers(aten.upsample_linear1d.default)
def lower_upsample_linear1d(ctx, node, x, output_size, align_corners, scales=None) -> ir.Tensor:
    """upsample_linear1d(Tensor self, SymInt[1] output_size, bool align_corners, float? scales=None) -> Tensor

    Linear interpolation of [N, C, L] as two taps per output position: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "linear", align_corners, [scales])


@lowers(aten.upsample_linear1d.vec)
def lower_upsample_linear1d_vec(ctx, node, x, output_size, align_corners, scale_factors) -> ir.Tensor:
    """upsample_linear1d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor

    Linear interpolation of [N, C, L] as two taps per output position: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "linear", align_corners, _vec(scale_factors, 1))


@lowers(aten.upsample_trilinear3d.default)
def lower_upsample_trilinear(ctx, node, x, output_size, align_corners, scales_d=None, scales_h=None,
                             scales_w=None) -> ir.Tensor:
    """upsample_trilinear3d(Tensor self, SymInt[3] output_size, bool align_corners, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor

    Trilinear interpolation as two taps per output position along D, H and W in turn."""
    return separable(ctx, node, x, "linear", align_corners, [scales_d, scales_h, scales_w])


@lowers(aten.upsample_trilinear3d.vec)
def lower_upsample_trilinear_vec(ctx, node, x, output_size, align_corners, scale_factors) -> ir.Tensor:
    """upsample_trilinear3d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor

    Trilinear interpolation as two taps per output position along D, H and W in turn."""
    return separable(ctx, node, x, "linear", align_corners, _vec(scale_factors, 3))


def _antialiased(ctx: LoweringContext, node, x, op, align_corners: bool, scales):
    """An antialiased resize (F.interpolate(antialias=True)) as the gather-and-weigh resize of each axis, with
    the weights PyTorch's own kernel gives: the op applied to the identity along that axis (its weights are
    separable), each output's window of nonzero weights as its taps."""
    shape, _ = out_meta(node)
    if not all_static([*x.shape[2:], *shape[2:]]):
        raise ctx.fail("antialiased interpolation of dynamic spatial sizes has no lowering")
    if x.dtype.kind != "f":
        raise ctx.fail(f"antialiased interpolation of {x.dtype} values has no lowering")
    scales = list(scales) if scales else [None, None]
    y = ip.to_float(ctx, x)
    for axis, scale in zip((2, 3), scales):
        size, out = int(x.shape[axis]), int(shape[axis])
        if size == out and (scale is None or float(scale) == 1.0):
            continue
        # the identity along W, over two rows (PyTorch takes another path for an axis of size 1)
        identity = torch.eye(size, dtype=torch.float64).reshape(1, size, 1, size).expand(1, size, 2, size)
        weights = op(identity.contiguous(), [2, out], align_corners, None, scale)[0, :, 0, :].T.numpy()  # [out, size]
        nonzero = weights != 0
        first = np.where(nonzero.any(1), nonzero.argmax(1), 0)
        last = np.where(nonzero.any(1), size - 1 - nonzero[:, ::-1].argmax(1), 0)
        taps = int((last - first).max()) + 1
        index = np.minimum(first[:, None] + np.arange(taps)[None, :], size - 1)
        weight = np.where(first[:, None] + np.arange(taps)[None, :] <= last[:, None],
                          np.take_along_axis(weights, index, 1), 0.0)
        y = ip.resample_axis(ctx, y, axis, ip.AxisTable(index, weight, None), out)
    return x if y is x else ip.from_float(ctx, y, x.dtype)


@lowers(aten._upsample_bilinear2d_aa.default)
def lower_upsample_bilinear_aa(ctx, node, x, output_size, align_corners, scales_h=None, scales_w=None) -> ir.Tensor:
    """_upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    Antialiased bilinear resize: per axis, GATHER of each output's window, MUL by PyTorch's weights, SUM."""
    return _antialiased(ctx, node, x, aten._upsample_bilinear2d_aa.default, align_corners, [scales_h, scales_w])


@lowers(aten._upsample_bicubic2d_aa.default)
def lower_upsample_bicubic_aa(ctx, node, x, output_size, align_corners, scales_h=None, scales_w=None) -> ir.Tensor:
    """_upsample_bicubic2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    Antialiased bicubic resize: per axis, GATHER of each output's window, MUL by PyTorch's weights, SUM."""
    return _antialiased(ctx, node, x, aten._upsample_bicubic2d_aa.default, align_corners, [scales_h, scales_w])


def _nearest(target: Any, exact: bool, n: int, vec: bool):
    mode = "nearest-exact" if exact else "nearest"

    def lower(ctx, node, x, output_size, *scales) -> ir.Tensor:
        factors = _vec(scales[0], n) if vec else list(scales) + [None] * (n - len(scales))
        return separable(ctx, node, x, mode, False, factors)
    lower.__doc__ = (f"{schema_of(target)}\n\nPyTorch's '{mode}' over {n} spatial axes as one GATHER of the source pixels per axis "
                     "(computed in float32 as PyTorch computes them).")
    return lower


for _target, _exact, _n, _vec_form in [
        (aten.upsample_nearest1d.default, False, 1, False), (aten.upsample_nearest1d.vec, False, 1, True),
        (aten.upsample_nearest3d.default, False, 3, False), (aten.upsample_nearest3d.vec, False, 3, True),
        (aten._upsample_nearest_exact1d.default, True, 1, False), (aten._upsample_nearest_exact1d.vec, True, 1, True),
        (aten._upsample_nearest_exact2d.default, True, 2, False),
        (aten._upsample_nearest_exact3d.default, True, 3, False), (aten._upsample_nearest_exact3d.vec, True, 3, True)]:
    lowers(_target)(_nearest(_target, _exact, _n, _vec_form))


# ---- grid sampling ------------------------------------------------------------------------------------------
_GRID_MODES = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}


@lowers(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def lower_grid_sampler(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners) -> ir.Tensor:
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor

    F.grid_sample of an [N, C, H, W] or [N, C, D, H, W] input: bilinear / trilinear, nearest (halves to
    even, as PyTorch) or bicubic taps read with GATHER_ND, in every padding mode (lower/common/grid_sample.py).

    Limits: static sizes."""
    _, dtype = out_meta(node)
    mode = _GRID_MODES.get(int(interpolation_mode))
    padding = _GRID_PADDINGS.get(int(padding_mode))
    if mode is None or padding is None:
        raise ctx.fail(f"grid_sample interpolation_mode={interpolation_mode}, padding_mode={padding_mode} is not "
                       "one PyTorch defines")
    return ctx.cast(grid_sample.grid_sample(ctx, x, grid, mode, padding, bool(align_corners), onnx=False), dtype)

