"""Shape and data-movement lowerings: reshapes, permutes, concatenation, splitting, slicing, padding."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch.lower.registry import LoweringContext, lowers, normalize_dim, out_meta

aten = torch.ops.aten


@lowers(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dims, aten.squeeze.dim,
    aten.squeeze.default, aten.unsqueeze.default, aten.flatten.using_ints,
)
def lower_reshape(ctx: LoweringContext, node, x, *args):
    """view/reshape/squeeze/unsqueeze/flatten: one RESHAPE to the shape PyTorch computed."""
    shape, _ = out_meta(node)
    return ctx.reshape(x, shape)


@lowers(aten.clone.default, aten.alias.default, aten.contiguous.default, aten.detach.default, aten.lift_fresh_copy.default)
def lower_identity(ctx, node, x, **kwargs):
    """Memory-format and aliasing ops are nothing in TFLite: the value passes through."""
    return x


@lowers(aten.permute.default)
def lower_permute(ctx, node, x, dims):
    return ctx.transpose(x, [normalize_dim(d, x.rank) for d in dims])


@lowers(aten.transpose.int)
def lower_transpose(ctx, node, x, dim0, dim1):
    perm = list(range(x.rank))
    a, b = normalize_dim(dim0, x.rank), normalize_dim(dim1, x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.transpose(x, perm)


@lowers(aten.t.default)
def lower_t(ctx, node, x):
    return ctx.transpose(x, list(reversed(range(x.rank))))


@lowers(aten.cat.default)
def lower_cat(ctx, node, tensors, dim=0):
    """CONCATENATION along `dim`; PyTorch skips 1-D empty tensors, and so do we."""
    shape, dtype = out_meta(node)
    parts = [ctx.cast(t, dtype) for t in tensors if not (t.rank == 1 and t.shape[0] == 0)]
    axis = normalize_dim(dim, len(shape))
    if len(parts) == 1:
        return parts[0]
    return ctx.emit("CONCATENATION", parts, shape, dtype, axis=axis)


@lowers(aten.split_with_sizes.default, aten.split.Tensor)
def lower_split(ctx, node, x, split, dim=0):
    """SPLIT for equal parts, SPLIT_V for given sizes."""
    axis = normalize_dim(dim, x.rank)
    if isinstance(split, int):
        sizes = [split] * (x.shape[axis] // split)
        if x.shape[axis] % split:
            sizes.append(x.shape[axis] % split)
    else:
        sizes = [int(s) for s in split]
    shapes = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        shapes.append((shape, x.dtype))
    if len(sizes) == 1:
        return [x]
    axis_t = ctx.const(np.array(axis, np.int32), name="axis")
    if len(set(sizes)) == 1:
        return ctx.emit_multi("SPLIT", [axis_t, x], shapes, num_splits=len(sizes))
    sizes_t = ctx.const(np.array(sizes, np.int32), name="sizes")
    return ctx.emit_multi("SPLIT_V", [x, sizes_t, axis_t], shapes, num_splits=len(sizes))


@lowers(aten.slice.Tensor)
def lower_slice(ctx, node, x, dim=0, start=None, end=None, step=1):
    """SLICE for unit steps, STRIDED_SLICE otherwise; bounds are clamped the way PyTorch clamps them."""
    shape, _ = out_meta(node)
    axis = normalize_dim(dim, x.rank)
    size = x.shape[axis]
    begin, stop, _ = slice(start, end, step).indices(size)
    if shape == x.shape:
        return x
    begins = [0] * x.rank
    begins[axis] = begin
    if step == 1:
        return ctx.emit(
            "SLICE", [x, ctx.const(np.array(begins, np.int32), name="begin"),
                      ctx.const(np.array(shape, np.int32), name="size")], shape, x.dtype)
    ends = list(x.shape)
    ends[axis] = max(stop, begin)
    strides = [1] * x.rank
    strides[axis] = int(step)
    return ctx.emit(
        "STRIDED_SLICE",
        [x, ctx.const(np.array(begins, np.int32), name="begin"), ctx.const(np.array(ends, np.int32), name="end"),
         ctx.const(np.array(strides, np.int32), name="strides")],
        shape, x.dtype, begin_mask=0, end_mask=0, shrink_axis_mask=0, ellipsis_mask=0, new_axis_mask=0, offset=False)


def pad_pairs(rank: int, pad: list[int]) -> list[list[int]]:
    """PyTorch's pad list (last dim first, (before, after) pairs) as TFLite's [rank, 2] paddings."""
    pairs = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):
        pairs[rank - 1 - i] = [int(pad[2 * i]), int(pad[2 * i + 1])]
    return pairs


@lowers(aten.constant_pad_nd.default)
def lower_constant_pad(ctx, node, x, pad, value=0):
    """PAD with zeros, PADV2 with another value; negative pads (cropping) become a SLICE afterwards."""
    pairs = pad_pairs(x.rank, pad)
    grow = [[max(a, 0), max(b, 0)] for a, b in pairs]
    y = x
    if any(a or b for a, b in grow):
        shape = [d + a + b for d, (a, b) in zip(x.shape, grow)]
        paddings = ctx.const(np.array(grow, np.int32), name="paddings")
        if value == 0:
            y = ctx.emit("PAD", [x, paddings], shape, x.dtype)
        else:
            y = ctx.emit("PADV2", [x, paddings, ctx.scalar_like(value, x)], shape, x.dtype)
    if any(a < 0 or b < 0 for a, b in pairs):
        begins = [-min(a, 0) for a, _ in pairs]
        out_shape, _ = out_meta(node)
        y = ctx.emit("SLICE", [y, ctx.const(np.array(begins, np.int32), name="begin"),
                               ctx.const(np.array(out_shape, np.int32), name="size")], out_shape, x.dtype)
    return y
