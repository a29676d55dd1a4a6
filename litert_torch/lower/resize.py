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
