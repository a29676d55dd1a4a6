"""Writes at computed positions: index_put, scatter, scatter_add, scatter_reduce and index_reduce (sum, mean,
prod, amax, amin), and ONNX's ScatterElements and ScatterND, through SCATTER_ND.

SCATTER_ND makes a zero tensor and adds each update at its coordinates (updates at the same coordinates are
summed) and fails the invocation on a coordinate outside the tensor, as PyTorch raises. An accumulating write is
x + SCATTER_ND(updates); an overwriting one selects SCATTER_ND(updates) where SCATTER_ND(ones) marks a written
position and keeps x elsewhere. Negative indices count from the end of their axis, as in PyTorch and ONNX.

An overwriting write that gives one position several updates writes their mean (SCATTER_ND of the updates
divided by SCATTER_ND of ones): exact where the updates are equal, as the repeated indices of max_unpool over
overlapping windows are; PyTorch and ONNX leave other duplicates undefined.

Products, maxima and minima have no scatter kernel: each position along the written axis is compared with every
index (EQUAL against the positions, one more axis), the updates it does not receive replaced by the reduction's
identity, and REDUCE_PROD / REDUCE_MAX / REDUCE_MIN taken over the indices; a NaN among the updates a position
receives makes it NaN, as in PyTorch. SCATTER_ND of ones still marks the written positions (and refuses an index
outside the tensor).

Limits: static sizes; a product, maximum or minimum compares (positions x updates) elements, refused above
2**24.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import LoweringContext, lowers, normalize_dim, out_meta
from litert_torch.symbolic import all_static, broadcast_shapes

aten = torch.ops.aten

# element types SCATTER_ND takes; others are written in a wider one and cast back
_SCATTER_TYPES = {np.dtype(t) for t in (np.float32, np.int32, np.int64, np.int8, np.uint8, np.bool_)}


def _wide(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype in _SCATTER_TYPES:
        return dtype
    return np.dtype(np.float32) if dtype.kind == "f" else np.dtype(np.int32)


def _static(ctx: LoweringContext, *tensors: ir.Tensor) -> None:
    if not all_static([d for t in tensors for d in t.shape]):
        raise ctx.fail("a scatter over dynamic sizes has no lowering")


def wrapped(ctx: LoweringContext, index: ir.Tensor, size: int) -> ir.Tensor:
    """An int32 index with negative values counted from the end of an axis of `size` (others left as they are,
    so that SCATTER_ND refuses an index past the axis instead of wrapping it)."""
    index = ctx.cast(index, np.int32)
    negative = ctx.emit("LESS", [index, ctx.scalar_like(0, index)], index.shape, np.bool_)
    shifted = ctx.emit("ADD", [index, ctx.scalar_like(size, index)], like=index, fused_activation_function="NONE")
    return ctx.emit("SELECT_V2", [negative, shifted, index], like=index)


def write(ctx: LoweringContext, x: ir.Tensor, coords: ir.Tensor, updates: ir.Tensor, mode: str,
          include_self: bool = True) -> ir.Tensor:
    """`x` with `updates` [*lead, *slice] written at `coords` [*lead, k] (k leading axes of x): mode "set" or
    "add"; "mean" averages x (when `include_self`) and every update at a position."""
    dtype = np.dtype(x.dtype)
    wide = _wide(dtype)
    if mode == "set" and wide != np.bool_:
        # several updates of one position are averaged: exact where they are equal (max_unpool's indices of
        # overlapping windows repeat one value), and one of the values PyTorch and ONNX leave undefined elsewhere
        mode, include_self = "mean", False
    xw, uw = ctx.cast(x, wide), ctx.cast(updates, wide)
    shape_t = ctx.const(np.array(x.shape, np.int32), name="shape")
    scattered = ctx.emit("SCATTER_ND", [coords, uw, shape_t], x.shape, wide)
    if mode == "add" and include_self:
        if wide == np.bool_:
            return ctx.cast(ctx.emit("LOGICAL_OR", [xw, scattered], x.shape, wide), dtype)
        return ctx.cast(ctx.emit("ADD", [xw, scattered], x.shape, wide, fused_activation_function="NONE"), dtype)
    one = np.array(1, np.int32) if mode == "mean" else np.array(True)
    ones = ctx.emit("FILL", [ctx.const(np.array(updates.shape, np.int32), name="shape"), ctx.const(one, name="one")],
                    updates.shape, one.dtype)
    if mode == "mean":
        count = ctx.cast(ctx.emit("SCATTER_ND", [coords, ones, shape_t], x.shape, np.int32), wide)
        hit = ctx.emit("GREATER", [count, ctx.scalar_like(0, count)], x.shape, np.bool_)
        if include_self:
            total = ctx.emit("ADD", [xw, scattered], x.shape, wide, fused_activation_function="NONE")
            count = ctx.emit("ADD", [count, ctx.scalar_like(1, count)], like=count, fused_activation_function="NONE")
        else:
            total = scattered
        safe = ctx.emit("MAXIMUM", [count, ctx.scalar_like(1, count)], like=count)
        if wide.kind == "f":
            mean = ctx.emit("DIV", [total, safe], x.shape, wide, fused_activation_function="NONE")
        else:
            mean = ctx.emit("FLOOR_DIV", [total, safe], x.shape, wide)
        return ctx.cast(ctx.emit("SELECT_V2", [hit, mean, xw], x.shape, wide), dtype)
    hit = ctx.emit("SCATTER_ND", [coords, ones, shape_t], x.shape, np.bool_)
    base = xw if mode == "set" else ctx.emit("SELECT_V2", [hit, ctx.scalar_like(0, xw), xw], x.shape, wide)
    if mode == "add":  # include_self=False: the written positions start from zero
        return ctx.cast(ctx.emit("ADD", [base, scattered], x.shape, wide, fused_activation_function="NONE"), dtype)
    return ctx.cast(ctx.emit("SELECT_V2", [hit, scattered, base], x.shape, wide), dtype)


def _iota(shape: list[int], axis: int) -> np.ndarray:
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return np.broadcast_to(np.arange(shape[axis], dtype=np.int32).reshape(view), shape).copy()


def _stack(ctx: LoweringContext, parts: list[ir.Tensor], shape: list[int]) -> ir.Tensor:
    """[*shape, len(parts)] int32 coordinates from one [*shape] tensor per axis."""
    columns = [ctx.reshape(p, [*shape, 1]) for p in parts]
    if all(c.is_constant for c in columns):
        return ctx.const(np.concatenate([c.data for c in columns], axis=-1).astype(np.int32), name="coords")
    return ctx.emit("CONCATENATION", columns, [*shape, len(parts)], np.int32, axis=len(shape),
                    fused_activation_function="NONE")


def _broadcast(ctx: LoweringContext, t: ir.Tensor, shape: list[int]) -> ir.Tensor:
    if list(t.shape) == list(shape):
        return t
    if t.is_constant:
        return ctx.const(np.broadcast_to(t.values, shape).copy(), t.dtype, "broadcast")
    if t.rank < len(shape):
        t = ctx.reshape(t, [1] * (len(shape) - t.rank) + list(t.shape))
    return ctx.emit("BROADCAST_TO", [t, ctx.const(np.array(shape, np.int32), name="shape")], shape, t.dtype)


def along_axis(ctx: LoweringContext, x: ir.Tensor, dim: int, index: ir.Tensor) -> ir.Tensor:
    """Coordinates [*index.shape, rank] of x for a scatter along `dim`: index's own position on every other
    axis, its value on `dim`."""
    shape = [int(d) for d in index.shape]
    parts = [wrapped(ctx, index, int(x.shape[d])) if d == dim else ctx.const(_iota(shape, d), name="positions")
             for d in range(x.rank)]
    return _stack(ctx, parts, shape)


def _source(ctx: LoweringContext, src, index: ir.Tensor, dtype) -> ir.Tensor:
    """The updates of a scatter: src's leading block of index's shape, or a scalar repeated."""
    shape = [int(d) for d in index.shape]
    if not isinstance(src, ir.Tensor):
        return ctx.const(np.full(shape, src, dtype=dtype), name="value")
    if list(src.shape) != shape:
        src = ctx.slice(src, [0] * src.rank, shape)
    return src


def _scatter(ctx, node, x, dim, index, src, mode, include_self=True):
    _static(ctx, x, index)
    if index.rank != x.rank and not (index.rank == 0 and x.rank == 0):
        raise ctx.fail(f"scatter with an index of rank {index.rank} into a tensor of rank {x.rank}")
    if x.rank == 0:
        x1, i1 = ctx.reshape(x, [1]), ctx.reshape(index, [1])
        s1 = src if not isinstance(src, ir.Tensor) else ctx.reshape(src, [1])
        return ctx.reshape(_scatter(ctx, node, x1, 0, i1, s1, mode, include_self), [])
    dim = normalize_dim(dim, x.rank)
    if any(d == 0 for d in index.shape):
        return x
    updates = _source(ctx, src, index, x.dtype)
    return write(ctx, x, along_axis(ctx, x, dim, index), updates, mode, include_self)


@lowers(aten.scatter.src, aten.scatter.value)
def lower_scatter(ctx, node, x, dim, index, src) -> ir.Tensor:
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor

    x with src (or a scalar) written at index along `dim` (SCATTER_ND; see the module's limits)."""
    return _scatter(ctx, node, x, dim, index, src, "set")


