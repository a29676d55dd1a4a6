"""Reductions over dimensions (mean, sum, amax, amin, var), running reductions (sum, product, maximum and minimum
with their indices; `scan_along` also runs math_ops' logcumsumexp), top-k and sort."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import LoweringContext, lowers, normalize_dim, numpy_dtype, out_meta
from litert_torch.symbolic import Sym

aten = torch.ops.aten


def reduce(ctx: LoweringContext, node, opcode: str, x, dim, keepdim: bool, dtype=None) -> ir.Tensor:
    """One reducer op over `dim` (all axes when None or empty), in the node's result dtype."""
    if dtype is None:
        dtype = numpy_dtype(node.outputs[0].dtype)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        axes = list(range(x.rank))
    else:
        axes = sorted({normalize_dim(d, x.rank) for d in ([dim] if isinstance(dim, int) else dim)})
    if x.rank == 0 or not axes:
        return ctx.cast(x, dtype)
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdim else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return ctx.emit(opcode, [ctx.cast(x, dtype), ctx.const(np.array(axes, np.int32), name="axes")], shape, dtype,
                    keep_dims=bool(keepdim))


@lowers(aten.mean.dim)
def lower_mean(ctx, node, x, dim=None, keepdim=False, dtype=None) -> ir.Tensor:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    MEAN over the given dims."""
    return reduce(ctx, node, "MEAN", x, dim, keepdim)


@lowers(aten.mean.default)
def lower_mean_all(ctx, node, x, dtype=None) -> ir.Tensor:
    """mean(Tensor self, *, ScalarType? dtype=None) -> Tensor

    MEAN over all dims."""
    return reduce(ctx, node, "MEAN", x, None, False)


@lowers(aten.sum.dim_IntList)
def lower_sum(ctx, node, x, dim=None, keepdim=False, dtype=None) -> ir.Tensor:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    SUM over the given dims."""
    return reduce(ctx, node, "SUM", x, dim, keepdim)


def extreme(ctx: LoweringContext, node, opcode: str, x, dim, keepdim: bool, dtype=None) -> ir.Tensor:
    """REDUCE_MAX / REDUCE_MIN, NaN wherever the reduced values hold one (the kernels compare past a NaN;
    PyTorch propagates it)."""
    out = reduce(ctx, node, opcode, x, dim, keepdim, dtype)
    if np.dtype(x.dtype).kind != "f" or x.rank == 0:
        return out
    nan = reduce(ctx, node, "REDUCE_ANY", exact.is_nan(ctx, x), dim, keepdim, np.bool_)
    if np.dtype(out.dtype).kind != "f":
        return out
    return ctx.emit("SELECT_V2", [nan, ctx.const(np.array(np.nan, out.dtype), name="nan"), out], like=out)


@lowers(aten.amax.default)
def lower_amax(ctx, node, x, dim=(), keepdim=False) -> ir.Tensor:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor

    REDUCE_MAX over the given dims (NaN propagated)."""
    return extreme(ctx, node, "REDUCE_MAX", x, dim, keepdim)


@lowers(aten.amin.default)
def lower_amin(ctx, node, x, dim=(), keepdim=False) -> ir.Tensor:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor

    REDUCE_MIN over the given dims (NaN propagated)."""
    return extreme(ctx, node, "REDUCE_MIN", x, dim, keepdim)


@lowers(aten.prod.dim_int)
def lower_prod(ctx, node, x, dim, keepdim=False, dtype=None) -> ir.Tensor:
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    REDUCE_PROD over one dim."""
    return reduce(ctx, node, "REDUCE_PROD", x, dim, keepdim)


@lowers(aten.prod.default)
def lower_prod_all(ctx, node, x, dtype=None) -> ir.Tensor:
    """prod(Tensor self, *, ScalarType? dtype=None) -> Tensor

    REDUCE_PROD over every axis."""
    return reduce(ctx, node, "REDUCE_PROD", x, None, False)


@lowers(aten.any.dim, aten.any.dims, aten.any.default)
def lower_any(ctx, node, x, dim=None, keepdim=False) -> ir.Tensor:
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor

    REDUCE_ANY on the input as bool (PyTorch's any of a uint8 tensor is uint8: 0 or 1)."""
    from litert_torch.lower.aten.elementwise import as_bool

    y = reduce(ctx, node, "REDUCE_ANY", as_bool(ctx, x), dim, keepdim, np.bool_)
    return ctx.cast(y, out_meta(node)[1])


