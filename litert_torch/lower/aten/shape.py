"""Shape and data-movement lowerings: reshapes, permutes, concatenation, splitting, slicing, padding."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.aten.conv import TO_NCHW, TO_NHWC, pair
from litert_torch.lower.common.registry import LoweringContext, lowers, normalize_dim, out_meta
from litert_torch.lower.aten.selection import mask_indices
from litert_torch.symbolic import Sym, all_static, broadcast_shapes, is_static, smax, smin

aten = torch.ops.aten


@lowers(
    aten.view.default, aten.reshape.default, aten.squeeze.dims, aten.unsqueeze.default, aten.flatten.using_ints,
    aten.view_copy.default,
)
def lower_reshape(ctx: LoweringContext, node, x, *args) -> ir.Tensor:
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)

    view/reshape/squeeze/unsqueeze/flatten: one RESHAPE to the shape PyTorch computed."""
    shape, _ = out_meta(node)
    return ctx.reshape(x, shape)


@lowers(aten.clone.default, aten.alias.default, aten.contiguous.default, aten.lift_fresh_copy.default)
def lower_identity(ctx, node, x, **kwargs) -> ir.Tensor:
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor

    Memory-format and aliasing ops are nothing in TFLite: the value passes through."""
    return x


@lowers(aten.permute.default, aten.permute_copy.default)
def lower_permute(ctx, node, x, dims) -> ir.Tensor:
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)

    TRANSPOSE (folded away at conversion time for constants)."""
    return ctx.transpose(x, [normalize_dim(d, x.rank) for d in dims])


@lowers(aten.cat.default)
def lower_cat(ctx, node, tensors, dim=0) -> ir.Tensor:
    """cat(Tensor[] tensors, int dim=0) -> Tensor

    CONCATENATION along `dim`; empty parts (which add nothing) are left out."""
    shape, dtype = out_meta(node)
    # parts of no elements add nothing (a part whose size is known only when the model runs is kept)
    parts = [ctx.cast(t, dtype) for t in tensors if not all_static(t.shape) or t.size]
    axis = normalize_dim(dim, len(shape))
    if len(parts) == 1:
        return parts[0]
    return ctx.emit("CONCATENATION", parts, shape, dtype, axis=axis)


@lowers(aten.split_with_sizes.default)
def lower_split(ctx, node, x, split, dim=0) -> list[ir.Tensor]:
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]

    SPLIT for equal parts, SPLIT_V for given sizes (read when the model runs where values decide them: the
    rows routed to each expert of a mixture, counted and read with .tolist())."""
    axis = normalize_dim(dim, x.rank)
    sizes = [s if isinstance(s, Sym) else int(s) for s in split]
    if not all_static(sizes):
        shapes = [([size if a == axis else d for a, d in enumerate(x.shape)], x.dtype) for size in sizes]
        axis_t = ctx.const(np.array(axis, np.int32), name="axis")
        return ctx.emit_multi("SPLIT_V", [x, ctx.dims_tensor(sizes), axis_t], shapes, num_splits=len(sizes))
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


@lowers(aten.unbind_copy.int)
def lower_unbind(ctx, node, x, dim=0) -> list[ir.Tensor]:
    """unbind_copy.int(Tensor self, int dim=0) -> Tensor[]

    UNPACK along `dim`: one tensor per index (the input itself, reshaped, for a size of one)."""
    axis = normalize_dim(dim, x.rank)
    count = x.shape[axis]
    if not isinstance(count, int):
        raise ctx.fail("unbind of an axis whose size is known only at run time has no lowering")
    shape = [d for i, d in enumerate(x.shape) if i != axis]
    if count == 1:
        return [ctx.reshape(x, shape)]
    return ctx.emit_multi("UNPACK", [x], [(shape, x.dtype)] * count, num=count, axis=axis)


@lowers(aten.unfold.default)
def lower_unfold(ctx, node, x, dim, size, step) -> ir.Tensor:
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)

    Tensor.unfold: windows of `size` every `step` along `dim`, as one GATHER of constant indices [n, size]
    along `dim`, the window axis then moved last."""
    shape, _ = out_meta(node)
    axis = normalize_dim(dim, max(x.rank, 1))
    if not all_static(x.shape):
        raise ctx.fail("unfold over a size known only at run time has no lowering")
    if x.rank == 0:
        return ctx.reshape(x, shape)
    count = (int(x.shape[axis]) - int(size)) // int(step) + 1
    index = (np.arange(count)[:, None] * int(step) + np.arange(int(size))[None, :]).astype(np.int32)
    gathered = ctx.emit("GATHER", [x, ctx.const(index, name="windows")],
                        [*x.shape[:axis], count, int(size), *x.shape[axis + 1:]], x.dtype, axis=axis, batch_dims=0)
    perm = [*range(axis + 1), *range(axis + 2, x.rank + 1), axis + 1]
    return ctx.transpose(gathered, perm)


