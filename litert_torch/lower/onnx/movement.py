"""ONNX lowerings of shapes and data movement: reshapes, transposes, concatenation and splits, slices, gathers,
expansion, tiling, padding, depth-to-space, and OneHot and EyeLike, which build tensors from sizes. Each is registered once, with
what the driver needs to know of it (`registry.OnnxOp`)."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.aten import scatter
from litert_torch.lower.onnx.registry import aten_fn, const_list, onnx_op, operand, out_shape, scalar, tensor
from litert_torch.lower.common.registry import numpy_dtype
from litert_torch.symbolic import Sym, all_static, smax, smin

aten = torch.ops.aten


@onnx_op("Reshape", "Squeeze", "Unsqueeze", parameters=[1], uint16_in_range=True, uint32="bits")
@onnx_op("Flatten", uint16_in_range=True, uint32="bits")
def reshape(ctx, node, inputs, attrs) -> ir.Tensor:
    """Reshape, Squeeze, Unsqueeze, Flatten (opsets 13-28).

    as aten.view: one RESHAPE to the inferred shape."""
    return aten_fn(aten.view.default)(ctx, node, inputs[0])


@onnx_op("Transpose", uint16_in_range=True, uint32="bits")
def transpose(ctx, node, inputs, attrs) -> ir.Tensor:
    """Transpose (opsets 13-28).

    as aten.permute (the default permutation reverses the axes)."""
    x = inputs[0]
    perm = list(attrs.get("perm", reversed(range(x.rank))))
    return aten_fn(aten.permute.default)(ctx, node, x, perm)


@onnx_op("Concat", uint16_in_range=True, uint32="bits")
def concat(ctx, node, inputs, attrs) -> ir.Tensor:
    """Concat (opsets 13-28).

    as aten.cat."""
    return aten_fn(aten.cat.default)(ctx, node, [tensor(ctx, t) for t in inputs], attrs["axis"])


@onnx_op("Split", parameters=[1], uint16_in_range=True, uint32="bits")
def split(ctx, node, inputs, attrs) -> list[ir.Tensor]:
    """Split (opsets 13-28).

    as aten.split_with_sizes (sizes from the input, the attribute or equal parts)."""
    x = inputs[0]
    axis = attrs.get("axis", 0) % x.rank
    sizes = [int(s) for s in out_shape_each(node, axis)]
    return aten_fn(aten.split_with_sizes.default)(ctx, node, x, sizes, axis)


def out_shape_each(node, axis: int) -> list[int]:
    return [v.shape[axis] for v in node.outputs]


@onnx_op("Slice", parameters=[1, 2, 3, 4], uint16_in_range=True, uint32="bits")
def slice_op(ctx, node, inputs, attrs) -> ir.Tensor:
    """Slice (opsets 13-28).

    STRIDED_SLICE with constant starts, ends, axes and steps (clamped as ONNX clamps them); over a dynamic
    axis the clamped bounds are computed when the model runs."""
    x = inputs[0]
    starts = const_list(inputs[1], "Slice starts", ctx)
    ends = const_list(inputs[2], "Slice ends", ctx)
    axes = const_list(inputs[3], "Slice axes", ctx) if len(inputs) > 3 and inputs[3] is not None \
        else list(range(len(starts)))
    steps = const_list(inputs[4], "Slice steps", ctx) if len(inputs) > 4 and inputs[4] is not None \
        else [1] * len(starts)
    begin: list[int | Sym]
    if all_static(x.shape) and not any(isinstance(v, Sym) for v in starts + ends):
        begin, end, stride = [0] * x.rank, list(x.shape), [1] * x.rank
        for s, e, a, st in zip(starts, ends, axes, steps):
            a %= x.rank
            s, e, _ = slice(s, e, st).indices(x.shape[a])
            begin[a], end[a], stride[a] = s, e, st
        mask = sum(1 << a for a in range(x.rank) if stride[a] < 0 and end[a] < 0)
        end = [0 if (mask >> a) & 1 else v for a, v in enumerate(end)]
        begin_t = ctx.const(np.array(begin, np.int32), name="begin")
        end_t = ctx.const(np.array(end, np.int32), name="end")
    else:
        begin, end, stride = [0] * x.rank, [0] * x.rank, [1] * x.rank
        mask = (1 << x.rank) - 1  # untouched axes run to their end
        for s, e, a, st in zip(starts, ends, axes, steps):
            a %= x.rank
            size = x.shape[a]
            if st < 0:
                raise ctx.fail("Slice with a negative step over a dynamic size has no lowering yet")
            begin[a], stride[a] = smin(smax(s + size if s < 0 else s, 0), size), st
            if not (isinstance(e, int) and e >= size_limit(size)):
                end[a] = smin(smax(e + size if e < 0 else e, 0), size)
                mask &= ~(1 << a)
        begin_t, end_t = ctx.dims_tensor(begin), ctx.dims_tensor(end)
    return ctx.emit("STRIDED_SLICE", [x, begin_t, end_t, ctx.const(np.array(stride, np.int32), name="strides")],
                    out_shape(node), x.dtype, begin_mask=0, end_mask=mask, shrink_axis_mask=0, ellipsis_mask=0,
                    new_axis_mask=0, offset=False)


def size_limit(size) -> int:
    """An end at or past the largest value `size` takes means "to the end of the axis"."""
    hi = size.space.bounds(size.expr)[1] if isinstance(size, Sym) else size
    return int(min(hi, 2**62))


@onnx_op("Gather", parameters=[1], runtime_parameters=[1], uint16_in_range=True, uint32="bits")
def gather(ctx, node, inputs, attrs) -> ir.Tensor:
    """Gather (opsets 13-28).

    GATHER along `axis` (negative indices wrapped); a constant table with run-time ids is an embedding."""
    x, idx = inputs
    axis = attrs.get("axis", 0)
    if not isinstance(x, ir.Tensor):
        x = ctx.const(x)
    axis %= x.rank
    if isinstance(idx, np.ndarray):
        idx = np.where(idx < 0, idx + x.shape[axis], idx)
        idx_t = ctx.const(idx.astype(np.int32), name="indices")
    else:  # indices known at run time: negative ones wrap, as ONNX defines (TFLite's GATHER refuses them)
        idx_t = ctx.cast(idx, np.int32)
        negative = ctx.emit("LESS", [idx_t, ctx.scalar_like(0, idx_t)], idx_t.shape, np.bool_)
        size = ctx.reshape(ctx.size_tensor(x.shape[axis]), [])
        idx_t = ctx.emit("SELECT_V2", [negative, ctx.emit("ADD", [idx_t, size], like=idx_t), idx_t], like=idx_t)
    shape = out_shape(node)
    return ctx.emit("GATHER", [x, idx_t], shape, x.dtype, axis=axis, batch_dims=0)


@onnx_op("GatherND")
def gather_nd(ctx, node, inputs, attrs) -> ir.Tensor:
    """GatherND (opsets 13-28).

    GATHER_ND of the index tuples (negative entries wrapped), the batch axes' own positions put in front of
    each tuple for batch_dims > 0; an index past its axis fails the invocation.

    Limits: static sizes."""
    x, idx = operand(ctx, inputs[0]), operand(ctx, inputs[1])
    b = int(attrs.get("batch_dims", 0))
    if not all_static([*x.shape, *idx.shape]):
        raise ctx.fail("GatherND over dynamic sizes has no lowering")
    k = int(idx.shape[-1])
    lead = [int(d) for d in idx.shape[:-1]]
    if b + k > x.rank:
        raise ctx.fail(f"GatherND with index tuples of {k} into {x.rank - b} axes")
    columns = []
    for axis in range(b):  # each batch position indexes its own slice
        view = [1] * len(lead)
        view[axis] = lead[axis]
        columns.append(ctx.const(np.broadcast_to(np.arange(lead[axis], dtype=np.int32).reshape(view), lead).copy(),
                                 name="batch"))
    for j in range(k):
        column = ctx.reshape(ctx.slice(idx, [0] * (idx.rank - 1) + [j], lead + [1]), lead)
        columns.append(scatter.wrapped(ctx, column, int(x.shape[b + j])))
    coords = scatter._stack(ctx, columns, lead)
    return ctx.emit("GATHER_ND", [x, coords], out_shape(node), x.dtype)


@onnx_op("OneHot")
def one_hot(ctx, node, inputs, attrs) -> ir.Tensor:
    """OneHot (opsets 13-28).

    EQUAL of the indices (negative ones wrapped by the depth) with the positions 0..depth-1 along `axis`,
    SELECT_V2 of the on and off values; an index out of range gives a row of off values.

    Limits: a constant depth."""
    idx, values = operand(ctx, inputs[0]), operand(ctx, inputs[2])
    depth = int(scalar(inputs[1], ctx, "OneHot depth"))
    shape = list(out_shape(node))
    axis = int(attrs.get("axis", -1)) % len(shape)
    kind = np.float32 if np.dtype(idx.dtype).kind == "f" else np.int32  # a fractional index matches nothing
    idx = ctx.cast(idx, kind)
    negative = ctx.emit("LESS", [idx, ctx.scalar_like(0, idx)], idx.shape, np.bool_)
    idx = ctx.emit("SELECT_V2", [negative, ctx.emit("ADD", [idx, ctx.scalar_like(depth, idx)], like=idx,
                                                    fused_activation_function="NONE"), idx], like=idx)
    idx = ctx.reshape(idx, shape[:axis] + [1] + shape[axis + 1:])
    view = [1] * len(shape)
    view[axis] = depth
    hot = ctx.emit("EQUAL", [idx, ctx.const(np.arange(depth, dtype=kind).reshape(view), name="positions")],
                   shape, np.bool_)
    off = ctx.reshape(ctx.slice(values, [0], [1]), [])
    on = ctx.reshape(ctx.slice(values, [1], [1]), [])
    return ctx.emit("SELECT_V2", [hot, on, off], shape, values.dtype)


@onnx_op("EyeLike")
def eye_like(ctx, node, inputs, attrs) -> ir.Tensor:
    """EyeLike (opsets 13-28).

    A constant: ones on the k-th diagonal of the input's 2-D shape, in the asked type (the input's own by
    default)."""
    shape = [int(d) for d in out_shape(node)]
    if len(shape) != 2 or not all_static(shape):
        raise ctx.fail(f"EyeLike of a shape {shape} (2-D, static)")
    eye = np.eye(shape[0], shape[1], k=int(attrs.get("k", 0)), dtype=numpy_dtype(node.value.dtype))
    return ctx.const(eye, name="eye")


def _gather_elements_on_constants(node, inputs: list, attrs: dict) -> list[np.ndarray]:
    """GatherElements of constants, with numpy (onnx's reference evaluator is unreliable there)."""
    data, index = inputs
    axis = attrs.get("axis", 0) % data.ndim
    return [np.take_along_axis(data, np.where(index < 0, index + data.shape[axis], index), axis=axis)]


@onnx_op("GatherElements", constant_fold=_gather_elements_on_constants)
def gather_elements(ctx, node, inputs, attrs) -> ir.Tensor:
    """GatherElements (opsets 13-28).

    as aten.gather."""
    x, idx = inputs
    idx = tensor(ctx, idx)
    return aten_fn(aten.gather.default)(ctx, node, x, attrs.get("axis", 0) % x.rank, idx)


@onnx_op("Expand", parameters=[1], uint16_in_range=True, uint32="bits")
def expand(ctx, node, inputs, attrs) -> ir.Tensor:
    """Expand (opsets 13-28).

    as aten.expand to the inferred shape."""
    return aten_fn(aten.expand.default)(ctx, node, tensor(ctx, inputs[0]), list(out_shape(node)))


@onnx_op("Tile", parameters=[1], uint16_in_range=True, uint32="bits")
def tile(ctx, node, inputs, attrs) -> ir.Tensor:
    """Tile (opsets 13-28).

    as aten.repeat."""
    return aten_fn(aten.repeat.default)(ctx, node, inputs[0], const_list(inputs[1], "Tile repeats", ctx))


@onnx_op("Pad", parameters=[1, 2, 3], uint16_in_range=True)
def pad(ctx, node, inputs, attrs) -> ir.Tensor:
    """Pad (opsets 13-28).

    constant / reflect / edge / wrap padding as aten.constant_pad_nd / reflection / replication / circular
    pads; `axes` (opset 18) names the axes the pads are for."""
    x = inputs[0]
    pads = const_list(inputs[1], "Pad pads", ctx)
    value = scalar(inputs[2], ctx, "Pad value") if len(inputs) > 2 and inputs[2] is not None else 0.0
    mode = attrs.get("mode", "constant")
    rank = x.rank
    if len(inputs) > 3 and inputs[3] is not None:
        axes = [int(a) % rank for a in const_list(inputs[3], "Pad axes", ctx)]
        if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
            raise ctx.fail(f"Pad with {len(pads)} pads for axes {axes}")
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            full[a], full[a + rank] = pads[i], pads[i + len(axes)]
        pads = full
    torch_pad = []
    for axis in reversed(range(rank)):
        torch_pad += [pads[axis], pads[axis + rank]]
    while torch_pad[-2:] == [0, 0] and len(torch_pad) > 2:
        torch_pad = torch_pad[:-2]
    if mode == "constant":
        return aten_fn(aten.constant_pad_nd.default)(ctx, node, x, torch_pad, value)
    if mode == "wrap":
        if any(p < 0 for p in torch_pad):
            raise ctx.fail("Pad mode 'wrap' with negative pads has no lowering")
        return aten_fn(aten._pad_circular.default)(ctx, node, x, torch_pad)
    target = {"reflect": aten.reflection_pad2d.default, "edge": aten.replication_pad2d.default}.get(mode)
    if target is None or len(torch_pad) > 4:
        raise ctx.fail(f"Pad mode {mode!r} over these axes has no lowering yet")
    torch_pad += [0] * (4 - len(torch_pad))
    return aten_fn(target)(ctx, node, x, torch_pad)


@onnx_op("DepthToSpace")
def depth_to_space(ctx, node, inputs, attrs) -> ir.Tensor:
    """DepthToSpace (opsets 13-28).

    CRD mode as aten.pixel_shuffle; DCR mode, whose channel order (r1, r2, c) is TFLite's, as DEPTH_TO_SPACE
    between NHWC transposes."""
    mode = attrs.get("mode", "DCR")
    x, r = inputs[0], int(attrs["blocksize"])
    if mode == "CRD":
        return aten_fn(aten.pixel_shuffle.default)(ctx, node, x, r)
    if mode != "DCR":
        raise ctx.fail(f"DepthToSpace mode {mode!r} is not one ONNX defines")
    if x.rank != 4:
        raise ctx.fail("DepthToSpace of a tensor that is not 4-D is not defined")
    n, c, h, w = out_shape(node)
    y = ctx.emit("DEPTH_TO_SPACE", [ctx.transpose(x, (0, 2, 3, 1))], (n, h, w, c), x.dtype, block_size=r)
    return ctx.transpose(y, (0, 3, 1, 2))