@lowers(aten.max.default)
def lower_max_all(ctx, node, x) -> ir.Tensor:
    """max(Tensor self) -> Tensor

    REDUCE_MAX over all dims (NaN propagated)."""
    return extreme(ctx, node, "REDUCE_MAX", x, None, False)


@lowers(aten.min.default)
def lower_min_all(ctx, node, x) -> ir.Tensor:
    """min(Tensor self) -> Tensor

    REDUCE_MIN over all dims (NaN propagated)."""
    return extreme(ctx, node, "REDUCE_MIN", x, None, False)


def arg_reduce(ctx: LoweringContext, opcode: str, x, dim, keepdim: bool, out_shape) -> ir.Tensor:
    """ARG_MAX / ARG_MIN (int32 indices) along one axis; dim=None reduces the flattened tensor."""
    if dim is None or x.rank == 0:  # TFLite's ARG_MAX / ARG_MIN take rank 1 and up
        x, axis = ctx.reshape(x, [x.size]), 0
    else:
        axis = normalize_dim(dim, x.rank)
    reduced = [d for i, d in enumerate(x.shape) if i != axis]
    axis_t = ctx.const(np.array([axis], np.int32), name="axis")
    y = ctx.emit(opcode, [x, axis_t], reduced, np.int32, output_type="INT32")
    if np.dtype(x.dtype).kind == "f":
        # PyTorch counts NaN as the extreme: the first NaN's index wherever there is one
        nan = exact.is_nan(ctx, x)
        flags = ctx.emit("SELECT_V2", [nan, ctx.const(np.array(1, np.int32), name="one"),
                                       ctx.const(np.array(0, np.int32), name="zero")], x.shape, np.int32)
        first = ctx.emit("ARG_MAX", [flags, axis_t], reduced, np.int32, output_type="INT32")
        any_nan = ctx.emit("REDUCE_ANY", [nan, axis_t], reduced, np.bool_, keep_dims=False)
        y = ctx.emit("SELECT_V2", [any_nan, first, y], reduced, np.int32)
    return ctx.reshape(y, out_shape)


@lowers(aten.argmax.default)
def lower_argmax(ctx, node, x, dim=None, keepdim=False) -> ir.Tensor:
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor

    ARG_MAX; ties resolve to the first index, and a NaN is the maximum, as in PyTorch."""
    shape, _ = out_meta(node)
    return arg_reduce(ctx, "ARG_MAX", x, dim, keepdim, shape)


@lowers(aten.argmin.default)
def lower_argmin(ctx, node, x, dim=None, keepdim=False) -> ir.Tensor:
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor

    ARG_MIN; ties resolve to the first index, and a NaN is the minimum, as in PyTorch."""
    shape, _ = out_meta(node)
    return arg_reduce(ctx, "ARG_MIN", x, dim, keepdim, shape)


@lowers(aten.max.dim)
def lower_max_dim(ctx, node, x, dim, keepdim=False) -> tuple[ir.Tensor, ir.Tensor]:
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    (values, indices): REDUCE_MAX and ARG_MAX along `dim` (a NaN is the maximum, as in PyTorch)."""
    values = extreme(ctx, node, "REDUCE_MAX", x, dim, keepdim, x.dtype)
    return values, arg_reduce(ctx, "ARG_MAX", x, dim, keepdim, values.shape)


@lowers(aten.min.dim)
def lower_min_dim(ctx, node, x, dim, keepdim=False) -> tuple[ir.Tensor, ir.Tensor]:
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    (values, indices): REDUCE_MIN and ARG_MIN along `dim` (a NaN is the minimum, as in PyTorch)."""
    values = extreme(ctx, node, "REDUCE_MIN", x, dim, keepdim, x.dtype)
    return values, arg_reduce(ctx, "ARG_MIN", x, dim, keepdim, values.shape)