@lowers(aten.as_strided.default, aten.as_strided_copy.default)
def lower_as_strided(ctx, node, x, size, stride, storage_offset=None) -> ir.Tensor:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)

    A view of a contiguous input's elements at `storage_offset` + sum(i_k * stride_k): one GATHER of those
    constant positions from the flattened input.

    Limits: the input must be contiguous in PyTorch (its storage order is then its element order)."""
    shape, _ = out_meta(node)
    if not all_static([*x.shape, *size, *stride]):
        raise ctx.fail("as_strided with sizes known only at run time has no lowering")
    if not node.inputs[0].contiguous:
        raise ctx.fail("as_strided of a non-contiguous tensor reads its storage, which has no lowering")
    positions = np.full([int(d) for d in size], int(storage_offset or 0), np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        along = np.arange(int(n), dtype=np.int64) * int(st)
        positions = positions + along.reshape([-1 if i == k else 1 for i in range(len(size))])
    total = int(np.prod([int(d) for d in x.shape]))
    if positions.size and (positions.min() < 0 or positions.max() >= total):
        raise ctx.fail("as_strided reads past the input's elements")
    flat = ctx.reshape(x, (total,))
    if positions.size == 0:
        return ctx.empty(shape, x.dtype)
    return ctx.emit("GATHER", [flat, ctx.const(positions.astype(np.int32), name="positions")], shape, x.dtype,
                    axis=0, batch_dims=0)


@lowers(aten.resize.default)
def lower_resize(ctx, node, x, size, memory_format=None) -> ir.Tensor:
    """resize(Tensor self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor

    `resize_` to a size of at most as many elements: the first elements of the input's storage in the new
    shape (a SLICE of the flattened input). Growing leaves the new elements undefined in PyTorch: refused."""
    shape, _ = out_meta(node)
    if not all_static([*x.shape, *shape]):
        raise ctx.fail("resize with sizes known only at run time has no lowering")
    if not node.inputs[0].contiguous:
        raise ctx.fail("resize of a non-contiguous tensor keeps its storage order, which has no lowering")
    total, count = x.size, int(np.prod([int(d) for d in shape]))
    if count > total:
        raise ctx.fail(f"resize from {total} to {count} elements: PyTorch leaves the {count - total} new "
                       "elements undefined, so it has no lowering (resize to at most as many elements)")
    if count == 0:
        return ctx.empty(shape, x.dtype)
    flat = ctx.reshape(x, (total,))
    if count < total:
        flat = ctx.slice(flat, [0], [count])
    return ctx.reshape(flat, tuple(shape))


@lowers(aten.empty.memory_format, aten.empty_permuted.default)
def lower_empty(ctx, node, *args, **kwargs) -> ir.Tensor:
    """empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    An uninitialised tensor with no elements (what an op on empty inputs allocates for its result). With
    elements, its values are whatever memory held: refused rather than given values of our choosing."""
    shape, dtype = out_meta(node)
    if not all_static(shape):
        raise ctx.fail("torch.empty with sizes known only at run time has no lowering")
    if int(np.prod([int(d) for d in shape])) != 0:
        raise ctx.fail(f"torch.empty of shape {tuple(int(d) for d in shape)} has undefined values (PyTorch does not "
                       "initialise it); only one read for its shape alone or with no elements has a lowering: "
                       "create it with torch.zeros or torch.full")
    return ctx.empty(shape, dtype)


@lowers(aten.copy.default)
def lower_copy(ctx, node, x, src, non_blocking=False) -> ir.Tensor:
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor

    `src` in `x`'s shape and dtype (BROADCAST_TO where it is smaller, CAST where the type differs)."""
    shape, dtype = out_meta(node)
    y = ctx.cast(src, dtype)
    if tuple(y.shape) != tuple(shape):
        if y.rank < len(shape):
            y = ctx.reshape(y, (1,) * (len(shape) - y.rank) + tuple(y.shape))
        y = ctx.emit("BROADCAST_TO", [y, ctx.dims_tensor(shape)], shape, dtype)
    return y


@lowers(aten.slice_scatter.default)
def lower_slice_scatter(ctx, node, x, src, dim=0, start=None, end=None, step=1) -> ir.Tensor:
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor

    `x` with `src` written over x[start:end:step] along `dim`: CONCATENATION of the slice before, `src` and
    the slice after (a unit step), or x and src joined and GATHERed back in place (other steps: each position
    reads x's element or the src element written there). Static sizes."""
    shape, dtype = out_meta(node)
    axis = normalize_dim(dim, x.rank)
    if not all_static([*x.shape, 0 if start is None else start, 0 if end is None else end]):
        raise ctx.fail("slice_scatter over a size known only at run time has no lowering")
    if int(step) != 1:
        size = int(x.shape[axis])
        written = list(range(*slice(start, end, int(step)).indices(size)))
        if not written:
            return ctx.cast(x, dtype)
        index = np.arange(size, dtype=np.int32)
        index[written] = size + np.arange(len(written), dtype=np.int32)
        joined_shape = list(x.shape)
        joined_shape[axis] = size + len(written)
        joined = ctx.emit("CONCATENATION", [ctx.cast(x, dtype), ctx.cast(src, dtype)], joined_shape, dtype,
                          axis=axis)
        return ctx.emit("GATHER", [joined, ctx.const(index, name="positions")], shape, dtype, axis=axis,
                        batch_dims=0)
    begin, stop, _ = slice(start, end, 1).indices(int(x.shape[axis]))
    stop = max(stop, begin)
    parts = []
    for lo, hi in ((0, begin), (stop, int(x.shape[axis]))):
        if hi > lo:
            begins = [0] * x.rank
            begins[axis] = lo
            sizes = list(x.shape)
            sizes[axis] = hi - lo
            parts.append(ctx.slice(x, begins, sizes))
    src = ctx.cast(src, x.dtype)
    if src.size:
        parts.insert(1 if begin > 0 else 0, src)
    parts = [ctx.cast(p, dtype) for p in parts]
    if len(parts) == 1:
        return parts[0]
    return ctx.emit("CONCATENATION", parts, shape, dtype, axis=axis)


@lowers(aten.slice.Tensor)
def lower_slice(ctx, node, x, dim=0, start=None, end=None, step=1) -> ir.Tensor:
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)

    SLICE for unit steps, STRIDED_SLICE otherwise; bounds are clamped the way PyTorch clamps them."""
    shape, _ = out_meta(node)
    axis = normalize_dim(dim, x.rank)
    size = x.shape[axis]
    if shape == x.shape:
        return x
    if not all_static([*x.shape, 0 if start is None else start, 0 if end is None else end]):
        return _dynamic_slice(ctx, x, shape, axis, start, end, int(step))
    begin, stop, _ = slice(start, end, step).indices(size)
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


def _bound(value, size, default):
    """A slice bound as PyTorch takes it: None is `default`, negative counts from the end, then clamped."""
    if value is None:
        return default
    if is_static(value) and value < 0:
        value = value + size
    return smin(smax(value, 0), size)


def _dynamic_slice(ctx, x, shape, axis, start, end, step):
    """A slice along an axis whose size or bounds are known only at run time."""
    size = x.shape[axis]
    begin = _bound(start, size, 0)
    stop = _bound(end, size, size)
    if step == 1:
        begins = [0] * x.rank
        begins[axis] = begin
        if any(isinstance(d, Sym) and d.symbols & ctx.space.counts for d in shape):
            # a length torch.export names by a symbol of its own: computed here from the bounds
            sizes = list(x.shape)
            sizes[axis] = smax(stop - begin, 0)
            return ctx.emit("SLICE", [x, ctx.dims_tensor(begins), ctx.dims_tensor(sizes)], shape, x.dtype)
        return ctx.slice(x, begins, shape)
    begins, ends, strides = [0] * x.rank, [0] * x.rank, [1] * x.rank
    begins[axis], strides[axis] = begin, step
    end_mask = sum(1 << a for a in range(x.rank) if a != axis)
    if stop == size:
        end_mask |= 1 << axis
    else:
        ends[axis] = stop
    return ctx.emit("STRIDED_SLICE", [x, ctx.dims_tensor(begins), ctx.dims_tensor(ends),
                                      ctx.const(np.array(strides, np.int32), name="strides")],
                    shape, x.dtype, begin_mask=0, end_mask=end_mask, shrink_axis_mask=0, ellipsis_mask=0,
                    new_axis_mask=0, offset=False)


def pad_pairs(rank: int, pad: list[int]) -> list[list[int]]:
    """PyTorch's pad list (last dim first, (before, after) pairs) as TFLite's [rank, 2] paddings."""
    pairs = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):
        pairs[rank - 1 - i] = [int(pad[2 * i]), int(pad[2 * i + 1])]
    return pairs


@lowers(aten.constant_pad_nd.default)
def lower_constant_pad(ctx, node, x, pad, value=0) -> ir.Tensor:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor

    PAD with zeros, PADV2 with another value; negative pads (cropping) become a SLICE afterwards."""
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
        if not all_static(out_shape):
            return ctx.slice(y, begins, out_shape)
        y = ctx.emit("SLICE", [y, ctx.const(np.array(begins, np.int32), name="begin"),
                               ctx.const(np.array(out_shape, np.int32), name="size")], out_shape, x.dtype)
    return y


@lowers(aten.select.int)
def lower_select(ctx, node, x, dim, index) -> ir.Tensor:
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)

    SLICE of width 1, then RESHAPE dropping the axis (XNNPACK takes SLICE; it rejects STRIDED_SLICE with a
    shrink mask, which would split the delegated graph)."""
    shape, _ = out_meta(node)
    axis = normalize_dim(dim, x.rank)
    index = index + x.shape[axis] if index < 0 else index
    return ctx.reshape(_slice_axis(ctx, x, axis, index, 1), shape)


@lowers(aten.expand.default)
def lower_expand(ctx, node, x, size, implicit=False) -> ir.Tensor:
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)

    BROADCAST_TO the expanded shape (after a RESHAPE adding leading unit dims)."""
    shape, _ = out_meta(node)
    if tuple(shape) == x.shape:
        return x
    x = ctx.reshape(x, (1,) * (len(shape) - x.rank) + x.shape)
    if tuple(shape) == x.shape:
        return x
    return ctx.emit("BROADCAST_TO", [x, ctx.dims_tensor(shape)], shape, x.dtype)