@lowers(aten.scatter_add.default)
def lower_scatter_add(ctx, node, x, dim, index, src) -> ir.Tensor:
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor

    x plus src added at index along `dim` (x + SCATTER_ND)."""
    return _scatter(ctx, node, x, dim, index, src, "add")


@lowers(aten.put.default)
def lower_put(ctx, node, x, index, source, accumulate=False) -> ir.Tensor:
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor

    torch.put: x flattened, source written (or added) at the flat indices (negative ones from the end), then
    x's shape again (SCATTER_ND; see the module's limits)."""
    _, dtype = out_meta(node)
    _static(ctx, x, index, source)
    size = int(np.prod([int(d) for d in x.shape], dtype=np.int64))
    count = int(np.prod([int(d) for d in index.shape], dtype=np.int64))
    if count == 0:
        return x
    flat = ctx.reshape(x, [size])
    coords = ctx.reshape(wrapped(ctx, ctx.reshape(index, [count]), size), [count, 1])
    updates = ctx.reshape(ctx.cast(source, x.dtype), [count])
    out = write(ctx, flat, coords, updates, "add" if accumulate else "set")
    return ctx.cast(ctx.reshape(out, list(x.shape)), dtype)


# ---- products, maxima and minima ---------------------------------------------------------------------------
_GROUPED_LIMIT = 1 << 24
_REDUCERS = {"prod": "REDUCE_PROD", "amax": "REDUCE_MAX", "amin": "REDUCE_MIN"}
_COMBINE = {"prod": "MUL", "amax": "MAXIMUM", "amin": "MINIMUM"}