@lowers(aten.cumsum.default)
def lower_cumsum(ctx, node, x, dim, dtype=None) -> ir.Tensor:
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    CUMSUM along `dim` (inclusive, forward)."""
    shape, out_dtype = out_meta(node)
    axis = normalize_dim(dim, x.rank) if x.rank else 0
    return ctx.emit("CUMSUM", [ctx.cast(x, out_dtype), ctx.const(np.array(axis, np.int32), name="axis")], shape,
                    out_dtype, exclusive=False, reverse=False)


def scan_along(ctx: LoweringContext, states: list[ir.Tensor], axis: int, fills: list[Any],
               combine: Callable[[list[ir.Tensor], list[ir.Tensor]], list[ir.Tensor]],
               exclusive: bool = False, reverse: bool = False) -> list[ir.Tensor]:
    """An inclusive (or exclusive) running reduction along a static axis by doubling steps: after step k every
    position holds the combination of the 2**k positions ending at it. `states` are tensors of one shape
    carried together (a value and its index), `fills` their identities (what PADV2 puts in front), and
    `combine(earlier, later)` an associative combination of two runs' states."""
    x = states[0]
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ctx.fail("a running reduction along a dynamic axis has no lowering")
    flip = ctx.const(np.array([axis], np.int32), name="axis")
    if reverse:
        states = [ctx.emit("REVERSE_V2", [t, flip], like=t) for t in states]
    pads = [ctx.const(np.array(f, t.dtype), name="identity") for t, f in zip(states, fills)]

    def shifted(t, pad, k):  # t moved k positions along the axis, the identity in front
        paddings = np.zeros((x.rank, 2), np.int32)
        paddings[axis, 0] = k
        padded_shape = list(t.shape)
        padded_shape[axis] = n + k
        padded = ctx.emit("PADV2", [t, ctx.const(paddings, name="paddings"), pad], padded_shape, t.dtype)
        return ctx.slice(padded, [0] * x.rank, list(t.shape))

    if exclusive:
        states = [shifted(t, pad, 1) for t, pad in zip(states, pads)]
    k = 1
    while k < n:
        states = combine([shifted(t, pad, k) for t, pad in zip(states, pads)], states)
        k *= 2
    if reverse:
        states = [ctx.emit("REVERSE_V2", [t, flip], like=t) for t in states]
    return states


def cumprod_along(ctx: LoweringContext, x: ir.Tensor, axis: int, exclusive: bool, reverse: bool) -> ir.Tensor:
    """The running product along a static axis by doubling steps (`scan_along` of MUL)."""
    def times(earlier, later):
        return [ctx.emit("MUL", [earlier[0], later[0]], like=later[0], fused_activation_function="NONE")]

    return scan_along(ctx, [x], axis, [1], times, exclusive, reverse)[0]


@lowers(aten.cumprod.default)
def lower_cumprod(ctx, node, x, dim, dtype=None) -> ir.Tensor:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    The running product along `dim` by log2(n) doubling steps: MUL with a copy shifted by 1, 2, 4, ...
    positions (PADV2 with ones and SLICE)."""
    shape, out_dtype = out_meta(node)
    if x.rank == 0:
        return ctx.cast(x, out_dtype)
    if out_dtype == np.bool_ or out_dtype.kind == "u":
        raise ctx.fail(f"cumprod of {out_dtype} values has no lowering")
    return cumprod_along(ctx, ctx.cast(x, out_dtype), normalize_dim(dim, x.rank), False, False)


def _running_extreme(ctx, node, x, dim, largest: bool):
    """(values, indices) of cummax / cummin: a position takes the later run's extreme where it is NaN, or where
    neither is NaN and it is >= (<=) the earlier one, so ties and repeated NaNs give the last index, as in
    PyTorch; after a NaN the running value stays NaN."""
    dtype, index_dtype = numpy_dtype(node.outputs[0].dtype), numpy_dtype(node.outputs[1].dtype)
    if x.rank == 0:
        return ctx.cast(x, dtype), ctx.const(np.array(0, index_dtype), name="index")
    axis = normalize_dim(dim, x.rank)
    if dtype == np.bool_:
        raise ctx.fail("cummax / cummin of bool values has no lowering")
    work = np.dtype(np.float32) if dtype.kind == "f" else (dtype if dtype == np.int64 else np.dtype(np.int32))
    values = ctx.cast(x, work)
    if work.kind == "f":
        fill = -np.inf if largest else np.inf
    else:
        fill = np.iinfo(work).min if largest else np.iinfo(work).max
    view = [1] * x.rank
    view[axis] = int(x.shape[axis])
    positions = ctx.const(np.broadcast_to(np.arange(view[axis], dtype=np.int32).reshape(view),
                                          [int(d) for d in x.shape]).copy(), name="positions")
    compare = "GREATER_EQUAL" if largest else "LESS_EQUAL"

    def pick(earlier, later):
        take = ctx.emit(compare, [later[0], earlier[0]], later[0].shape, np.bool_)
        if work.kind == "f":
            take = ctx.emit("LOGICAL_OR", [exact.is_nan(ctx, later[0]), ctx.emit(
                "LOGICAL_AND", [ctx.emit("LOGICAL_NOT", [exact.is_nan(ctx, earlier[0])], take.shape, np.bool_), take],
                take.shape, np.bool_)], take.shape, np.bool_)
        return [ctx.emit("SELECT_V2", [take, a, b], like=a) for a, b in zip(later, earlier)]

    best, where = scan_along(ctx, [values, positions], axis, [fill, -1], pick)
    return ctx.cast(best, dtype), ctx.cast(where, index_dtype)


@lowers(aten.cummax.default)
def lower_cummax(ctx, node, x, dim) -> tuple[ir.Tensor, ir.Tensor]:
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)

    (running maximum, its index) along `dim` by doubling steps (NaN propagates; ties give the last index)."""
    return _running_extreme(ctx, node, x, dim, True)