@lowers(aten.repeat.default)
def lower_repeat(ctx, node, x, repeats) -> ir.Tensor:
    """repeat(Tensor self, SymInt[] repeats) -> Tensor

    TILE (after a RESHAPE adding the leading unit dims torch.repeat adds)."""
    shape, _ = out_meta(node)
    x = ctx.reshape(x, (1,) * (len(repeats) - x.rank) + x.shape)
    if all(r == 1 for r in repeats):
        return x
    return ctx.emit("TILE", [x, ctx.const(np.array(repeats, np.int32), name="multiples")], shape, x.dtype)


def index_tensor(ctx: LoweringContext, index: ir.Tensor, size: int) -> ir.Tensor:
    """Indices as int32 with negative values wrapped: TFLite gathers reject negative indices."""
    index = ctx.cast(index, np.int32)
    if index.data is not None and (is_static(size) or not (index.data < 0).any()):
        return ctx.const(np.where(index.values < 0, index.values + size, index.values).astype(np.int32), name="index")
    size_t = ctx.const(np.array(size, np.int32), name="size") if is_static(size) else \
        ctx.reshape(ctx.size_tensor(size), [])
    wrapped = ctx.emit("ADD", [index, size_t], like=index)
    negative = ctx.emit("LESS", [index, ctx.const(np.array(0, np.int32), name="zero")], index.shape, np.bool_)
    return ctx.emit("SELECT_V2", [negative, wrapped, index], like=index)