def _identity(reduce: str, dtype: np.dtype):
    if reduce == "prod":
        return np.array(1, dtype)
    if dtype.kind == "f":
        return np.array(-np.inf if reduce == "amax" else np.inf, dtype)
    info = np.iinfo(dtype)
    return np.array(info.min if reduce == "amax" else info.max, dtype)


def grouped(ctx: LoweringContext, values: ir.Tensor, ids: ir.Tensor, axis: int, n: int, reduce: str) -> ir.Tensor:
    """For each group j < n, the `reduce` ("prod", "amax", "amin") of the `values` along `axis` whose id (int32,
    broadcast against `values`) is j: [*values.shape[:axis], n, *values.shape[axis + 1:]], the identity where no
    id is j. A group receiving a NaN is NaN."""
    shape = [int(d) for d in values.shape]
    wide_shape = shape[:axis] + [n] + shape[axis:]
    if int(np.prod(wide_shape)) > _GROUPED_LIMIT:
        raise ctx.fail(f"a scatter {reduce} comparing {n} positions with {int(np.prod(shape))} updates "
                       f"({int(np.prod(wide_shape))} elements, over 2**24) has no lowering")
    dtype = np.dtype(values.dtype)
    groups = np.arange(n, dtype=np.int32).reshape([1] * axis + [n] + [1] * (len(shape) - axis))
    ids = ctx.reshape(ids, [int(d) for d in ids.shape[:axis]] + [1] + [int(d) for d in ids.shape[axis:]])
    receives = ctx.emit("EQUAL", [ids, ctx.const(groups, name="groups")],
                        [int(d) for d in ids.shape[:axis]] + [n] + [int(d) for d in ids.shape[axis + 1:]], np.bool_)
    if list(receives.shape) != wide_shape:
        receives = _broadcast(ctx, receives, wide_shape)
    spread = ctx.reshape(values, shape[:axis] + [1] + shape[axis:])
    picked = ctx.emit("SELECT_V2", [receives, spread, ctx.const(_identity(reduce, dtype), name="identity")],
                      wide_shape, dtype)
    axes = ctx.const(np.array([axis + 1], np.int32), name="axes")
    out_shape = shape[:axis] + [n] + shape[axis + 1:]
    out = ctx.emit(_REDUCERS[reduce], [picked, axes], out_shape, dtype, keep_dims=False)
    if dtype.kind == "f" and reduce != "prod":  # the kernels compare past a NaN
        nan = ctx.emit("LOGICAL_AND", [receives, exact.is_nan(ctx, spread)], wide_shape, np.bool_)
        nan = ctx.emit("REDUCE_ANY", [nan, axes], out_shape, np.bool_, keep_dims=False)
        out = ctx.emit("SELECT_V2", [nan, ctx.const(np.array(np.nan, dtype), name="nan"), out], out_shape, dtype)
    return out


