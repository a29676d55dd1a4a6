"""ONNX Resize (and Upsample), and GridSample (lower/common/grid_sample.py). Resize: TFLite's RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR where they compute exactly
what the node asks, else the separable gather-and-weigh resize of `interpolate` over every resized axis.

The general form covers every mode (nearest with each rounding rule, linear, cubic with any coefficient),
every coordinate transform (half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric,
tf_crop_and_resize with its region and extrapolation value), antialiasing, exclude_outside, `axes` and the
keep-aspect-ratio policies, on inputs of any rank. Scales, sizes and the region may be constants (the tables
are computed at conversion) or values computed when the model runs (the tables are computed in the model, and
the output sizes are decided by the values).
"""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import LoweringError
from litert_torch.lower.common import grid_sample
from litert_torch.lower.common import interpolate as ip
from litert_torch.lower.onnx.dynamic import _length, _shape, runtime_shaped
from litert_torch.lower.onnx.registry import aten_fn, const_list, onnx_op, operand
from litert_torch.lower.aten.resize import check_scales
from litert_torch.symbolic import DynamicSizeError, Sym

aten = torch.ops.aten


def _text(value, default: str) -> str:
    return default if value is None else value


def _kernel(ctx, node, attrs) -> ip.Kernel:
    mode = _text(attrs.get("mode"), "nearest")
    # Upsample and Resize-10 map coordinates asymmetrically (and round nearest down)
    legacy = node.op == "onnx::Upsample"
    coord = _text(attrs.get("coordinate_transformation_mode"), "asymmetric" if legacy else "half_pixel")
    nearest = _text(attrs.get("nearest_mode"), "floor" if legacy else "round_prefer_floor")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.fail(f"Resize mode {mode!r} is not one ONNX defines")
    if coord not in ip.COORDINATE_MODES:
        raise ctx.fail(f"Resize coordinate_transformation_mode {coord!r} is not one ONNX defines")
    if mode == "nearest" and nearest not in ip.NEAREST_MODES:
        raise ctx.fail(f"Resize nearest_mode {nearest!r} is not one ONNX defines")
    antialias = bool(attrs.get("antialias", 0))
    exclude = bool(attrs.get("exclude_outside", 0))
    if mode == "nearest" and (antialias or exclude):
        raise ctx.fail("nearest Resize with antialias or exclude_outside has no lowering (ONNX defines them for "
                       "linear and cubic interpolation)")
    return ip.Kernel(mode, coord, nearest, float(attrs.get("cubic_coeff_a", -0.75)), antialias, exclude)


def _given(value):
    """A parameter input that is given: a numpy array, a run-time tensor, or None for an absent or empty one."""
    if value is None:
        return None
    if isinstance(value, ir.Tensor) and value.is_constant:
        value = value.data
    if isinstance(value, np.ndarray):
        return value if value.size else None
    shape = tuple(value.shape)
    if all(isinstance(d, int) for d in shape) and int(np.prod(shape, dtype=np.int64)) == 0:
        return None
    return value


def _parameters(node, inputs):
    """(roi, scales, sizes) of a Resize or Upsample node's inputs."""
    if node.op == "onnx::Upsample" or len(inputs) == 2:  # Upsample and Resize-10: (X, scales)
        return None, _given(inputs[1]), None
    pick = [_given(inputs[k]) if k < len(inputs) else None for k in (1, 2, 3)]
    return pick[0], pick[1], pick[2]


def _axes(attrs, rank: int) -> list[int]:
    axes = attrs.get("axes")
    if axes is None:
        return list(range(rank))
    axes = [int(a) % rank for a in axes]
    if len(set(axes)) != len(axes):
        raise LoweringError(f"Resize axes {list(attrs['axes'])} repeat an axis")
    return axes


# ---- output sizes ----------------------------------------------------------------------------------------------
def _static_plan(x_shape, axes, scales, sizes, policy):
    """The (scale, output size) of each resized axis from constant scales or sizes, as ONNX computes them."""
    if sizes is not None:
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes):
            raise LoweringError(f"Resize sizes has {len(sizes)} values for {len(axes)} axes")
        ratios = [out / x_shape[a] if x_shape[a] else 0.0 for out, a in zip(sizes, axes)]
        if policy == "stretch":
            return list(zip(ratios, sizes))
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        return [(scale, int(scale * x_shape[a] + 0.5)) for a in axes]
    values = [float(v) for v in np.asarray(scales, np.float32).reshape(-1)]
    if len(values) != len(axes):
        raise LoweringError(f"Resize scales has {len(values)} values for {len(axes)} axes")
    if any(v <= 0 for v in values):
        raise LoweringError(f"Resize scales {values} must be positive")
    return [(v, int(v * x_shape[a])) for v, a in zip(values, axes)]