@lowers(aten.index_select.default)
def lower_index_select(ctx, node, x, dim, index) -> ir.Tensor:
    """index_select(Tensor self, int dim, Tensor index) -> Tensor

    GATHER along `dim` (a 0-d tensor is read as one of size 1, as PyTorch reads it)."""
    shape, _ = out_meta(node)
    if x.rank == 0:
        one = ctx.reshape(x, [1])
        picked = ctx.emit("GATHER", [one, index_tensor(ctx, ctx.reshape(index, [-1] if not index.rank else
                                                                         list(index.shape)), 1)],
                          [int(np.prod([int(d) for d in index.shape]))], x.dtype, axis=0, batch_dims=0)
        return ctx.reshape(picked, shape)
    axis = normalize_dim(dim, x.rank)
    return ctx.emit("GATHER", [x, index_tensor(ctx, index, x.shape[axis])], shape, x.dtype, axis=axis, batch_dims=0)


@lowers(aten.embedding.default)
def lower_embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False) -> ir.Tensor:
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor

    GATHER of rows of the weight table (padding_idx only matters for gradients)."""
    shape, _ = out_meta(node)
    return ctx.emit("GATHER", [weight, ctx.cast(indices, np.int32)], shape, weight.dtype, axis=0, batch_dims=0)


@lowers(aten.index.Tensor)
def lower_index(ctx, node, x, indices) -> ir.Tensor:
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor

    x[idx] with one index tensor -> GATHER on that axis; with index tensors on the leading axes ->
    GATHER_ND of their broadcast, stacked coordinates. A boolean mask stands for the coordinates of its true
    elements (`selection.mask_indices`), so x[mask] has a size decided when the model runs.

    Limits: index tensors on non-leading axes together; more than one boolean mask."""
    shape, _ = out_meta(node)
    indices = mask_indices(ctx, node, indices)
    present = [i for i, t in enumerate(indices) if t is not None]
    if len(present) == 1:
        axis = present[0]
        idx = indices[axis]
        return ctx.emit("GATHER", [x, index_tensor(ctx, idx, x.shape[axis])], shape, x.dtype, axis=axis,
                        batch_dims=0)
    if present != list(range(len(present))):
        raise ctx.fail("advanced indexing with index tensors on non-leading or non-adjacent axes has no lowering")
    batch = list(broadcast_shapes(*[indices[i].shape for i in present]))
    coords = []
    for i in present:
        idx = index_tensor(ctx, indices[i], x.shape[i])
        idx = ctx.reshape(idx, (1,) * (len(batch) - idx.rank) + idx.shape)
        if list(idx.shape) != batch:
            idx = ctx.emit("BROADCAST_TO", [idx, ctx.dims_tensor(batch)], batch, np.int32)
        coords.append(ctx.reshape(idx, [*batch, 1]))
    stacked = ctx.emit("CONCATENATION", coords, [*batch, len(present)], np.int32, axis=len(batch),
                       fused_activation_function="NONE")
    return ctx.emit("GATHER_ND", [x, stacked], shape, x.dtype)


