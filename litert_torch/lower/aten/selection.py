"""Ops whose result has a size the input's values decide: the coordinates of true elements (nonzero, boolean
masks, masked_select), the distinct values (unique, unique_consecutive) and repeat_interleave by counts given
at run time.

Each lowering computes its result with TFLite ops whose output the runtime sizes (WHERE, RANGE); later ops read
that size from the result's shape (`LoweringContext.anchor`). `lower.program` decides which sizes may be
decided by values; `LoweringContext.emit` keeps tensors that may be empty away from the kernels that cannot
take them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.aten.reduce import _sort
from litert_torch.lower.common.registry import LoweringContext, lowers, out_meta
from litert_torch.lower.aten.scatter import _broadcast_dims
from litert_torch.symbolic import all_static, broadcast_shapes

aten = torch.ops.aten


def nonzero_coords(ctx: LoweringContext, cond: ir.Tensor, count: Any) -> ir.Tensor:
    """The coordinates of the true elements of the bool tensor `cond`, in row-major order, as an int32
    [count, rank] tensor: TFLite's WHERE, whose output the model sizes when it runs (`count` is the size
    torch.export gave it; later ops read it from this tensor's shape)."""
    if cond.rank == 0:  # [1, 0] or [0, 0]: whether the one element is true, in the count of rows
        coords = ctx.emit("WHERE", [ctx.reshape(cond, [1])], [count, 1], np.int64)
        ctx.anchor(coords)
        return ctx.slice(ctx.cast(coords, np.int32), [0, 0], [count, 0])
    coords = ctx.emit("WHERE", [cond], [count, cond.rank], np.int64)
    ctx.anchor(coords)
    return ctx.cast(coords, np.int32)


def truth(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """x != 0 as a bool tensor (NaN counts as nonzero, as in PyTorch)."""
    if np.dtype(x.dtype) == np.bool_:
        return x
    return ctx.emit("NOT_EQUAL", [x, ctx.scalar_like(0, x)], x.shape, np.bool_)


@lowers(aten.nonzero.default)
def lower_nonzero(ctx, node, x) -> ir.Tensor:
    """nonzero(Tensor self) -> Tensor

    The coordinates of the nonzero elements, row by row in row-major order (`nonzero_coords`); their count
    is decided when the model runs."""
    shape, _ = out_meta(node)
    return nonzero_coords(ctx, truth(ctx, x), shape[0])


@lowers(aten.masked_select.default)
def lower_masked_select(ctx, node, x, mask) -> ir.Tensor:
    """masked_select(Tensor self, Tensor mask) -> Tensor

    The elements of x where mask (broadcast together) is True, in row-major order: the flattened mask's
    true positions (WHERE) gathered from the flattened x."""
    shape, dtype = out_meta(node)
    full = list(broadcast_shapes(x.shape, mask.shape))
    total = 1
    for d in full:
        total = total * d
    flat_x = ctx.reshape(_broadcast_dims(ctx, ctx.cast(x, dtype), full), [total])
    flat_mask = ctx.reshape(_broadcast_dims(ctx, mask, full), [total])
    coords = nonzero_coords(ctx, flat_mask, shape[0])
    return ctx.emit("GATHER", [flat_x, ctx.reshape(coords, [shape[0]])], shape, dtype, axis=0, batch_dims=0)


def mask_indices(ctx: LoweringContext, node, indices: list) -> list:
    """x[..., mask, ...] as PyTorch reads it: a boolean mask over k axes is the k columns of its true elements'
    coordinates (`nonzero_coords`), one integer index per axis it covers."""
    if not any(t is not None and np.dtype(t.dtype) == np.bool_ for t in indices):
        return list(indices)
    masks = [t for t in indices if t is not None and np.dtype(t.dtype) == np.bool_]
    if len(masks) > 1:
        raise ctx.fail("indexing with more than one boolean mask has no lowering")
    shape, _ = out_meta(node)
    # the indexed axes' result sits where the first index is (the indices being adjacent); its size is the
    # count of true elements, or the count torch.export fixed where the model checks it (torch._check)
    count = shape[next(i for i, t in enumerate(indices) if t is not None)]
    out = []
    for t in indices:
        if t is None or np.dtype(t.dtype) != np.bool_:
            out.append(t)
            continue
        coords = nonzero_coords(ctx, t, count)
        for axis in range(t.rank):
            out.append(ctx.reshape(ctx.slice(coords, [0, axis], [count, 1]), [count]))
    return out


def _unique_groups(ctx: LoweringContext, values: ir.Tensor, count):
    """For a 1-D tensor whose equal values are adjacent: the position of each run's first element ([count]
    int32, WHERE of where the value changes; NaN never equals NaN, so each is a run of its own, as in
    PyTorch), each element's run ([n] int32, a running count of the changes) and each run's length."""
    n = values.shape[0]
    first = ctx.const(np.array([True]), name="first")
    if n == 1:
        new = first
    else:
        changes = ctx.emit("NOT_EQUAL", [ctx.slice(values, [1], [n - 1]), ctx.slice(values, [0], [n - 1])],
                           [n - 1], np.bool_)
        new = ctx.emit("CONCATENATION", [first, changes], [n], np.bool_, axis=0, fused_activation_function="NONE")
    starts = ctx.reshape(nonzero_coords(ctx, new, count), [count])
    run = ctx.emit("CUMSUM", [ctx.cast(new, np.int32), ctx.const(np.array(0, np.int32), name="axis")], [n],
                   np.int32, exclusive=False, reverse=False)
    run = ctx.emit("SUB", [run, ctx.const(np.array(1, np.int32), name="one")], like=run,
                   fused_activation_function="NONE")
    ends = ctx.emit("CONCATENATION", [ctx.slice(starts, [1], [count - 1]), ctx.const(np.array([n], np.int32),
                                                                                    name="length")],
                    [count], np.int32, axis=0, fused_activation_function="NONE")
    lengths = ctx.emit("SUB", [ends, starts], like=starts, fused_activation_function="NONE")
    return starts, run, lengths


def _unique(ctx, node, x, sort: bool, return_inverse: bool, return_counts: bool):
    if not all_static(x.shape):
        raise ctx.fail("unique of a tensor of run-time size has no lowering")
    n = int(np.prod([int(d) for d in x.shape]))
    count = node.outputs[0].shape[0]
    flat = ctx.reshape(x, [n])
    values, order = _sort(ctx, node, flat, 0, False) if sort else (flat, None)
    starts, run, lengths = _unique_groups(ctx, values, count)
    uniques = ctx.emit("GATHER", [values, starts], [count], values.dtype, axis=0, batch_dims=0)
    inverse = counts = ctx.const(np.zeros(0, np.int32), name="unused")
    if return_inverse:
        if order is not None:  # each element's run, put back in the input's order
            run = ctx.emit("SCATTER_ND", [ctx.reshape(order, [n, 1]), run, ctx.const(np.array([n], np.int32),
                                                                                   name="shape")], [n], np.int32)
        inverse = ctx.reshape(run, list(x.shape))
    if return_counts:
        counts = lengths
    return uniques, inverse, counts


@lowers(aten._unique2.default)
def lower_unique(ctx, node, x, sorted=True, return_inverse=False, return_counts=False) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False) -> (Tensor, Tensor, Tensor)

    The distinct values of the flattened input in ascending order (always sorted: PyTorch's order without
    `sorted` is unspecified), their count decided when the model runs: the sort (NaN last, each NaN distinct),
    WHERE of the positions where the value changes, GATHER; the inverse is each element's running count of
    changes scattered back through the sort's permutation, the counts the gaps between the changes."""
    return _unique(ctx, node, x, True, bool(return_inverse), bool(return_counts))