def combine(ctx: LoweringContext, a: ir.Tensor, b: ir.Tensor, reduce: str) -> ir.Tensor:
    """a * b, max(a, b) or min(a, b), NaN where either is NaN."""
    options: dict[str, Any] = {"fused_activation_function": "NONE"} if reduce == "prod" else {}
    out = ctx.emit(_COMBINE[reduce], [a, b], a.shape, a.dtype, **options)
    if np.dtype(a.dtype).kind == "f" and reduce != "prod":
        nan = ctx.emit("LOGICAL_OR", [exact.is_nan(ctx, a), exact.is_nan(ctx, b)], a.shape, np.bool_)
        out = ctx.emit("SELECT_V2", [nan, ctx.const(np.array(np.nan, a.dtype), name="nan"), out], a.shape, a.dtype)
    return out


def _work_type(dtype: np.dtype) -> np.dtype:
    """The type a product, maximum or minimum is computed in (REDUCE_* and EQUAL take these)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.dtype(np.float32)
    if dtype in (np.dtype(np.int64), np.dtype(np.int32)):
        return dtype
    return np.dtype(np.int32)  # bool, int8, uint8, int16: products wrap the same way after the cast back


def reduce_write(ctx: LoweringContext, x: ir.Tensor, coords: ir.Tensor, reduced: ir.Tensor, updates_shape,
                 reduce: str, include_self: bool) -> ir.Tensor:
    """`x` with `reduced` (x's shape: each written position's reduction of its updates) at the positions the
    coordinates [*updates_shape, k] name, combined with x's own value where `include_self`."""
    dtype = np.dtype(x.dtype)
    work = _work_type(dtype)
    ones = ctx.emit("FILL", [ctx.const(np.array(updates_shape, np.int32), name="shape"),
                             ctx.const(np.array(1, np.int32), name="one")], list(updates_shape), np.int32)
    count = ctx.emit("SCATTER_ND", [coords, ones, ctx.const(np.array(x.shape, np.int32), name="shape")], x.shape,
                     np.int32)
    hit = ctx.emit("GREATER", [count, ctx.scalar_like(0, count)], x.shape, np.bool_)
    xw = ctx.cast(x, work)
    value = combine(ctx, xw, reduced, reduce) if include_self else reduced
    return ctx.cast(ctx.emit("SELECT_V2", [hit, value, xw], x.shape, work), dtype)


def scatter_grouped(ctx, x, dim, index, src, reduce, include_self) -> ir.Tensor:
    """scatter_reduce with "prod", "amax" or "amin" along `dim` (see the module's notes)."""
    _static(ctx, x, index)
    if x.rank == 0:
        x1, i1 = ctx.reshape(x, [1]), ctx.reshape(index, [1])
        s1 = src if not isinstance(src, ir.Tensor) else ctx.reshape(src, [1])
        return ctx.reshape(scatter_grouped(ctx, x1, 0, i1, s1, reduce, include_self), [])
    if index.rank != x.rank:
        raise ctx.fail(f"scatter with an index of rank {index.rank} into a tensor of rank {x.rank}")
    dim = normalize_dim(dim, x.rank)
    if any(d == 0 for d in index.shape):
        return x
    work = _work_type(x.dtype)
    updates = ctx.cast(_source(ctx, src, index, x.dtype), work)
    n = int(x.shape[dim])
    ids = wrapped(ctx, index, n)
    reduced = grouped(ctx, updates, ids, dim, n, reduce)
    # the index may cover only a leading block of x's other axes: the rest is never written
    pads = [[0, 0 if d == dim else int(x.shape[d]) - int(index.shape[d])] for d in range(x.rank)]
    if any(p[1] for p in pads):
        reduced = ctx.emit("PAD", [reduced, ctx.const(np.array(pads, np.int32), name="paddings")],
                           [int(d) for d in x.shape], work)
    return reduce_write(ctx, x, along_axis(ctx, x, dim, index), reduced, [int(d) for d in index.shape], reduce,
                        include_self)


