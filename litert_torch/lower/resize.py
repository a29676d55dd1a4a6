"""Resizing (interpolate / upsample) as TFLite's NHWC resize builtins."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch.errors import LoweringError
from litert_torch.lower import interpolate as ip
from litert_torch.lower.conv import TO_NCHW, TO_NHWC
from litert_torch.lower.registry import LoweringContext, lowers, out_meta
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


def resize(ctx: LoweringContext, node, x, opcode: str, align_corners: bool, half_pixel: bool, scales):
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
def lower_upsample_bilinear_vec(ctx, node, x, output_size, align_corners, scale_factors):
    """RESIZE_BILINEAR; align_corners=False is TFLite's half_pixel_centers.

    Limits: scale factors must map the input size onto the output size exactly."""
    return resize(ctx, node, x, "RESIZE_BILINEAR", align_corners, not align_corners, scale_factors)


@lowers(aten.upsample_bilinear2d.default)
def lower_upsample_bilinear(ctx, node, x, output_size, align_corners, scales_h=None, scales_w=None):
    """RESIZE_BILINEAR; align_corners=False is TFLite's half_pixel_centers."""
    return resize(ctx, node, x, "RESIZE_BILINEAR", align_corners, not align_corners, [scales_h, scales_w])


@lowers(aten.upsample_nearest2d.vec)
def lower_upsample_nearest_vec(ctx, node, x, output_size, scale_factors):
    """RESIZE_NEAREST_NEIGHBOR with floor(dst * in / out) source pixels, as PyTorch's 'nearest'.

    Limits: scale factors must map the input size onto the output size exactly."""
    return resize(ctx, node, x, "RESIZE_NEAREST_NEIGHBOR", False, False, scale_factors)


@lowers(aten.upsample_nearest2d.default)
def lower_upsample_nearest(ctx, node, x, output_size, scales_h=None, scales_w=None):
    """RESIZE_NEAREST_NEIGHBOR with floor(dst * in / out) source pixels, as PyTorch's 'nearest'."""
    return resize(ctx, node, x, "RESIZE_NEAREST_NEIGHBOR", False, False, [scales_h, scales_w])


@lowers(aten._upsample_nearest_exact2d.vec)
def lower_upsample_nearest_exact_vec(ctx, node, x, output_size, scale_factors):
    """RESIZE_NEAREST_NEIGHBOR with half-pixel centres, as PyTorch's 'nearest-exact'."""
    return resize(ctx, node, x, "RESIZE_NEAREST_NEIGHBOR", False, True, scale_factors)


# ---- interpolation of any rank and mode, one axis at a time ------------------------------------------------------
def _torch_nearest_table(in_size: int, out_size: int, scale, exact: bool) -> ip.AxisTable:
    """PyTorch's nearest source pixels, computed in float32 as its kernels do: floor(dst * s), or
    floor((dst + 0.5) * s) for nearest-exact, with s = 1 / scale_factor or in / out."""
    s = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    dst = np.arange(out_size, dtype=np.float32) + (np.float32(0.5) if exact else np.float32(0))
    index = np.minimum(np.floor(dst * s).astype(np.int64), in_size - 1)
    return ip.AxisTable(index, None, None)


def separable(ctx: LoweringContext, node, x, mode: str, align_corners: bool, scales):
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
def lower_upsample_bicubic(ctx, node, x, output_size, align_corners, scales_h=None, scales_w=None):
    """Bicubic (A = -0.75) as four clamped taps per output pixel along H, then W: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "cubic", align_corners, [scales_h, scales_w])


@lowers(aten.upsample_bicubic2d.vec)
def lower_upsample_bicubic_vec(ctx, node, x, output_size, align_corners, scale_factors):
    """Bicubic (A = -0.75) as four clamped taps per output pixel along H, then W: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "cubic", align_corners, _vec(scale_factors, 2))