@lowers(aten.gather.default)
def lower_gather(ctx, node, x, dim, index, sparse_grad=False) -> ir.Tensor:
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor

    torch.gather as GATHER_ND: coordinates are the index along `dim` and constant position grids elsewhere."""
    shape, _ = out_meta(node)
    axis = normalize_dim(dim, x.rank)
    idx = index_tensor(ctx, index, x.shape[axis])
    if not index.is_static:
        return _dynamic_gather(ctx, x, idx, axis, shape)
    grids = np.indices(index.shape, dtype=np.int32)
    coords = []
    for d in range(x.rank):
        if d == axis:
            coords.append(ctx.reshape(idx, [*index.shape, 1]))
        else:
            coords.append(ctx.const(grids[d].reshape(*index.shape, 1), name=f"grid{d}"))
    if all(c.is_constant for c in coords):
        stacked = ctx.const(np.concatenate([c.data for c in coords], axis=-1), name="coords")
    else:
        stacked = ctx.emit("CONCATENATION", coords, [*index.shape, x.rank], np.int32, axis=index.rank,
                           fused_activation_function="NONE")
    return ctx.emit("GATHER_ND", [x, stacked], shape, x.dtype)


def _dynamic_gather(ctx, x, idx, axis, shape):
    """torch.gather over an index of run-time shape: the position grids are RANGEs broadcast to that shape."""
    coords = []
    for d in range(x.rank):
        if d == axis:
            coords.append(ctx.reshape(idx, [*idx.shape, 1]))
            continue
        n = idx.shape[d]
        steps = [ctx.reshape(ctx.size_tensor(v), []) for v in (0, n, 1)]
        line = ctx.emit("RANGE", steps, [n], np.int32)
        line = ctx.reshape(line, [n if a == d else 1 for a in range(idx.rank)])
        grid = ctx.emit("BROADCAST_TO", [line, ctx.dims_tensor(idx.shape)], idx.shape, np.int32)
        coords.append(ctx.reshape(grid, [*idx.shape, 1]))
    stacked = ctx.emit("CONCATENATION", coords, [*idx.shape, x.rank], np.int32, axis=idx.rank,
                       fused_activation_function="NONE")
    return ctx.emit("GATHER_ND", [x, stacked], shape, x.dtype)


@lowers(aten.flip.default)
def lower_flip(ctx, node, x, dims) -> ir.Tensor:
    """flip(Tensor self, int[] dims) -> Tensor

    One REVERSE_V2 per flipped axis (the kernel takes one axis, or contiguous ones)."""
    for axis in sorted({normalize_dim(d, x.rank) for d in dims}):
        x = ctx.emit("REVERSE_V2", [x, ctx.const(np.array([axis], np.int32), name="axis")], like=x)
    return x


def _slice_axis(ctx: LoweringContext, x: ir.Tensor, axis: int, begin: int, size: int) -> ir.Tensor:
    begins = [0] * x.rank
    sizes = list(x.shape)
    begins[axis], sizes[axis] = begin, size
    if not all_static([*sizes, *begins]):
        return ctx.slice(x, begins, sizes)
    return ctx.emit("SLICE", [x, ctx.const(np.array(begins, np.int32), name="begin"),
                              ctx.const(np.array(sizes, np.int32), name="size")], sizes, x.dtype)


@lowers(aten.pixel_shuffle.default)
def lower_pixel_shuffle(ctx, node, x, upscale_factor) -> ir.Tensor:
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor

    DEPTH_TO_SPACE in NHWC. PyTorch orders the input channels (c, r1, r2), TFLite (r1, r2, c): a GATHER of
    the channels reorders them first (not needed for one output channel)."""
    shape, _ = out_meta(node)
    r = int(upscale_factor)
    n, c_in, h, w = x.shape
    c = c_in // (r * r)
    xh = ctx.transpose(x, TO_NHWC)
    if c > 1:
        order = np.arange(c_in).reshape(c, r, r).transpose(1, 2, 0).reshape(-1).astype(np.int32)
        xh = ctx.emit("GATHER", [xh, ctx.const(order, name="channel_order")], like=xh, axis=3, batch_dims=0)
    y = ctx.emit("DEPTH_TO_SPACE", [xh], [n, h * r, w * r, c], x.dtype, block_size=r)
    return ctx.transpose(y, TO_NCHW)


