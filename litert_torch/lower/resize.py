"""Resizing (interpolate / upsample) as TFLite's NHWC resize builtins."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch.lower.conv import TO_NCHW, TO_NHWC
from litert_torch.lower.registry import LoweringContext, lowers, out_meta
from litert_torch.symbolic import all_static, is_static, same_size

aten = torch.ops.aten


def _check_scales(ctx: LoweringContext, in_hw, out_hw, scales) -> None:
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
    _check_scales(ctx, x.shape[2:], shape[2:], scales)
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