@lowers(aten.upsample_linear1d.default)
def lower_upsample_linear1d(ctx, node, x, output_size, align_corners, scales=None):
    """Linear interpolation of [N, C, L] as two taps per output position: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "linear", align_corners, [scales])


@lowers(aten.upsample_linear1d.vec)
def lower_upsample_linear1d_vec(ctx, node, x, output_size, align_corners, scale_factors):
    """Linear interpolation of [N, C, L] as two taps per output position: GATHER, MUL, SUM."""
    return separable(ctx, node, x, "linear", align_corners, _vec(scale_factors, 1))


@lowers(aten.upsample_trilinear3d.default)
def lower_upsample_trilinear(ctx, node, x, output_size, align_corners, scales_d=None, scales_h=None,
                             scales_w=None):
    """Trilinear interpolation as two taps per output position along D, H and W in turn."""
    return separable(ctx, node, x, "linear", align_corners, [scales_d, scales_h, scales_w])


@lowers(aten.upsample_trilinear3d.vec)
def lower_upsample_trilinear_vec(ctx, node, x, output_size, align_corners, scale_factors):
    """Trilinear interpolation as two taps per output position along D, H and W in turn."""
    return separable(ctx, node, x, "linear", align_corners, _vec(scale_factors, 3))


def _nearest(exact: bool, n: int, vec: bool):
    mode = "nearest-exact" if exact else "nearest"

    def lower(ctx, node, x, output_size, *scales):
        factors = _vec(scales[0], n) if vec else list(scales) + [None] * (n - len(scales))
        return separable(ctx, node, x, mode, False, factors)
    lower.__doc__ = (f"PyTorch's '{mode}' over {n} spatial axes as one GATHER of the source pixels per axis "
                     "(computed in float32 as PyTorch computes them).")
    return lower


for _target, _exact, _n, _vec_form in [
        (aten.upsample_nearest1d.default, False, 1, False), (aten.upsample_nearest1d.vec, False, 1, True),
        (aten.upsample_nearest3d.default, False, 3, False), (aten.upsample_nearest3d.vec, False, 3, True),
        (aten._upsample_nearest_exact1d.default, True, 1, False), (aten._upsample_nearest_exact1d.vec, True, 1, True),
        (aten._upsample_nearest_exact2d.default, True, 2, False),
        (aten._upsample_nearest_exact3d.default, True, 3, False), (aten._upsample_nearest_exact3d.vec, True, 3, True)]:
    lowers(_target)(_nearest(_exact, _n, _vec_form))


# ---- grid sampling ------------------------------------------------------------------------------------------
_BILINEAR, _NEAREST = 0, 1
_ZEROS, _BORDER = 0, 1


@lowers(aten.grid_sampler_2d.default)
def lower_grid_sampler_2d(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners):
    """F.grid_sample of an [N, C, H, W] input at an [N, Ho, Wo, 2] grid of (x, y) in [-1, 1]: pixel coordinates
    as PyTorch unnormalises them, then GATHER_ND of the NHWC input at each corner (bilinear: four, weighted;
    nearest: the ROUND-ed one, halves to even as PyTorch), corners outside the input weighted 0 (zeros padding)
    or coordinates clamped to it (border).

    Limits: bilinear and nearest only; zeros and border padding only; static sizes."""
    out_shape, dtype = out_meta(node)
    if interpolation_mode not in (_BILINEAR, _NEAREST):
        raise ctx.fail("grid_sample with bicubic interpolation has no lowering")
    if padding_mode not in (_ZEROS, _BORDER):
        raise ctx.fail("grid_sample with reflection padding has no lowering")
    if x.rank != 4 or not all_static([*x.shape, *grid.shape]):
        raise ctx.fail("grid_sample of a 4-D input with static sizes only")
    n, c, h, w = (int(d) for d in x.shape)
    ho, wo = int(grid.shape[1]), int(grid.shape[2])
    grid = ctx.cast(grid, x.dtype)
    coords = []
    for axis, size in ((0, w), (1, h)):
        g = ctx.reshape(ctx.slice(grid, [0, 0, 0, axis], [n, ho, wo, 1]), (n, ho, wo))
        if align_corners:
            pixel = _affine(ctx, g, (size - 1) / 2.0, (size - 1) / 2.0)
        else:
            pixel = _affine(ctx, g, size / 2.0, (size - 1) / 2.0)
        if padding_mode == _BORDER:
            pixel = _clamp(ctx, pixel, 0.0, float(size - 1))
        coords.append(pixel)
    xh = ctx.transpose(x, TO_NHWC)
    batch = ctx.const(np.broadcast_to(np.arange(n, dtype=np.int32)[:, None, None], (n, ho, wo)).copy(), name="batch")
    if interpolation_mode == _NEAREST:
        ix, iy = (ctx.emit("ROUND", [p], like=p) for p in coords)
        y = _corner(ctx, xh, batch, iy, ix, h, w, None)
    else:
        ix, iy = coords
        x0, y0 = (ctx.emit("FLOOR", [p], like=p) for p in (ix, iy))
        fx, fy = (ctx.emit("SUB", [p, f], like=p) for p, f in ((ix, x0), (iy, y0)))
        one = ctx.scalar_like(1.0, fx)
        x1, y1 = (ctx.emit("ADD", [f, one], like=f) for f in (x0, y0))
        gx, gy = (ctx.emit("SUB", [one, f], like=f) for f in (fx, fy))
        y = None
        for yy, wy in ((y0, gy), (y1, fy)):
            for xx, wx in ((x0, gx), (x1, fx)):
                term = _corner(ctx, xh, batch, yy, xx, h, w, ctx.emit("MUL", [wy, wx], like=wy))
                y = term if y is None else ctx.emit("ADD", [y, term], like=term)
    return ctx.cast(ctx.transpose(y, TO_NCHW), dtype)


def _affine(ctx: LoweringContext, t, scale: float, shift: float):
    return ctx.emit("ADD", [ctx.emit("MUL", [t, ctx.scalar_like(scale, t)], like=t), ctx.scalar_like(shift, t)],
                    like=t)


def _clamp(ctx: LoweringContext, t, lo: float, hi: float):
    return ctx.emit("MINIMUM", [ctx.emit("MAXIMUM", [t, ctx.scalar_like(lo, t)], like=t), ctx.scalar_like(hi, t)],
                    like=t)


def _corner(ctx: LoweringContext, xh, batch, iy, ix, h: int, w: int, weight):
    """The NHWC input's [N, Ho, Wo, C] values at integer-valued float coordinates (iy, ix), times `weight`
    (None: 1) where they lie inside the input and 0 outside."""
    inside = None
    for p, size in ((iy, h), (ix, w)):
        lo = ctx.emit("GREATER_EQUAL", [p, ctx.scalar_like(0.0, p)], p.shape, np.bool_)
        hi = ctx.emit("LESS_EQUAL", [p, ctx.scalar_like(float(size - 1), p)], p.shape, np.bool_)
        both = ctx.emit("LOGICAL_AND", [lo, hi], p.shape, np.bool_)
        inside = both if inside is None else ctx.emit("LOGICAL_AND", [inside, both], p.shape, np.bool_)
    mask = ctx.cast(inside, iy.dtype)
    weight = mask if weight is None else ctx.emit("MUL", [weight, mask], like=weight)
    parts = [batch, *(ctx.cast(_clamp(ctx, p, 0.0, float(size - 1)), np.int32) for p, size in ((iy, h), (ix, w)))]
    n, ho, wo = batch.shape
    index = ctx.emit("CONCATENATION", [ctx.reshape(p, (n, ho, wo, 1)) for p in parts], (n, ho, wo, 3), np.int32,
                     axis=3)
    values = ctx.emit("GATHER_ND", [xh, index], (n, ho, wo, xh.shape[3]), xh.dtype)
    return ctx.emit("MUL", [values, ctx.reshape(weight, (n, ho, wo, 1))], (n, ho, wo, xh.shape[3]), xh.dtype)