def _resize_shapes(inputs, attrs, n, runtime, fresh):
    """The output shape: the sizes constant scales or sizes give, fresh sizes where run-time values decide."""
    x = _shape(inputs[0])
    axes = _axes(attrs, len(x))
    described = [inputs[k] if k < len(inputs) else None for k in (1, 2, 3)]
    if len(inputs) == 2:
        described = [None, inputs[1], None]
    present = []
    for k, d in zip((1, 2, 3), described):
        if d is None:
            present.append(None)
        elif isinstance(d, np.ndarray):
            present.append(d if d.size else None)
        else:
            present.append(d if _length(d, f"Resize input {k}") else None)
    _, scales, sizes = present
    if scales is None and sizes is None:
        raise DynamicSizeError("Resize needs scales or sizes")
    out = list(x)
    given = sizes if sizes is not None else scales
    policy = _text(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if isinstance(given, np.ndarray) and all(isinstance(x[a], int) for a in axes):
        plan = _static_plan(x, axes, scales if sizes is None else None, sizes, policy)
        for a, (_, size) in zip(axes, plan):
            out[a] = size
    else:
        for a in axes:
            out[a] = fresh("resized size", 0, None)
    return [tuple(out)]


# ---- lowering ---------------------------------------------------------------------------------------------------
def _element(ctx, t: ir.Tensor, j: int, dtype) -> ip.Traced:
    """Element `j` of a run-time 1-D parameter as a [1] tensor in `dtype` (the scalars of the tables' formulas
    are [1] tensors: XNNPACK computes rank-0 chains wrongly)."""
    flat = ctx.reshape(t, (int(np.prod([int(d) for d in t.shape])),))
    return ip.Traced(ctx, ctx.cast(ctx.slice(flat, [j], [1]), dtype))


def _traced_plan(ctx, x, axes, out_dims, scales, sizes, policy):
    """The (scale, output size) of each resized axis as scalars computed in the model where they must be."""
    in_sizes = [d if isinstance(d, int) else ip.Traced(ctx, ctx.size_tensor(d))
                for d in (x.shape[a] for a in axes)]
    fin = [ip.as_float(d) for d in in_sizes]
    if sizes is not None:
        wanted = [_element(ctx, sizes, j, np.int32) if isinstance(sizes, ir.Tensor) else int(sizes.reshape(-1)[j])
                  for j in range(len(axes))]
        ratios = [ip.as_float(w) / f for w, f in zip(wanted, fin)]
        if policy == "stretch":
            plan = list(zip(ratios, wanted))
        else:
            pick = ip.minimum if policy == "not_larger" else ip.maximum
            scale = ratios[0]
            for r in ratios[1:]:
                scale = pick(scale, r)
            plan = [(scale, ip.as_count(scale * f + 0.5)) for f in fin]
    else:
        factors = [_element(ctx, scales, j, np.float32) if isinstance(scales, ir.Tensor)
                   else float(np.asarray(scales, np.float32).reshape(-1)[j]) for j in range(len(axes))]
        # a NaN scale leaves nothing (and no NaN reaches the tables' formulas)
        factors = [ip.where(ip.equal(s, s), s, 0.0) if isinstance(s, ip.Traced) else s for s in factors]
        plan = [(s, ip.as_count(s * f)) for s, f in zip(factors, fin)]
    # a size the IR knows statically is used as such
    return in_sizes, [(s, d if isinstance(d, int) else n) for (s, n), d in zip(plan, out_dims)]


def _roi_pairs(ctx, roi, axes):
    """The (start, end) region of each resized axis for tf_crop_and_resize: numbers, or scalars in the model."""
    if roi is None:
        return [(0.0, 1.0)] * len(axes)
    count = int(np.prod([int(d) for d in roi.shape])) if isinstance(roi, ir.Tensor) else roi.size
    if count != 2 * len(axes):
        raise LoweringError(f"Resize roi has {count} values; it needs {2 * len(axes)} (starts, then ends)")
    picks = [(j, j + len(axes)) for j in range(len(axes))]
    if isinstance(roi, ir.Tensor):
        return [(_element(ctx, roi, s, np.float32), _element(ctx, roi, e, np.float32)) for s, e in picks]
    # float32 numbers: the reference implementation computes with the region in float32 where it meets sizes
    values = np.asarray(roi, np.float32).reshape(-1)
    return [(values[s], values[e]) for s, e in picks]


def _tflite_kernel(ctx, node, x, kernel: ip.Kernel, attrs, scales, sizes):
    """RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR through the ATen lowerings, when they compute exactly this
    node: a 4-D input resized over its two spatial axes with PyTorch's nearest or bilinear conventions.
    None where they do not."""
    shape = tuple(node.outputs[0].shape)
    if (kernel.antialias or attrs.get("axes") is not None or x.rank != 4 or tuple(shape[:2]) != tuple(x.shape[:2])
            or _text(attrs.get("keep_aspect_ratio_policy"), "stretch") != "stretch"
            or any(isinstance(d, Sym) for d in shape[2:])):
        return None
    coord = kernel.coordinate
    factors = [float(f) for f in np.asarray(scales, np.float64).reshape(-1)] if scales is not None else []
    if factors and len(factors) != 4:
        return None
    given = [float(f) for f in factors[2:]] if factors and coord != "align_corners" else [None, None]
    if factors and coord == "align_corners":
        # ONNX spans the corners over in * scale (unrounded) output pixels, TFLite over the output size
        for size, out, f in zip(x.shape[2:], shape[2:], factors[2:]):
            if isinstance(size, Sym) or size * f != out:
                return None
    if kernel.mode == "nearest" and coord == "asymmetric" and kernel.nearest == "floor":
        call = (aten.upsample_nearest2d.default, x, list(shape[2:]), *given)
    elif kernel.mode == "linear" and coord == "align_corners":
        call = (aten.upsample_bilinear2d.default, x, list(shape[2:]), True, *given)
    elif kernel.mode == "linear" and coord in ("half_pixel", "pytorch_half_pixel") and all(d > 1 for d in shape[2:]):
        call = (aten.upsample_bilinear2d.default, x, list(shape[2:]), False, *given)
    else:
        return None
    try:
        check_scales(ctx, x.shape[2:], shape[2:], given)
    except LoweringError:  # scale factors that are not TFLite's in/out ratio: the general form
        return None
    return aten_fn(call[0])(ctx, node, *call[1:])


def resize(ctx, node, inputs, attrs) -> ir.Tensor:
    """Resize (opsets 13-28); Upsample (opset 9, deprecated since opset 10).

    Resize with constant or run-time scales, sizes and region: the TFLite resize kernels where exact, else
    a gather of each output position's taps and their weighted sum along every resized axis."""
    x = inputs[0]
    kernel = _kernel(ctx, node, attrs)
    roi, scales, sizes = _parameters(node, inputs)
    if scales is None and sizes is None:
        raise ctx.fail("Resize needs scales or sizes")
    constant = all(p is None or isinstance(p, np.ndarray) for p in (roi, scales, sizes))
    if constant and kernel.coordinate != "tf_crop_and_resize":
        fast = _tflite_kernel(ctx, node, x, kernel, attrs, scales if sizes is None else None, sizes)
        if fast is not None:
            return fast
    if x.dtype == np.bool_:
        raise ctx.fail("Resize of bool values has no lowering")
    rank = x.rank
    axes = _axes(attrs, rank)
    policy = _text(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ctx.fail(f"Resize keep_aspect_ratio_policy {policy!r} is not one ONNX defines")
    out_shape = tuple(node.outputs[0].shape)
    out_dims = [out_shape[a] for a in axes]
    use_roi = kernel.coordinate == "tf_crop_and_resize"
    if use_roi and roi is None:
        raise ctx.fail("tf_crop_and_resize Resize needs a region (roi)")
    static = constant and all(isinstance(x.shape[a], int) for a in axes)
    if static:
        in_sizes = [x.shape[a] for a in axes]
        plan = _static_plan(x.shape, axes, scales if sizes is None else None, sizes, policy)
        if [n for _, n in plan] != out_dims:
            raise ctx.fail(f"Resize output sizes {[n for _, n in plan]} differ from the declared {out_dims}")
    else:
        in_sizes, plan = _traced_plan(ctx, x, axes, out_dims, scales if sizes is None else None, sizes, policy)
    regions = _roi_pairs(ctx, roi if use_roi else None, axes)
    extrapolation = float(attrs.get("extrapolation_value", 0.0))
    dtype = x.dtype
    y = x if kernel.mode == "nearest" else ip.to_float(ctx, x)
    for a, in_size, (scale, out_size), region in zip(axes, in_sizes, plan, regions):
        dim = out_shape[a]
        if (isinstance(scale, float) and scale == 1.0 and isinstance(out_size, int) and out_size == in_size
                and (not use_roi or (float(region[0]), float(region[1])) == (0.0, 1.0))):
            continue  # this axis is left as it is
        table = ip.axis_table(ctx, kernel, in_size, out_size, dim, scale, region if use_roi else None,
                              what=f"{node.name}.axis{a}")
        y = ip.resample_axis(ctx, y, a, table, dim, extrapolation)
    if y is x:
        return x
    return y if kernel.mode == "nearest" else ip.from_float(ctx, y, dtype)


onnx_op("Resize", parameters=[1, 2, 3])(resize)
onnx_op("Upsample", parameters=[1])(resize)
runtime_shaped("Resize", inputs={1, 2, 3}, shapes=_resize_shapes)(resize)


@onnx_op("GridSample")
def grid_sample_op(ctx, node, inputs, attrs) -> ir.Tensor:
    """GridSample (opsets 16-28).

    `grid_sample.grid_sample` with ONNX's padding rules: nearest (halves to even), linear or cubic (opset 16's
    bilinear / bicubic), zeros, border or reflection padding, any spatial rank."""
    mode = _text(attrs.get("mode"), "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return grid_sample.grid_sample(ctx, inputs[0], inputs[1], mode, _text(attrs.get("padding_mode"), "zeros"),
                                   bool(attrs.get("align_corners", 0)), onnx=True)


def _unit_coordinates(n: int, align_corners: bool) -> np.ndarray:
    """The normalised coordinates of n samples along an axis, as AffineGrid places them: the corners' centres
    at -1 and 1 with align_corners, else the pixels' centres."""
    steps = np.arange(n, dtype=np.float64)
    return 2 * steps / (n - 1) - 1 if align_corners else (2 * steps + 1) / n - 1


@onnx_op("AffineGrid")
def affine_grid(ctx, node, inputs, attrs) -> ir.Tensor:
    """AffineGrid (opsets 20-28).

    The sampling grid of an affine transform, as torch's affine_grid: the constant base grid of normalised
    output coordinates (x, y[, z], 1), times each batch's theta^T (BATCH_MATMUL), in [N, (D,) H, W, 2 or 3].

    Limits: a size computed at run time; align_corners=1 over an axis of size 1."""
    theta = operand(ctx, inputs[0])
    size = [int(v) for v in const_list(inputs[1], "AffineGrid size", ctx)]
    align = bool(attrs.get("align_corners", 0))
    spatial = size[2:]
    if len(spatial) not in (2, 3) or theta.rank != 3 or theta.shape[1] != len(spatial) \
            or theta.shape[2] != len(spatial) + 1:
        raise ctx.fail(f"AffineGrid with theta of shape {list(theta.shape)} for size {size} has no lowering")
    if align and 1 in spatial:
        # one sample between corners -1 and 1: ONNX's reference puts it at -1, ONNX Runtime at 1, PyTorch at 0
        raise ctx.fail(f"AffineGrid with align_corners=1 over an axis of size 1 (size {size}) has no agreed "
                       "meaning: implementations place that sample at -1, 0 or 1")
    axes = [_unit_coordinates(n, align) for n in reversed(spatial)]  # x (width) first
    mesh = np.meshgrid(*reversed(axes), indexing="ij")  # over (D,) H, W
    base = np.stack([*reversed(mesh), np.ones_like(mesh[0])], axis=-1).reshape(1, -1, len(spatial) + 1)
    points = int(np.prod(spatial))
    n = theta.shape[0]
    dtype = theta.dtype
    base_t = ctx.const(base.astype(np.dtype(dtype)), name="base_grid")
    if n != 1:
        base_t = ctx.emit("BROADCAST_TO", [base_t, ctx.dims_tensor([n, points, len(spatial) + 1])],
                          [n, points, len(spatial) + 1], dtype)
    grid = ctx.emit("BATCH_MATMUL", [base_t, theta], [n, points, len(spatial)], dtype, adj_x=False, adj_y=True,
                    asymmetric_quantize_inputs=False)
    return ctx.reshape(grid, [n, *spatial, len(spatial)])