@lowers(aten.cummin.default)
def lower_cummin(ctx, node, x, dim) -> tuple[ir.Tensor, ir.Tensor]:
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)

    (running minimum, its index) along `dim` by doubling steps (NaN propagates; ties give the last index)."""
    return _running_extreme(ctx, node, x, dim, False)


@lowers(aten.topk.default)
def lower_topk(ctx, node, x, k, dim=-1, largest=True, sorted=True) -> tuple[ir.Tensor, ir.Tensor]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)

    TOPK_V2 on the last axis (other axes are moved last and back) of order keys (`order_keys`: NaN above
    everything, -0.0 equal to 0.0, as PyTorch orders them); smallest-k is top-k of the keys reversed
    (-1 - key, which never overflows). Equal values come in index order."""
    if isinstance(k, Sym):  # a k computed from sizes (min(k, count) after a mask): read when the model runs
        return topk_last_axis(ctx, x, normalize_dim(dim, x.rank), ctx.reshape(ctx.size_tensor(k), []), k, largest)
    return topk_last_axis(ctx, x, normalize_dim(dim, x.rank), int(k), int(k), largest)


def order_keys(ctx: LoweringContext, x: ir.Tensor) -> ir.Tensor:
    """int32 keys whose order is PyTorch's order of the values of `x`: a float's bits (BITCAST) with the
    magnitude bits of negative values flipped, so that the integer order is the float order, after -0.0 is
    made 0.0 (they are equal) and every NaN the largest key (PyTorch sorts NaN above +inf); integers and bools
    as int32, or as they are when int64."""
    if x.dtype.kind != "f":
        return x if x.dtype in (np.int32, np.int64) else ctx.cast(x, np.int32)
    f = x if x.dtype in (np.float32, np.float64) else ctx.cast(x, np.float32)  # float64 computes in float32
    zero = ctx.scalar_like(0.0, f)
    f = ctx.emit("SELECT_V2", [ctx.emit("EQUAL", [f, zero], f.shape, np.bool_), zero, f], like=f)
    bits = ctx.emit("BITCAST", [f], f.shape, np.int32)
    flipped = ctx.emit("BITWISE_XOR", [bits, ctx.const(np.array(0x7FFFFFFF, np.int32), name="magnitude_bits")],
                       like=bits)
    negative = ctx.emit("LESS", [bits, ctx.const(np.array(0, np.int32), name="zero")], bits.shape, np.bool_)
    keys = ctx.emit("SELECT_V2", [negative, flipped, bits], like=bits)
    top = ctx.const(np.array(np.iinfo(np.int32).max, np.int32), name="nan_key")
    return ctx.emit("SELECT_V2", [exact.is_nan(ctx, f), top, keys], like=bits)