def nd_grouped(ctx: LoweringContext, x: ir.Tensor, coords: ir.Tensor, columns: list[ir.Tensor], updates: ir.Tensor,
               reduce: str) -> ir.Tensor:
    """ONNX ScatterND with a product, maximum or minimum: the updates [*lead, *slice] grouped by the position
    their coordinates ([*lead, k], one int32 column per leading axis) name among x's first k axes, and combined
    with x's own values there."""
    k = len(columns)
    lead = [int(d) for d in coords.shape[:-1]]
    block = [int(d) for d in x.shape[k:]]
    work = _work_type(x.dtype)
    m, positions, width = int(np.prod(lead)), int(np.prod([int(d) for d in x.shape[:k]])), int(np.prod(block))
    strides = np.cumprod([1] + [int(d) for d in x.shape[1:k]][::-1])[::-1]
    linear = None
    for column, stride in zip(columns, strides):
        part = column if stride == 1 else ctx.emit("MUL", [column, ctx.scalar_like(int(stride), column)],
                                                   like=column, fused_activation_function="NONE")
        linear = part if linear is None else ctx.emit("ADD", [linear, part], like=part,
                                                      fused_activation_function="NONE")
    if linear is None:
        raise ctx.fail("scatter with an index of no columns")
    values = ctx.reshape(ctx.cast(updates, work), [m, width])
    reduced = grouped(ctx, values, ctx.reshape(linear, [m, 1]), 0, positions, reduce)
    reduced = ctx.reshape(reduced, [int(d) for d in x.shape])
    return reduce_write(ctx, x, coords, reduced, [int(d) for d in updates.shape], reduce, True)


@lowers(aten.scatter_reduce.two)
def lower_scatter_reduce(ctx, node, x, dim, index, src, reduce, include_self=True) -> ir.Tensor:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor

    scatter_reduce with reduce "sum", "mean", "prod", "amax" or "amin", with or without x's own values."""
    if reduce in _REDUCERS:
        return scatter_grouped(ctx, x, dim, index, src, reduce, bool(include_self))
    if reduce not in ("sum", "mean"):
        raise ctx.fail(f"scatter_reduce with reduce={reduce!r} is not one PyTorch defines")
    return _scatter(ctx, node, x, dim, index, src, "add" if reduce == "sum" else "mean", bool(include_self))


@lowers(aten.scatter.reduce, aten.scatter.value_reduce)
def lower_scatter_with_reduce(ctx, node, x, dim, index, src, reduce) -> ir.Tensor:
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor

    scatter with reduce "add" (as scatter_add) or "multiply" (a product with x's own values)."""
    if reduce == "add":
        return _scatter(ctx, node, x, dim, index, src, "add")
    if reduce == "multiply":
        return scatter_grouped(ctx, x, dim, index, src, "prod", True)
    raise ctx.fail(f"scatter with reduce={reduce!r} is not one PyTorch defines (add, multiply)")


@lowers(aten.index_reduce.default)
def lower_index_reduce(ctx, node, x, dim, index, source, reduce, include_self=True) -> ir.Tensor:
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor

    index_reduce: source's slices along `dim` reduced into x at the positions the 1-D index names ("prod",
    "mean", "amax", "amin"), a scatter along `dim` with the index repeated over the other axes."""
    _static(ctx, x, index, source)
    if x.rank == 0:
        return ctx.reshape(lower_index_reduce(ctx, node, ctx.reshape(x, [1]), 0, ctx.reshape(index, [1]),
                                              ctx.reshape(source, [1]), reduce, include_self), [])
    dim = normalize_dim(dim, x.rank)
    if index.rank > 1:
        raise ctx.fail(f"index_reduce with an index of rank {index.rank} (it takes a 1-D index)")
    shape = [int(d) for d in source.shape]
    if source.rank != x.rank:
        raise ctx.fail(f"index_reduce of a source of rank {source.rank} into a tensor of rank {x.rank}")
    line = ctx.reshape(index, [1] * dim + [int(np.prod([int(d) for d in index.shape]))] + [1] * (x.rank - dim - 1))
    full = _broadcast(ctx, ctx.cast(line, np.int32), shape)
    if reduce == "mean":
        return _scatter(ctx, node, x, dim, full, source, "mean", bool(include_self))
    if reduce not in _REDUCERS:
        raise ctx.fail(f"index_reduce with reduce={reduce!r} is not one PyTorch defines (prod, mean, amax, amin)")
    return scatter_grouped(ctx, x, dim, full, source, reduce, bool(include_self))


@lowers(aten.index_put.default)
def lower_index_put(ctx, node, x, indices, values, accumulate=False) -> ir.Tensor:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor

    x[indices] = values (or += with accumulate) for integer index tensors, broadcast together, with None for
    whole axes: the written region's coordinates (PyTorch's advanced-indexing layout: the index dimensions in
    place of adjacent indexed axes, first when they are apart) built from the indices and from positions, then
    SCATTER_ND.

    A boolean mask over the leading axes (x[mask] = v) is SELECT_V2 of the values and x: values the same for
    every selected row directly, one row of values per selected row gathered by a running count of the selected
    rows (a count other than the values' rows fails the invocation, as PyTorch raises).

    Limits: a boolean mask among other indices (its positions are decided by values)."""
    _, dtype = out_meta(node)
    indices = list(indices) + [None] * (x.rank - len(indices))
    tensors = [(d, t) for d, t in enumerate(indices) if t is not None]
    if not tensors:
        return x
    if len(tensors) == 1 and tensors[0][1].dtype == np.bool_ and tensors[0][0] == 0:
        return _masked_put(ctx, node, x, tensors[0][1], values, accumulate)
    for _, t in tensors:
        if t.dtype == np.bool_:
            raise ctx.fail("index_put with a boolean mask among other indices has no lowering (its positions are "
                           "decided by values)")
    _static(ctx, x, *(t for _, t in tensors))
    dims = [d for d, _ in tensors]
    b = [int(v) for v in broadcast_shapes(*[tuple(t.shape) for _, t in tensors])]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    before = [d for d in range(x.rank) if indices[d] is None and adjacent and d < dims[0]]
    after = [d for d in range(x.rank) if indices[d] is None and d not in before]
    region = [int(x.shape[d]) for d in before] + b + [int(x.shape[d]) for d in after]
    if any(v == 0 for v in region):
        return x
    start = len(before)  # where the index dimensions sit in the region
    if not all_static(values.shape):
        # values whose rows are counted when the model runs (the experts' outputs concatenated): they must
        # fill the region, as PyTorch checks; a RESHAPE to it fails the invocation where they do not
        if values.rank != len(region):
            raise ctx.fail("index_put of values of run-time size that do not span the written region has no "
                           "lowering")
        values = ctx.reshape(values, [region[a] if not isinstance(d, int) else d for a, d in enumerate(values.shape)])
    parts = []
    for d in range(x.rank):
        t = indices[d]
        if t is None:
            axis = before.index(d) if d in before else start + len(b) + after.index(d)
            parts.append(ctx.const(_iota(region, axis), name="positions"))
            continue
        t = wrapped(ctx, t, int(x.shape[d]))
        t = ctx.reshape(t, [1] * (len(b) - t.rank) + list(t.shape)) if t.rank < len(b) else t
        t = ctx.reshape(t, [1] * start + list(t.shape) + [1] * (len(region) - start - len(b)))
        parts.append(_broadcast(ctx, t, region))
    updates = _broadcast(ctx, ctx.cast(values, x.dtype), region)
    return ctx.cast(write(ctx, x, _stack(ctx, parts, region), updates, "add" if accumulate else "set"), dtype)