@lowers(aten.pixel_unshuffle.default)
def lower_pixel_unshuffle(ctx, node, x, downscale_factor) -> ir.Tensor:
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor

    SPACE_TO_DEPTH in NHWC, then a GATHER from TFLite's (r1, r2, c) channel order to PyTorch's (c, r1, r2)."""
    r = int(downscale_factor)
    n, c, h, w = x.shape
    y = ctx.emit("SPACE_TO_DEPTH", [ctx.transpose(x, TO_NHWC)], [n, h // r, w // r, c * r * r], x.dtype, block_size=r)
    if c > 1:
        order = np.arange(c * r * r).reshape(r, r, c).transpose(2, 0, 1).reshape(-1).astype(np.int32)
        y = ctx.emit("GATHER", [y, ctx.const(order, name="channel_order")], like=y, axis=3, batch_dims=0)
    return ctx.transpose(y, TO_NCHW)


@lowers(aten.reflection_pad1d.default, aten.reflection_pad2d.default)
def lower_reflection_pad(ctx, node, x, padding) -> ir.Tensor:
    """reflection_pad1d(Tensor self, SymInt[2] padding) -> Tensor

    MIRROR_PAD in REFLECT mode (the edge value is not repeated).

    Limits: no negative padding (cropping)."""
    shape, _ = out_meta(node)
    pairs = pad_pairs(x.rank, padding)
    if any(p < 0 for pair in pairs for p in pair):
        raise ctx.fail(f"reflection padding by negative amounts {list(padding)} (cropping) has no lowering yet")
    return ctx.emit("MIRROR_PAD", [x, ctx.const(np.array(pairs, np.int32), name="paddings")], shape, x.dtype,
                    mode="REFLECT")


@lowers(aten.replication_pad1d.default, aten.replication_pad2d.default)
def lower_replication_pad(ctx, node, x, padding) -> ir.Tensor:
    """replication_pad1d(Tensor self, SymInt[2] padding) -> Tensor

    Edge padding. Padding by at most 1 on every side is one MIRROR_PAD in SYMMETRIC mode (which repeats the
    edge value once); wider padding is, per padded axis, the edge slice BROADCAST_TO the pad width and
    concatenated. With a negative amount (cropping), each padded axis is one GATHER of PyTorch's clamped source
    indices, clamp(i - before, 0, size - 1), which holds even where a crop is wider than the axis."""
    pairs = pad_pairs(x.rank, padding)
    if any(int(p) < 0 for pair in pairs for p in pair):
        for axis, (before, after) in enumerate(pairs):
            size = x.shape[axis]
            if not before and not after:
                continue
            if not isinstance(size, int):
                raise ctx.fail("replication padding by negative amounts over a dynamic size has no lowering")
            out = size + int(before) + int(after)
            if out < 0:
                raise ctx.fail(f"replication padding {list(padding)} leaves a negative size along axis {axis}")
            index = np.clip(np.arange(out) - int(before), 0, size - 1).astype(np.int32)
            shape = list(x.shape)
            shape[axis] = out
            x = ctx.emit("GATHER", [x, ctx.const(index, name="source")], shape, x.dtype, axis=axis, batch_dims=0)
        return x
    if all(p <= 1 for pair in pairs for p in pair) and x.is_static:
        out_shape, _ = out_meta(node)
        return ctx.emit("MIRROR_PAD", [x, ctx.const(np.array(pairs, np.int32), name="paddings")], out_shape, x.dtype,
                        mode="SYMMETRIC")
    for axis, (before, after) in enumerate(pairs):
        if not before and not after:
            continue
        parts = []
        if before:
            edge = _slice_axis(ctx, x, axis, 0, 1)
            parts.append(_widen(ctx, edge, axis, before))
        parts.append(x)
        if after:
            edge = _slice_axis(ctx, x, axis, x.shape[axis] - 1, 1)
            parts.append(_widen(ctx, edge, axis, after))
        shape = list(x.shape)
        shape[axis] += before + after
        x = ctx.emit("CONCATENATION", parts, shape, x.dtype, axis=axis, fused_activation_function="NONE")
    return x


@lowers(aten._pad_circular.default)
def lower_circular_pad(ctx, node, x, pad) -> ir.Tensor:
    """_pad_circular(Tensor self, SymInt[] pad) -> Tensor

    Circular (wrap-around) padding, one padded axis after another: the axis's last `before` entries, the
    tensor, its first `after` entries (SLICE, CONCATENATION). With a negative amount (cropping), one GATHER of
    the source indices that PyTorch's own circular padding gives over that axis.

    Limits: the padded axes must have static sizes."""
    for axis, (before, after) in enumerate(pad_pairs(x.rank, pad)):
        if not before and not after:
            continue
        size = x.shape[axis]
        if not isinstance(size, int):
            raise ctx.fail("circular padding over a dynamic size has no lowering")
        shape = list(x.shape)
        shape[axis] = size + before + after
        if before < 0 or after < 0:
            positions = torch.arange(size, dtype=torch.float64).reshape(1, 1, size)
            index = aten._pad_circular.default(positions, [before, after]).reshape(-1).to(torch.int32).numpy()
            x = ctx.emit("GATHER", [x, ctx.const(index, name="source")], shape, x.dtype, axis=axis, batch_dims=0)
            continue
        parts = [_slice_axis(ctx, x, axis, size - before, before)] if before else []
        parts.append(x)
        if after:
            parts.append(_slice_axis(ctx, x, axis, 0, after))
        x = ctx.emit("CONCATENATION", parts, shape, x.dtype, axis=axis, fused_activation_function="NONE")
    return x


@lowers(aten.im2col.default)
def lower_im2col(ctx, node, x, kernel_size, dilation, padding, stride) -> ir.Tensor:
    """im2col(Tensor self, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor

    F.unfold: the input zero-padded (PAD), its H x W plane flattened, and one GATHER of every sliding
    window's entries: [N, C, kh * kw, L] with the windows' positions in PyTorch's order, reshaped to
    [N, C * kh * kw, L].

    Limits: the spatial sizes must be static."""
    shape, _ = out_meta(node)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (pair(v) for v in (kernel_size, dilation, padding, stride))
    *lead, h, w = x.shape
    if not all_static([h, w]):
        raise ctx.fail("unfold over a dynamic height or width has no lowering")
    hp, wp = h + 2 * ph, w + 2 * pw
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if ph or pw:
        pairs = [[0, 0]] * len(lead) + [[ph, ph], [pw, pw]]
        x = ctx.emit("PAD", [x, ctx.const(np.array(pairs, np.int32), name="paddings")], [*lead, hp, wp], x.dtype)
    rows = (np.arange(oh) * sh)[None, :, None] + (np.arange(kh) * dh)[:, None, None]  # [kh, oh, 1]
    cols = (np.arange(ow) * sw)[None, None, :] + (np.arange(kw) * dw)[:, None, None]  # [kw, 1, ow]
    index = (rows[:, None, :, :] * wp + cols[None, :, :, :]).reshape(kh * kw, oh * ow).astype(np.int32)
    flat = ctx.reshape(x, [*lead, hp * wp])
    taps = ctx.emit("GATHER", [flat, ctx.const(index, name="windows")], [*lead, kh * kw, oh * ow], x.dtype,
                    axis=len(lead), batch_dims=0)
    return ctx.reshape(taps, shape)


def _widen(ctx: LoweringContext, edge: ir.Tensor, axis: int, width: int) -> ir.Tensor:
    if width == 1:
        return edge
    shape = list(edge.shape)
    shape[axis] = width
    return ctx.emit("BROADCAST_TO", [edge, ctx.const(np.array(shape, np.int32), name="shape")], shape, edge.dtype)


@lowers(aten._assert_tensor_metadata.default, aten._assert_scalar.default, aten.sym_constrain_range_for_size.default)
def lower_assertion(ctx, node, *args, **kwargs) -> None:
    """_assert_tensor_metadata(Tensor a, SymInt[]? size=None, SymInt[]? stride=None, ScalarType? dtype=None, *, Device? device=None, Layout? layout=None) -> ()

    Nothing: trace-time assertions about dtypes and shapes, already checked by torch.export."""
    return None


def _scalar_size(ctx: LoweringContext, value) -> ir.Tensor:
    """A rank-0 int32 tensor holding a size (an int or a Sym) at run time."""
    return ctx.reshape(ctx.size_tensor(value), [])


@lowers(aten.arange.start_step)
def lower_arange(ctx, node, *args, dtype=None, layout=None, device=None, pin_memory=None) -> ir.Tensor:
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    RANGE over int32 (then CAST), for a range whose bounds are sizes known only at run time (a range with
    static bounds is a constant and never reaches this lowering).

    Limits: integer start, end and step."""
    shape, out_dtype = out_meta(node)
    start, end = args[0], args[1]
    step = args[2] if len(args) > 2 else 1
    for v in (start, end, step):
        if isinstance(v, (float, ir.Tensor)) or isinstance(v, bool):
            raise ctx.fail(f"arange with a dynamic size and a non-integer bound or step ({v!r}) has no lowering")
    parts = [_scalar_size(ctx, v) for v in (start, end, step)]
    y = ctx.emit("RANGE", parts, shape, np.int32)
    return ctx.cast(y, out_dtype)


@lowers(aten.arange.default)
def lower_arange_end(ctx, node, end, dtype=None, layout=None, device=None, pin_memory=None) -> ir.Tensor:
    """arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    arange(end): as arange(0, end, 1)."""
    return lower_arange(ctx, node, 0, end, 1)


@lowers(aten.arange.start)
def lower_arange_start(ctx, node, start, end, dtype=None, layout=None, device=None, pin_memory=None) -> ir.Tensor:
    """arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    arange(start, end): as arange(start, end, 1)."""
    return lower_arange(ctx, node, start, end, 1)


@lowers(aten.full.default)
def lower_full(ctx, node, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None) -> ir.Tensor:
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    FILL of a shape known only at run time (a static one is a constant)."""
    shape, out_dtype = out_meta(node)
    return ctx.emit("FILL", [ctx.dims_tensor(shape), ctx.const(np.array(fill_value, out_dtype), out_dtype)],
                    shape, out_dtype)


@lowers(aten.zeros.default)
def lower_zeros(ctx, node, size, dtype=None, layout=None, device=None, pin_memory=None) -> ir.Tensor:
    """zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    FILL of zeros in a shape known only at run time (a static one is a constant)."""
    return lower_full(ctx, node, size, 0)


@lowers(aten.ones.default)
def lower_ones(ctx, node, size, dtype=None, layout=None, device=None, pin_memory=None) -> ir.Tensor:
    """ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    FILL of ones in a shape known only at run time (a static one is a constant)."""
    return lower_full(ctx, node, size, 1)


@lowers(aten.zeros_like.default)
def lower_zeros_like(ctx, node, x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None) -> ir.Tensor:
    """zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    FILL of zeros in the run-time shape of `x` (a static one is a constant)."""
    return lower_full_like(ctx, node, x, 0)


@lowers(aten.ones_like.default)
def lower_ones_like(ctx, node, x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None) -> ir.Tensor:
    """ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    FILL of ones in the run-time shape of `x` (a static one is a constant)."""
    return lower_full_like(ctx, node, x, 1)


@lowers(aten.full_like.default)
def lower_full_like(ctx, node, x, fill_value, dtype=None, layout=None, device=None, pin_memory=None,
                    memory_format=None) -> ir.Tensor:
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    FILL of the run-time shape of `x` (a static one is a constant)."""
    shape, out_dtype = out_meta(node)
    return ctx.emit("FILL", [ctx.dims_tensor(shape), ctx.const(np.array(fill_value, out_dtype), out_dtype)],
                    shape, out_dtype)


@lowers(aten.diagonal.default)
def lower_diagonal(ctx, node, x, offset=0, dim1=0, dim2=1) -> ir.Tensor:
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)

    The two axes moved last (TRANSPOSE) and merged (RESHAPE), then a GATHER of the diagonal's flat
    positions along the merged axis: the diagonal becomes the last axis, as in PyTorch.

    Limits: static sizes on the two axes."""
    shape, _ = out_meta(node)
    a, b = normalize_dim(dim1, x.rank), normalize_dim(dim2, x.rank)
    rows, cols = x.shape[a], x.shape[b]
    if not isinstance(rows, int) or not isinstance(cols, int):
        raise ctx.fail("diagonal over axes with dynamic sizes has no lowering yet")
    rest = [i for i in range(x.rank) if i not in (a, b)]
    moved = ctx.transpose(x, rest + [a, b])
    flat = ctx.reshape(moved, [x.shape[i] for i in rest] + [rows * cols])
    length = shape[-1]
    start = offset if offset >= 0 else -offset * cols
    positions = np.array([start + i * (cols + 1) for i in range(length)], np.int32)
    y = ctx.emit("GATHER", [flat, ctx.const(positions, name="diagonal")], shape, x.dtype, axis=len(rest),
                 batch_dims=0)
    return y