def topk_last_axis(ctx: LoweringContext, x, axis: int, k, size, largest: bool) -> tuple[ir.Tensor, ir.Tensor]:
    """(values, int32 indices) of the k largest (or smallest) along `axis` in PyTorch's order (NaN largest,
    equal values in index order); `k` an int or an int32 [] tensor read at run time, `size` the result's
    length along the axis (k, or its symbol). The values are read back from `x` at the indices (GATHER)
    unless `x` is its own key."""
    perm = list(range(x.rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    xt = ctx.transpose(x, perm)
    keys = order_keys(ctx, xt)
    if not largest:
        keys = ctx.emit("SUB", [ctx.scalar_like(-1, keys), keys], like=keys, fused_activation_function="NONE")
    shape = [*xt.shape[:-1], size]
    k_t = k if isinstance(k, ir.Tensor) else ctx.const(np.array(k, np.int32), name="k")
    values, indices = ctx.emit_multi("TOPK_V2", [keys, k_t], [(shape, keys.dtype), (shape, np.int32)])
    if keys is not xt or not largest:
        values = ctx.emit("GATHER", [xt, indices], shape, x.dtype, axis=xt.rank - 1, batch_dims=xt.rank - 1)
    return ctx.transpose(values, perm), ctx.transpose(indices, perm)


def _sort(ctx, node, x, dim, descending):
    axis = normalize_dim(dim, x.rank)
    if x.rank == 0:
        return x, ctx.const(np.zeros((), np.int32))
    n = x.shape[axis]
    k = n if isinstance(n, int) else ctx.reshape(ctx.size_tensor(n), [])  # a run-time length: all of it
    return topk_last_axis(ctx, x, axis, k, n, bool(descending))


@lowers(aten.sort.default)
def lower_sort(ctx, node, x, dim=-1, descending=False) -> tuple[ir.Tensor, ir.Tensor]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)

    (values, indices) as top-k of the whole axis (`topk_last_axis`: TOPK_V2 of order keys, values read back
    with GATHER): NaN sorts above +inf, equal values keep their index order (a stable sort)."""
    return _sort(ctx, node, x, dim, descending)


@lowers(aten.sort.stable)
def lower_sort_stable(ctx, node, x, *, stable=None, dim=-1, descending=False) -> tuple[ir.Tensor, ir.Tensor]:
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)

    as aten.sort.default, which is stable already (equal values keep their index order)."""
    return _sort(ctx, node, x, dim, descending)


def _order_statistic(ctx, x: ir.Tensor, axis: int, position) -> tuple[ir.Tensor, ir.Tensor]:
    """(value, int32 index) at `position` of the ascending sort along `axis`, keeping that axis with size 1;
    `position` an int, or a function of the sorted values ([..., n], the axis moved last) giving an int32
    [..., 1] position per row."""
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ctx.fail("an order statistic (median, kthvalue) along an axis of run-time size has no lowering")
    perm = list(range(x.rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    xt = ctx.transpose(x, perm)
    last = xt.rank - 1
    values, indices = topk_last_axis(ctx, xt, last, n, n, False)
    picked = [*xt.shape[:-1], 1]
    if isinstance(position, int):
        value = ctx.slice(values, [0] * last + [position], picked)
        index = ctx.slice(indices, [0] * last + [position], picked)
    else:
        at = position(values)
        value = ctx.emit("GATHER", [values, at], picked, values.dtype, axis=last, batch_dims=last)
        index = ctx.emit("GATHER", [indices, at], picked, np.int32, axis=last, batch_dims=last)
    return ctx.transpose(value, perm), ctx.transpose(index, perm)


def _median_position(ctx: LoweringContext, n: int, ignore_nan: bool):
    """The position in an ascending sort (NaNs last) of the lower median: for median, (n - 1) // 2, or the
    first NaN of a row holding one (NaN propagates); for nanmedian, the lower middle of the values before the
    NaNs, or the first NaN of a row holding nothing else."""
    def position(values: ir.Tensor) -> ir.Tensor:
        nan = ctx.cast(exact.is_nan(ctx, values), np.int32)
        nans = ctx.emit("SUM", [nan, ctx.const(np.array([values.rank - 1], np.int32), name="axis")],
                        [*values.shape[:-1], 1], np.int32, keep_dims=True)
        real = ctx.emit("SUB", [ctx.const(np.array(n, np.int32), name="n"), nans], like=nans,
                        fused_activation_function="NONE")
        zero = ctx.const(np.array(0, np.int32), name="zero")
        if not ignore_nan:
            middle = ctx.const(np.full(nans.shape, (n - 1) // 2, np.int32), name="middle")
            has_nan = ctx.emit("GREATER", [nans, zero], nans.shape, np.bool_)
            return ctx.emit("SELECT_V2", [has_nan, real, middle], like=nans)
        below = ctx.emit("SUB", [real, ctx.const(np.array(1, np.int32), name="one")], like=nans,
                         fused_activation_function="NONE")
        below = ctx.emit("MAXIMUM", [below, zero], like=nans)
        return ctx.emit("FLOOR_DIV", [below, ctx.const(np.array(2, np.int32), name="two")], like=nans)
    return position


def _median(ctx, node, x, dim, keepdim: bool, ignore_nan: bool):
    """(value, index) of the lower median along `dim`, or the value alone over every element (dim None)."""
    shape = node.outputs[0].shape
    whole = dim is None
    if whole or x.rank == 0:
        x = ctx.reshape(x, [int(np.prod([int(d) for d in x.shape]))]) if x.rank != 1 else x
        dim = 0
    axis = normalize_dim(dim, x.rank)
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ctx.fail("a median along an axis of run-time size has no lowering")
    position = _median_position(ctx, n, ignore_nan) if x.dtype.kind == "f" else (n - 1) // 2
    value, index = _order_statistic(ctx, x, axis, position)
    if whole:
        return ctx.reshape(value, shape)
    return ctx.reshape(value, shape), ctx.cast(ctx.reshape(index, shape), numpy_dtype(node.outputs[1].dtype))


@lowers(aten.kthvalue.default)
def lower_kthvalue(ctx, node, x, k, dim=-1, keepdim=False) -> tuple[ir.Tensor, ir.Tensor]:
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    (value, index) of the k-th smallest along `dim`: position k - 1 of the ascending sort (`topk_last_axis`,
    NaN largest). Among equal values the index may be another of theirs than PyTorch's, which leaves it
    unspecified."""
    shape = node.outputs[0].shape
    if x.rank == 0:
        x = ctx.reshape(x, [1])
    axis = normalize_dim(dim, x.rank)
    n = x.shape[axis]
    if not isinstance(n, int) or not 1 <= int(k) <= n:
        raise ctx.fail(f"kthvalue with k={k} along an axis of size {n}")
    value, index = _order_statistic(ctx, x, axis, int(k) - 1)
    return ctx.reshape(value, shape), ctx.cast(ctx.reshape(index, shape), numpy_dtype(node.outputs[1].dtype))


@lowers(aten.median.dim)
def lower_median_dim(ctx, node, x, dim=-1, keepdim=False) -> tuple[ir.Tensor, ir.Tensor]:
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    (value, index) of the lower median along `dim`: position (n - 1) // 2 of the ascending sort, or the first
    NaN of a row holding one (NaN propagates). Among equal values the index may be another of theirs than
    PyTorch's, which leaves it unspecified."""
    return _median(ctx, node, x, dim, keepdim, False)


@lowers(aten.nanmedian.dim)
def lower_nanmedian_dim(ctx, node, x, dim=-1, keepdim=False) -> tuple[ir.Tensor, ir.Tensor]:
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    (value, index) of the lower median of the values other than NaN along `dim` (NaN where a row holds
    nothing else), read from the ascending sort at a position computed per row (GATHER)."""
    return _median(ctx, node, x, dim, keepdim, True)


@lowers(aten.median.default)
def lower_median(ctx, node, x) -> ir.Tensor:
    """median(Tensor self) -> Tensor

    The lower median of all values (NaN if any is NaN), from the sort of the flattened tensor."""
    return _median(ctx, node, x, None, False, False)


@lowers(aten.nanmedian.default)
def lower_nanmedian(ctx, node, x) -> ir.Tensor:
    """nanmedian(Tensor self) -> Tensor

    The lower median of all values other than NaN (NaN if there are none), from the sort of the flattened
    tensor."""
    return _median(ctx, node, x, None, False, True)


@lowers(aten.var.correction)
def lower_var(ctx, node, x, dim=None, *, correction=None, keepdim=False) -> ir.Tensor:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor

    MEAN, SUB, MUL, MEAN: the mean squared deviation times n / (n - correction). A float16 input is computed
    in float32 and the result rounded once, as PyTorch does (the squares of float16 values overflow it)."""
    correction = 1 if correction is None else correction
    shape, dtype = out_meta(node)
    axes = list(range(x.rank)) if dim is None else sorted({normalize_dim(d, x.rank) for d in
                                                           ([dim] if isinstance(dim, int) else dim)})
    count = int(np.prod([x.shape[a] for a in axes]))
    wide = np.dtype(np.float32) if dtype == np.float16 else dtype
    x = ctx.cast(x, wide)
    axes_t = ctx.const(np.array(axes, np.int32), name="axes")
    mean = ctx.emit("MEAN", [x, axes_t], [1 if i in axes else d for i, d in enumerate(x.shape)], wide, keep_dims=True)
    dev = ctx.emit("SUB", [x, mean], like=x)
    sq = ctx.emit("MUL", [dev, dev], like=x)
    msd = ctx.emit("MEAN", [sq, axes_t], shape, wide, keep_dims=bool(keepdim))
    scale = count / (count - correction) if count > correction else float("inf")
    return ctx.cast(ctx.emit("MUL", [msd, ctx.scalar_like(scale, msd)], like=msd), dtype)


# ---- searching sorted sequences ----------------------------------------------------------------------------
_SEARCH_LIMIT = 1 << 24


def _insertion_points(ctx: LoweringContext, node, seq: ir.Tensor, values: ir.Tensor, right: bool,
                      batched: bool) -> ir.Tensor:
    """For each value, how many entries of the sorted `seq` go before it: the entries b with NOT(b >= v) (left)
    or NOT(v < b) (right), counted. NaN goes after everything, as in PyTorch. `batched`: seq [..., M] and values
    [..., K] share their leading axes; else seq is 1-D and values any shape."""
    shape, dtype = out_meta(node)
    m = int(seq.shape[-1])
    wide = np.dtype(np.float32) if np.dtype(seq.dtype).kind == "f" or np.dtype(values.dtype).kind == "f" \
        else np.dtype(np.int64 if np.dtype(np.int64) in (seq.dtype, values.dtype) else np.int32)
    seq, values = ctx.cast(seq, wide), ctx.cast(values, wide)
    if values.rank == 0:
        values = ctx.reshape(values, (1,))
    v = ctx.reshape(values, [*values.shape, 1])
    s = seq if not batched else ctx.reshape(seq, [*seq.shape[:-1], 1, m])
    grid = [*values.shape, m]
    if int(np.prod([int(d) for d in grid])) > _SEARCH_LIMIT:
        raise ctx.fail(f"a search of {int(np.prod([int(d) for d in values.shape]))} values in {m} entries "
                       "(over 2**24 comparisons) has no lowering")
    before = (ctx.emit("GREATER_EQUAL", [s, v], grid, np.bool_) if not right
              else ctx.emit("LESS", [v, s], grid, np.bool_))
    after = ctx.cast(ctx.emit("LOGICAL_NOT", [before], grid, np.bool_), np.int32)
    count = ctx.emit("SUM", [after, ctx.const(np.array([len(grid) - 1], np.int32), name="axis")],
                     list(values.shape), np.int32, keep_dims=False)
    return ctx.cast(ctx.reshape(count, shape), dtype)


@lowers(aten.bucketize.Tensor)
def lower_bucketize(ctx, node, x, boundaries, *, out_int32=False, right=False) -> ir.Tensor:
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor

    The bucket of each value among sorted 1-D boundaries: a comparison with every boundary, counted (NaN in
    the last bucket). Refused above 2**24 comparisons."""
    return _insertion_points(ctx, node, boundaries, x, bool(right), False)


@lowers(aten.searchsorted.Tensor)
def lower_searchsorted(ctx, node, seq, values, *, out_int32=False, right=False, side=None, sorter=None) -> ir.Tensor:
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor

    Insertion points of values in a sorted sequence (1-D, or batched over leading axes): a comparison with
    every entry, counted. Limits: a `sorter` permutation."""
    if sorter is not None:
        raise ctx.fail("searchsorted with a sorter permutation has no lowering")
    right = bool(right) or side == "right"
    return _insertion_points(ctx, node, seq, values, right, seq.rank > 1)