def _masked_put(ctx, node, x, mask, values, accumulate):
    """x[mask] = values (or +=) for a mask over x's leading axes and values that are the same for every
    selected row: SELECT_V2 by the mask, broadcast over the remaining axes."""
    _, dtype = out_meta(node)
    k = mask.rank
    if tuple(mask.shape) != tuple(x.shape[:k]):
        raise ctx.fail(f"index_put with a mask of shape {list(mask.shape)} for a tensor of shape {list(x.shape)}")
    row = [int(d) for d in x.shape[k:]]
    shape = [int(d) for d in values.shape]
    if len(shape) > len(row):  # a leading axis over the selected rows
        if len(shape) == len(row) + 1 and shape[0] != 1:
            return _put_rows(ctx, x, mask, values, accumulate, dtype)
        if any(d != 1 for d in shape[:len(shape) - len(row)]):
            raise ctx.fail(f"index_put with a boolean mask and values of shape {shape} for rows of shape {row}")
        values = ctx.reshape(values, shape[len(shape) - len(row):])
    values = ctx.cast(values, x.dtype)
    if values.rank:
        values = ctx.reshape(values, [1] * k + [int(d) for d in values.shape])
    cond = ctx.reshape(mask, [int(d) for d in mask.shape] + [1] * len(row))
    if accumulate:
        added = ctx.emit("ADD", [x, values], x.shape, x.dtype, fused_activation_function="NONE")
        return ctx.cast(ctx.emit("SELECT_V2", [cond, added, x], x.shape, x.dtype), dtype)
    return ctx.cast(ctx.emit("SELECT_V2", [cond, values, x], x.shape, x.dtype), dtype)


def _broadcast_dims(ctx: LoweringContext, t: ir.Tensor, shape: list) -> ir.Tensor:
    """`t` broadcast to `shape`, whose sizes may be dynamic."""
    if all_static(shape):
        return _broadcast(ctx, t, [int(d) for d in shape])
    if list(t.shape) == list(shape):
        return t
    if t.rank < len(shape):
        t = ctx.reshape(t, [1] * (len(shape) - t.rank) + list(t.shape))
    return ctx.emit("BROADCAST_TO", [t, ctx.dims_tensor(shape)], shape, t.dtype)