@lowers(aten.unique_consecutive.default)
def lower_unique_consecutive(ctx, node, x, return_inverse=False, return_counts=False, dim=None) -> tuple[ir.Tensor, ir.Tensor, ir.Tensor]:
    """unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None) -> (Tensor, Tensor, Tensor)

    The flattened input with each run of equal values kept once, as `unique` without the sort.

    Limits: `dim`."""
    if dim is not None:
        raise ctx.fail("unique_consecutive along a dim has no lowering")
    return _unique(ctx, node, x, False, bool(return_inverse), bool(return_counts))


@lowers(aten.repeat_interleave.Tensor)
def lower_repeat_interleave_indices(ctx, node, repeats, output_size=None) -> ir.Tensor:
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor

    The index of each output position when position i is repeated repeats[i] times (what
    repeat_interleave(x, repeats) gathers with): output position j takes the number of running totals of
    `repeats` at or below j. The length, the sum of `repeats`, is decided by values (RANGE up to it); a
    duration model's length regulator expands its frames this way.

    Limits: repeats must be 1-D; negative repeats (PyTorch raises) give unspecified indices."""
    shape, dtype = out_meta(node)
    if repeats.rank != 1:
        raise ctx.fail("repeat_interleave with repeats of rank other than 1 has no lowering")
    counts = ctx.cast(repeats, np.int32)
    totals = ctx.emit("CUMSUM", [counts, ctx.const(np.array(0, np.int32), name="axis")], counts.shape, np.int32,
                      exclusive=False, reverse=False)
    if output_size is not None:
        total = ctx.const(np.array(int(output_size), np.int32), name="total")
    else:
        total = ctx.emit("SUM", [counts, ctx.const(np.array([0], np.int32), name="axis")], [], np.int32,
                         keep_dims=False)
    positions = ctx.emit("RANGE", [ctx.const(np.array(0, np.int32), name="start"), total,
                                   ctx.const(np.array(1, np.int32), name="delta")], shape, np.int32)
    n = repeats.shape[0]
    reached = ctx.emit("GREATER_EQUAL", [ctx.reshape(positions, [shape[0], 1]), ctx.reshape(totals, [1, n])],
                       [shape[0], n], np.bool_)
    index = ctx.emit("SUM", [ctx.cast(reached, np.int32), ctx.const(np.array([1], np.int32), name="axis")],
                     shape, np.int32, keep_dims=False)
    return ctx.cast(index, dtype)