def _row_mask(ctx: LoweringContext, mask: ir.Tensor, rank: int) -> ir.Tensor:
    """What decides `mask` (of rank `rank`): the tensor a BROADCAST_TO expanded into it (as
    `mask.unsqueeze(-1).expand_as(x)` makes), else the mask itself."""
    if mask.rank < rank:
        mask = ctx.reshape(mask, [1] * (rank - mask.rank) + list(mask.shape))
    for op in reversed(ctx.graph.ops):
        if mask in op.outputs:
            if op.opcode == "BROADCAST_TO" and op.input(0).rank == rank:
                return op.input(0)
            break
    return mask


def scatter_rows(ctx: LoweringContext, x: ir.Tensor, rows: ir.Tensor, source: ir.Tensor,
                 exact_count: bool = False, accumulate: bool = False) -> ir.Tensor:
    """x [P, R] with its selected rows (`rows` bool [P]) replaced, in order, by the rows of `source` [K, R]
    (or with them added, `accumulate`): the i-th selected row takes source row i (a running count of the
    selected rows, then GATHER). More selected rows than K makes GATHER fail the invocation, as PyTorch raises;
    with `exact_count`, so do fewer."""
    def i32(opcode, a, b, shape):
        return ctx.emit(opcode, [a, b], shape, np.int32, fused_activation_function="NONE")

    count = ctx.emit("CUMSUM", [ctx.cast(rows, np.int32), ctx.const(np.array(0, np.int32), name="axis")],
                     rows.shape, np.int32, exclusive=False, reverse=False)
    index = i32("SUB", count, ctx.scalar_like(1, count), count.shape)  # the source row each selected row takes
    k = source.shape[0]
    padded = not (isinstance(k, int) and k > 0)
    k_t = ctx.size_tensor(k)
    if padded:
        # a source that may have no rows gets a row of zeros, so that the unselected rows have a row to read;
        # a selected row past the source steps over it, so that GATHER still fails the invocation
        pad = ctx.const(np.zeros((1, *[int(d) for d in source.shape[1:]]), np.dtype(source.dtype)), name="pad")
        source = ctx.emit("CONCATENATION", [source, pad], [k + 1, *source.shape[1:]], source.dtype, axis=0,
                          fused_activation_function="NONE")
        past = ctx.emit("GREATER_EQUAL", [index, k_t], index.shape, np.bool_)
        index = i32("ADD", index, ctx.cast(past, np.int32), index.shape)
    if exact_count:
        # every index is moved past the source (and its pad row) unless the count of selected rows is K
        total = ctx.slice(count, [count.shape[0] - 1], [1])
        off = ctx.emit("ABS", [i32("SUB", total, k_t, [1])], [1], np.int32)
        index = i32("ADD", index, i32("MUL", off, i32("ADD", k_t, ctx.const(np.array([1], np.int32), name="one"),
                                                       [1]), [1]), index.shape)
    index = ctx.emit("SELECT_V2", [rows, index, ctx.scalar_like(0, index)], like=index)  # unselected: any row
    gathered = ctx.emit("GATHER", [source, index], [rows.shape[0], *source.shape[1:]], source.dtype, axis=0,
                        batch_dims=0)
    if accumulate:
        gathered = (ctx.emit("LOGICAL_OR", [gathered, x], x.shape, x.dtype) if np.dtype(x.dtype) == np.bool_ else
                    ctx.emit("ADD", [gathered, x], x.shape, x.dtype, fused_activation_function="NONE"))
    keep = ctx.reshape(rows, [rows.shape[0]] + [1] * (x.rank - 1))
    return ctx.emit("SELECT_V2", [keep, gathered, x], x.shape, x.dtype)


@lowers(aten.masked_scatter.default)
def lower_masked_scatter(ctx, node, x, mask, source) -> ir.Tensor:
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor

    x with the positions where `mask` is True (mask and x broadcast together) taking the elements of
    `source` in order: the selected rows counted (CUMSUM) and gathered from `source` (`scatter_rows`). A mask
    made by expanding a per-row mask over the last axes (a vision-language model's image-token mask,
    `mask.unsqueeze(-1).expand_as(embeds)`) selects whole rows, gathered as rows; else each element is one row.
    More selected elements than `source` has fails the invocation, as PyTorch raises."""
    out_shape, dtype = out_meta(node)
    shape = list(out_shape)
    rank = len(shape)
    base = _row_mask(ctx, mask, rank)
    k = rank
    while k > 0 and base.shape[k - 1] == 1:
        k -= 1
    row, size, lead = 1, 1, 1
    for d in shape[k:]:
        row = row * d
    for d in source.shape:
        size = size * d
    if not (isinstance(row, int) and row > 0 and isinstance(size, int) and size % row == 0):
        base, k, row = _broadcast_dims(ctx, mask, shape), rank, 1
    for d in shape[:k]:
        lead = lead * d
    rows = ctx.reshape(_broadcast_dims(ctx, ctx.reshape(base, list(base.shape[:k])), shape[:k]), [lead])
    xb = ctx.reshape(_broadcast_dims(ctx, ctx.cast(x, dtype), shape), [lead, row])
    src = ctx.reshape(ctx.cast(source, dtype), [size // row if isinstance(size, int) else size, row])
    out = scatter_rows(ctx, xb, rows, src)
    return ctx.reshape(out, shape)


def _put_rows(ctx, x, mask, values, accumulate, dtype):
    """x[mask] = values (or +=) with one row of values per selected row, in order (`scatter_rows`); a count
    of selected rows other than the values' fails the invocation, as PyTorch raises."""
    k = mask.rank
    lead, row = 1, 1
    for d in x.shape[:k]:
        lead = lead * d
    for d in x.shape[k:]:
        row = row * d
    if not isinstance(row, int):
        raise ctx.fail("index_put with a boolean mask over rows of dynamic size has no lowering")
    n = values.shape[0]
    values = _broadcast_dims(ctx, ctx.cast(values, x.dtype), [n, *x.shape[k:]])
    out = scatter_rows(ctx, ctx.reshape(x, [lead, row]), ctx.reshape(mask, [lead]), ctx.reshape(values, [n, row]),
                       exact_count=True, accumulate=accumulate)
    return ctx.cast(ctx.reshape(out, list(x.shape)), dtype)


@lowers(aten.diagonal_scatter.default)
def lower_diagonal_scatter(ctx, node, x, src, offset=0, dim1=0, dim2=1) -> ir.Tensor:
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor

    x with its `offset` diagonal over (dim1, dim2) replaced by src (the other axes, then the diagonal): src
    written by SCATTER_ND at constant coordinates."""
    _static(ctx, x, src)
    rank = x.rank
    d1, d2 = normalize_dim(dim1, rank), normalize_dim(dim2, rank)
    n1, n2 = int(x.shape[d1]), int(x.shape[d2])
    length = max(0, min(n1, n2 - offset) if offset >= 0 else min(n1 + offset, n2))
    if length == 0:
        return x
    others = [d for d in range(rank) if d not in (d1, d2)]
    grid = np.indices([int(x.shape[d]) for d in others] + [length]).reshape(len(others) + 1, -1).T
    coords = np.zeros((grid.shape[0], rank), np.int32)
    for j, d in enumerate(others):
        coords[:, d] = grid[:, j]
    k = grid[:, -1]
    coords[:, d1] = k + (0 if offset >= 0 else -offset)
    coords[:, d2] = k + (offset if offset >= 0 else 0)
    updates = ctx.reshape(ctx.cast(src, x.dtype), [grid.shape[0]])
    return write(ctx, x, ctx.const(coords, name="coords"), updates, "set")


@lowers(aten.as_strided_scatter.default)
def lower_as_strided_scatter(ctx, node, x, src, size, stride, storage_offset=None) -> ir.Tensor:
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor

    x with the strided view (size, stride, storage_offset over its contiguous elements) replaced by src:
    SCATTER_ND of the flattened tensor at the view's element positions. Positions the view reaches more than
    once get the mean of their values (PyTorch leaves them undefined)."""
    _static(ctx, x, src)
    total = int(np.prod([int(d) for d in x.shape]))
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    offset = int(storage_offset or 0)
    grid = np.indices(size).reshape(len(size), -1) if size else np.zeros((0, 1), np.int64)
    flat = offset + (np.asarray(stride).reshape(-1, 1) * grid).sum(axis=0) if size else np.array([offset])
    if flat.size and (flat.min() < 0 or flat.max() >= total):
        raise ctx.fail(f"as_strided_scatter view (size {size}, stride {stride}, offset {offset}) reaches outside "
                       f"the tensor's {total} elements")
    if flat.size == 0:
        return x
    whole = ctx.reshape(x, [total])
    updates = ctx.reshape(ctx.cast(src, x.dtype), [int(flat.size)])
    out = write(ctx, whole, ctx.const(flat.astype(np.int32).reshape(-1, 1), name="coords"), updates, "set")
    return ctx.reshape(out, list(x.shape))
