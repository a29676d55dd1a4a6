"""ONNX ops whose shape parameters are computed when the model runs.

A Reshape whose target shape, a Slice whose starts, a reduction whose axes are run-time values has an output
shape that no conversion-time reasoning can know: it is decided by values. These nodes still lower, because
the TFLite kernels take those parameters as tensors (RESHAPE's shape, STRIDED_SLICE's begin/end/strides, SUM's
axes, PAD's paddings, SPLIT_V's sizes, TILE's multiples, BROADCAST_TO's shape) and size their outputs when they
run. Each entry here has two halves:

- a shape rule: the output shapes over sizes from `SymSpace.fresh` (a rank that the parameter's length fixes,
  sizes that stay known where the values cannot change them, a fresh size with its range elsewhere), which
  the frontend gives the node's contract before lowering; later nodes see those sizes as any dynamic size, and
  read them at run time from the SHAPE of the tensor that first holds them;
- a lowering that computes, with integer ops in the model, exactly the parameters TFLite's kernel needs from
  the ONNX ones (ONNX's 0 in a Reshape target copies the input's size, TFLite's does not; ONNX pads are
  [begins..., ends...] and may be negative, TFLite's paddings are [rank, 2] and may not).

A parameter whose length is not static, or an op variant with no run-time form (edge and wrap padding), is
refused with an error naming the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from litert_torch import ir
from litert_torch.lower.onnx.registry import OPSETS_GROUP, operand, set_fact, tensor
from litert_torch.lower.common.registry import LoweringContext
from litert_torch.symbolic import DynamicSizeError, Sym

INT32_MAX = 2**31 - 1

Fresh = Callable[..., Any]  # fresh(what, low=0, high=None) -> int | Sym
ShapeRule = Callable[[list, dict, int, set, Fresh], list]


@dataclass(frozen=True)
class RuntimeShaped:
    """Parameter inputs that may be computed at run time (`inputs`), the rule for the outputs' shapes then, the
    lowering, and what it computes (for docs/COVERAGE.md)."""

    inputs: frozenset
    shapes: ShapeRule
    lower: Callable
    doc: str


def runtime_shaped(*ops: str, inputs: set[int], shapes: ShapeRule, doc: str | None = None) -> Callable:
    """Register `fn` as the lowering of `ops` when one of their parameter `inputs` is computed at run time, with
    `shapes` giving the outputs' shapes over new sizes; `doc` defaults to the first paragraph of its docstring
    after the line naming the ops and opsets of a lowering registered with `onnx_op` too."""

    def register(fn: Callable) -> Callable:
        paragraphs = (fn.__doc__ or "").strip().split("\n\n")
        if len(paragraphs) > 1 and OPSETS_GROUP.match(paragraphs[0]):
            paragraphs = paragraphs[1:]
        said = doc or " ".join(paragraphs[0].split())
        for op in ops:
            set_fact(op, "runtime_shaped", RuntimeShaped(frozenset(inputs), shapes, fn, said), "runtime_shaped")
        return fn
    return register


def at_run_time(value: Any) -> bool:
    return isinstance(value, ir.Tensor) and not value.is_constant


# ---- helpers for shape rules ----------------------------------------------------------------------------------
def _shape(value: Any) -> tuple:
    return tuple(value.shape) if isinstance(value, np.ndarray) else tuple(value)


def _length(described: Any, what: str) -> int:
    """The static length of a 1-D run-time parameter (its described shape)."""
    shape = _shape(described)
    if len(shape) > 1 or any(isinstance(d, Sym) for d in shape):
        raise DynamicSizeError(f"{what} must be a 1-D tensor of a static length")
    return int(shape[0]) if shape else 1


def _span(sizes: list) -> tuple[int, int | None]:
    """The smallest and largest of some candidate sizes (None above when one of them is unbounded)."""
    lows, highs = [], []
    for d in sizes:
        if isinstance(d, Sym):
            lo, hi = d.space.bounds(d.expr)
            lows.append(int(max(lo, 0)))
            highs.append(None if hi == float("inf") else int(hi))
        else:
            lows.append(int(d))
            highs.append(int(d))
    known = [h for h in highs if h is not None]
    return min(lows), (max(known) if len(known) == len(highs) else None)


def _numel(shape: tuple) -> int | None:
    if any(isinstance(d, Sym) for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _axes_values(value: Any, rank: int) -> list[int] | None:
    """Constant axes as non-negative ints, None when they are a run-time tensor."""
    if value is None or isinstance(value, tuple):
        return None
    return [int(a) % max(rank, 1) for a in np.asarray(value).reshape(-1)]


# ---- helpers for lowerings ------------------------------------------------------------------------------------
def _i32(ctx: LoweringContext, t: ir.Tensor) -> ir.Tensor:
    if t.is_constant:
        return ctx.const(np.asarray(t.data).astype(np.int64).clip(-2**31, INT32_MAX).astype(np.int32))
    return ctx.cast(t, np.int32)


def _flat(ctx: LoweringContext, t: ir.Tensor, n: int) -> ir.Tensor:
    return ctx.reshape(_i32(ctx, t), [n])


def _const_i32(ctx: LoweringContext, values, name: str = "const") -> ir.Tensor:
    return ctx.const(np.asarray(values, np.int32), name=name)


def _binary(ctx: LoweringContext, opcode: str, a: ir.Tensor, b: ir.Tensor, shape=None, dtype=None) -> ir.Tensor:
    opts: dict[str, Any] = {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL") else {}
    shape = a.shape if shape is None else shape
    return ctx.emit(opcode, [a, b], shape, a.dtype if dtype is None else dtype, **opts)


def _normalized_axes(ctx: LoweringContext, axes: ir.Tensor, m: int, rank: int) -> ir.Tensor:
    """Axes (int32 [m], possibly negative) as positions in 0..rank-1."""
    return _binary(ctx, "FLOOR_MOD", _flat(ctx, axes, m), _const_i32(ctx, rank, "rank"))


def _membership(ctx: LoweringContext, axes: ir.Tensor, m: int, rank: int) -> ir.Tensor:
    """bool [rank]: which positions `axes` (normalized, [m]) names."""
    column = ctx.reshape(axes, [m, 1])
    eq = _binary(ctx, "EQUAL", column, _const_i32(ctx, np.arange(rank)[None, :], "positions"), (m, rank), np.bool_)
    return ctx.emit("REDUCE_ANY", [eq, _const_i32(ctx, [0], "axis")], (rank,), np.bool_, keep_dims=False)


def _reshape_to(ctx: LoweringContext, node, x: ir.Tensor, shape_t: ir.Tensor) -> ir.Tensor:
    return ctx.emit("RESHAPE", [x, shape_t], node.outputs[0].shape, x.dtype)


# ---- reductions -----------------------------------------------------------------------------------------------
_REDUCERS = {"ReduceSum": "SUM", "ReduceMean": "MEAN", "ReduceMax": "REDUCE_MAX", "ReduceMin": "REDUCE_MIN"}


def _reduce_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    m = _length(inputs[1], "reduction axes")
    if m == 0:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        return [(1,) * len(x) if attrs.get("keepdims", 1) else ()]
    if attrs.get("keepdims", 1):
        return [tuple(1 if d == 1 else fresh("reduced size", *_span([1, d])) for d in x)]
    if m > len(x):
        raise DynamicSizeError(f"{m} reduction axes of a rank-{len(x)} input")
    span = _span(list(x)) if x else (0, None)
    return [tuple(fresh("reduced size", *span) for _ in range(len(x) - m))]


@runtime_shaped(*_REDUCERS, inputs={1}, shapes=_reduce_shapes)
def reduce(ctx, node, inputs, attrs) -> ir.Tensor:
    """SUM / MEAN / REDUCE_MAX / REDUCE_MIN with the axes tensor as the kernel's axis operand (empty axes,
    a static length, reduce every axis or none as `noop_with_empty_axes` says)."""
    if node.op_type == "ReduceMean" and inputs[0].dtype.kind != "f":
        raise ctx.fail("ReduceMean of integers over axes computed at run time has no lowering")
    return reduce_over(ctx, node, inputs[0], inputs[1], attrs, _REDUCERS[node.op_type])


def reduce_over(ctx: LoweringContext, node, x: ir.Tensor, axes: ir.Tensor, attrs, opcode: str, *,
                keep: bool | None = None, shape=None) -> ir.Tensor:
    """`opcode` over the axes in the run-time tensor `axes`, to the node's output shape (ONNX's rules for
    empty axes); `keep` and `shape` override the node's keepdims and output shape."""
    keep = bool(attrs.get("keepdims", 1)) if keep is None else keep
    shape = node.outputs[0].shape if shape is None else shape
    m = axes.shape[0] if axes.rank else 1
    if m == 0:
        if attrs.get("noop_with_empty_axes", 0):
            return x
        axes_t = _const_i32(ctx, np.arange(x.rank), "axes")
    else:
        axes_t = _flat(ctx, axes, m)
    if x.dtype == np.bool_:  # the largest of bools is any, the smallest all
        bool_opcode = {"REDUCE_MAX": "REDUCE_ANY", "REDUCE_MIN": "REDUCE_ALL"}.get(opcode)
        if bool_opcode is None:
            raise ctx.fail(f"{node.op_type} of bool values has no lowering")
        opcode = bool_opcode
    out = ctx.emit(opcode, [x, axes_t], shape, x.dtype, keep_dims=keep)
    if opcode in ("REDUCE_MAX", "REDUCE_MIN") and x.dtype.kind == "f" and _numel(tuple(x.shape)) == 0:
        # no elements: every result is a reduction of none, -inf for max and +inf for min as ONNX defines
        # (the kernels start from the type's lowest or highest finite value)
        value = -np.inf if opcode == "REDUCE_MAX" else np.inf
        out = ctx.emit("FILL", [ctx.shape_of(out), ctx.const(np.array(value, x.dtype), name="value")],
                       shape, x.dtype)
    return out


# ---- Reshape / Squeeze / Unsqueeze ---------------------------------------------------------------------------------
def _reshape_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    m = _length(inputs[1], "the Reshape target")
    total = _numel(x)
    high = None if not total else total
    if m == 0:
        return [()]
    return [tuple(fresh("reshaped size", 0, high) for _ in range(m))]


@runtime_shaped("Reshape", inputs={1}, shapes=_reshape_shapes)
def reshape(ctx, node, inputs, attrs) -> ir.Tensor:
    """RESHAPE to the target computed at run time; a 0 in it copies the input's size there (unless
    `allowzero`), which TFLite's RESHAPE does not do, so the target is rewritten first with SELECT_V2."""
    x, target = inputs[0], inputs[1]
    m = len(node.outputs[0].shape)
    if m == 0:
        return ctx.reshape(x, [])
    shape_t = _flat(ctx, target, m)
    if not attrs.get("allowzero", 0):
        sizes = ctx.shape_of(x)
        if x.rank >= m:
            sizes = ctx.emit("SLICE", [sizes, _const_i32(ctx, [0], "begin"), _const_i32(ctx, [m], "size")],
                             (m,), np.int32)
        else:
            sizes = ctx.emit("CONCATENATION", [sizes, _const_i32(ctx, [1] * (m - x.rank), "ones")] if x.rank else
                             [_const_i32(ctx, [1] * m, "ones")], (m,), np.int32, axis=0,
                             fused_activation_function="NONE")
        zero = _binary(ctx, "EQUAL", shape_t, _const_i32(ctx, 0, "zero"), (m,), np.bool_)
        shape_t = ctx.emit("SELECT_V2", [zero, sizes, shape_t], (m,), np.int32)
    return _reshape_to(ctx, node, x, shape_t)


def _squeeze_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    m = _length(inputs[1], "the Squeeze axes")
    if m > len(x):
        raise DynamicSizeError(f"{m} axes squeezed from a rank-{len(x)} input")
    ones = [i for i, d in enumerate(x) if d == 1]
    if len(ones) == m and all(not isinstance(d, Sym) for d in x):
        return [tuple(d for d in x if d != 1)]  # the squeezed axes must be sizes 1: these are they
    span = _span(list(x)) if x else (0, None)
    return [tuple(fresh("size", *span) for _ in range(len(x) - m))]


@runtime_shaped("Squeeze", inputs={1}, shapes=_squeeze_shapes)
def squeeze(ctx, node, inputs, attrs) -> ir.Tensor:
    """RESHAPE to the input's sizes without the named axes, gathered when the model runs (which axes are kept
    is counted with CUMSUM); a squeezed axis whose size is not 1 fails in the RESHAPE."""
    x, axes = inputs[0], inputs[1]
    out = node.outputs[0].shape
    if all(not isinstance(d, Sym) for d in out):
        return ctx.reshape(x, out)
    r, m = x.rank, axes.shape[0]
    named = _membership(ctx, _normalized_axes(ctx, axes, m, r), m, r)
    kept = ctx.cast(ctx.emit("LOGICAL_NOT", [named], (r,), np.bool_), np.int32)
    counts = ctx.emit("CUMSUM", [kept, _const_i32(ctx, 0, "axis")], (r,), np.int32, exclusive=False, reverse=False)
    k = r - m
    # output position i reads the input position p with counts[p] == i + 1: the number of p with counts[p] <= i
    before = _binary(ctx, "LESS_EQUAL", ctx.reshape(counts, [1, r]),
                     _const_i32(ctx, np.arange(k)[:, None], "positions"), (k, r), np.bool_)
    source = ctx.emit("SUM", [ctx.cast(before, np.int32), _const_i32(ctx, [1], "axis")], (k,), np.int32,
                      keep_dims=False)
    sizes = ctx.emit("GATHER", [ctx.shape_of(x), source], (k,), np.int32, axis=0, batch_dims=0)
    return _reshape_to(ctx, node, x, sizes)


def _unsqueeze_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    m = _length(inputs[1], "the Unsqueeze axes")
    if all(d == 1 for d in x if not isinstance(d, Sym)) and all(not isinstance(d, Sym) for d in x):
        return [(1,) * (len(x) + m)]
    span = _span([1, *x])
    return [tuple(fresh("size", *span) for _ in range(len(x) + m))]


@runtime_shaped("Unsqueeze", inputs={1}, shapes=_unsqueeze_shapes)
def unsqueeze(ctx, node, inputs, attrs) -> ir.Tensor:
    """RESHAPE to the input's sizes with 1s at the named positions, built when the model runs: the i-th
    position not named reads the input's i-th size (counted with CUMSUM)."""
    x, axes = inputs[0], inputs[1]
    out = node.outputs[0].shape
    if all(not isinstance(d, Sym) for d in out):
        return ctx.reshape(x, out)
    r, m = x.rank, axes.shape[0]
    big = r + m
    named = _membership(ctx, _normalized_axes(ctx, axes, m, big), m, big)
    others = ctx.cast(ctx.emit("LOGICAL_NOT", [named], (big,), np.bool_), np.int32)
    counts = ctx.emit("CUMSUM", [others, _const_i32(ctx, 0, "axis")], (big,), np.int32, exclusive=True,
                      reverse=False)
    source = _binary(ctx, "MINIMUM", counts, _const_i32(ctx, r - 1, "last"))
    gathered = ctx.emit("GATHER", [ctx.shape_of(x), source], (big,), np.int32, axis=0, batch_dims=0)
    sizes = ctx.emit("SELECT_V2", [named, _const_i32(ctx, 1, "one"), gathered], (big,), np.int32)
    return _reshape_to(ctx, node, x, sizes)


# ---- Expand / Tile ------------------------------------------------------------------------------------------------
def _expand_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    m = _length(inputs[1], "the Expand shape")
    rank = max(len(x), m)
    padded = (1,) * (rank - len(x)) + x
    # a size other than 1 stays (the shape may only hold 1 or that size there); elsewhere the shape decides
    return [tuple(d if not isinstance(d, Sym) and d != 1 else fresh("expanded size") for d in padded)]


@runtime_shaped("Expand", inputs={1}, shapes=_expand_shapes)
def expand(ctx, node, inputs, attrs) -> ir.Tensor:
    """BROADCAST_TO the two-way broadcast of the input's shape and the given one (BROADCAST_ARGS)."""
    x, shape = inputs[0], inputs[1]
    m = shape.shape[0] if shape.rank else 1
    rank = len(node.outputs[0].shape)
    target = ctx.emit("BROADCAST_ARGS", [ctx.shape_of(x), _flat(ctx, shape, m)], (rank,), np.int32)
    return ctx.emit("BROADCAST_TO", [x, target], node.outputs[0].shape, x.dtype)


def _tile_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    if _length(inputs[1], "the Tile repeats") != len(x):
        raise DynamicSizeError("Tile needs one repeat count per axis")
    return [tuple(0 if d == 0 else fresh("tiled size") for d in x)]


@runtime_shaped("Tile", inputs={1}, shapes=_tile_shapes)
def tile(ctx, node, inputs, attrs) -> ir.Tensor:
    """TILE by the repeat counts computed at run time."""
    x, repeats = inputs[0], inputs[1]
    return ctx.emit("TILE", [x, _flat(ctx, repeats, x.rank)], node.outputs[0].shape, x.dtype)


# ---- Split ------------------------------------------------------------------------------------------------------
def _split_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    axis = attrs.get("axis", 0) % len(x)
    if _length(inputs[1], "the Split sizes") != n:
        raise DynamicSizeError("Split needs one size per output")
    span = _span([0, x[axis]])
    return [x[:axis] + (fresh("split size", *span),) + x[axis + 1:] for _ in range(n)]


@runtime_shaped("Split", inputs={1}, shapes=_split_shapes)
def split(ctx, node, inputs, attrs) -> list[ir.Tensor]:
    """SPLIT_V by the sizes computed at run time (the kernel checks that they add up to the axis)."""
    x, sizes = inputs[0], inputs[1]
    axis = attrs.get("axis", 0) % x.rank
    n = len(node.outputs)
    outs = ctx.emit_multi("SPLIT_V", [x, _flat(ctx, sizes, n), _const_i32(ctx, axis, "axis")],
                          [(v.shape, x.dtype) for v in node.outputs], num_splits=n)
    return outs


# ---- Slice ------------------------------------------------------------------------------------------------------
def _slice_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    m = _length(inputs[1], "the Slice starts")
    axes = _axes_values(inputs[3] if len(inputs) > 3 else None, len(x))
    if axes is None and len(inputs) > 3 and inputs[3] is not None:
        touched = set(range(len(x)))  # run-time axes: any axis may be sliced
    else:
        touched = set(axes if axes is not None else range(m))
    return [tuple(fresh("sliced size", *_span([0, d])) if a in touched and d != 0 else d for a, d in enumerate(x))]


def _per_axis(ctx, values: ir.Tensor | None, m: int, axes: list[int] | None, axes_t: ir.Tensor | None,
              rank: int, default: int) -> ir.Tensor:
    """A [rank] int32 vector: `values[j]` at axis `axes[j]`, `default` elsewhere (axes constant or run-time)."""
    if values is None:
        values = _const_i32(ctx, [1] * m, "steps")
    values = _flat(ctx, values, m)
    if axes is not None:
        table = ctx.emit("CONCATENATION", [values, _const_i32(ctx, [default], "default")], (m + 1,), np.int32,
                         axis=0, fused_activation_function="NONE")
        index = [axes.index(a) if a in axes else m for a in range(rank)]
        return ctx.emit("GATHER", [table, _const_i32(ctx, index, "index")], (rank,), np.int32, axis=0, batch_dims=0)
    if axes_t is None:
        raise TypeError("_per_axis needs the axes, as constants or as a run-time tensor")
    column = ctx.reshape(axes_t, [m, 1])
    placed = ctx.emit("SCATTER_ND", [column, values, _const_i32(ctx, [rank], "shape")], (rank,), np.int32)
    named = _membership(ctx, axes_t, m, rank)
    return ctx.emit("SELECT_V2", [named, placed, _const_i32(ctx, default, "default")], (rank,), np.int32)


@runtime_shaped("Slice", inputs={1, 2, 3, 4}, shapes=_slice_shapes)
def slice_op(ctx, node, inputs, attrs) -> ir.Tensor:
    """STRIDED_SLICE with begin, end and strides built when the model runs (axes not named run whole; run-time
    axes placed with SCATTER_ND). TFLite's STRIDED_SLICE wraps a negative bound once and clamps it to the axis
    ([-1, size - 1] for a negative step), as ONNX's Slice does."""
    x = inputs[0]
    r = x.rank
    if r > 5:
        raise ctx.fail("Slice of a rank above 5 with bounds computed at run time has no lowering")
    starts, ends = operand(ctx, inputs[1]), operand(ctx, inputs[2])
    m = starts.shape[0] if starts.rank else 1
    axes_in = inputs[3] if len(inputs) > 3 else None
    steps_in = tensor(ctx, inputs[4]) if len(inputs) > 4 else None
    axes, axes_t = None, None
    if axes_in is None:
        axes = list(range(m))
    elif isinstance(axes_in, np.ndarray):
        axes = [int(a) % r for a in axes_in.reshape(-1)]
    else:
        axes_t = _normalized_axes(ctx, axes_in, m, r)
    begin = _per_axis(ctx, starts, m, axes, axes_t, r, 0)
    end = _per_axis(ctx, ends, m, axes, axes_t, r, INT32_MAX)
    strides = _per_axis(ctx, steps_in, m, axes, axes_t, r, 1)
    return ctx.emit("STRIDED_SLICE", [x, begin, end, strides], node.outputs[0].shape, x.dtype, begin_mask=0,
                    end_mask=0, shrink_axis_mask=0, ellipsis_mask=0, new_axis_mask=0, offset=False)


# ---- Pad --------------------------------------------------------------------------------------------------------
def _pad_shapes(inputs, attrs, n, runtime, fresh):
    x = _shape(inputs[0])
    axes = _axes_values(inputs[3] if len(inputs) > 3 else None, len(x))
    if 1 not in runtime and 3 not in runtime:  # only the value is computed at run time
        pads = [int(p) for p in np.asarray(inputs[1]).reshape(-1)]
        named = axes if axes is not None else list(range(len(x)))
        out = list(x)
        for j, a in enumerate(named):
            out[a] = out[a] + pads[j] + pads[j + len(named)]
        return [tuple(out)]
    if axes is None and len(inputs) > 3 and inputs[3] is not None:
        touched = set(range(len(x)))
    elif axes is not None:
        touched = set(axes)
    else:
        touched = set(range(len(x)))
    return [tuple(fresh("padded size") if a in touched else d for a, d in enumerate(x))]


@runtime_shaped("Pad", inputs={1, 2, 3}, shapes=_pad_shapes)
def pad(ctx, node, inputs, attrs) -> ir.Tensor:
    """PADV2 (constant) or MIRROR_PAD (reflect) by paddings computed at run time: ONNX's [begins..., ends...]
    over the named axes becomes TFLite's [rank, 2]; negative pads crop, by a STRIDED_SLICE before padding by
    the positive part (TFLite's paddings may not be negative)."""
    x = inputs[0]
    r = x.rank
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect"):
        raise ctx.fail(f"Pad mode {mode!r} with pads computed at run time has no lowering (constant and reflect do)")
    if r > 5:
        raise ctx.fail("Pad of a rank above 5 with pads computed at run time has no lowering")
    pads = operand(ctx, inputs[1])
    axes_in = inputs[3] if len(inputs) > 3 else None
    m = (pads.shape[0] if pads.rank else 1) // 2
    pairs = ctx.transpose(ctx.reshape(_flat(ctx, pads, 2 * m), [2, m]), [1, 0])  # [m, 2]: (begin, end) per axis
    if axes_in is None and m == r:
        paddings = pairs
    else:
        if axes_in is None:
            raise ctx.fail(f"Pad with {2 * m} pads for a rank-{r} input")
        if isinstance(axes_in, np.ndarray):
            axes_t = _const_i32(ctx, [int(a) % r for a in axes_in.reshape(-1)], "axes")
        else:
            axes_t = _normalized_axes(ctx, axes_in, m, r)
        paddings = ctx.emit("SCATTER_ND", [ctx.reshape(axes_t, [m, 1]), pairs, _const_i32(ctx, [r, 2], "shape")],
                            (r, 2), np.int32)
    zero = _const_i32(ctx, 0, "zero")
    # negative pads crop first (begin -min(before, 0), end size + min(after, 0)), then the rest pads
    shrink = ctx.emit("NEG", [_binary(ctx, "MINIMUM", paddings, zero)], (r, 2), np.int32)
    parts = ctx.emit_multi("UNPACK", [shrink], [((r,), np.int32), ((r,), np.int32)], num=2, axis=1)
    end = _binary(ctx, "SUB", ctx.shape_of(x), parts[1])
    cropped = ctx.emit("STRIDED_SLICE", [x, parts[0], end, _const_i32(ctx, [1] * r, "strides")],
                       tuple(fresh_like(d) for d in node.outputs[0].shape), x.dtype, begin_mask=0, end_mask=0,
                       shrink_axis_mask=0, ellipsis_mask=0, new_axis_mask=0, offset=False)
    grow = _binary(ctx, "MAXIMUM", paddings, zero)
    if mode == "reflect":
        return ctx.emit("MIRROR_PAD", [cropped, grow], node.outputs[0].shape, x.dtype, mode="REFLECT")
    value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if value is None:
        value_t = ctx.const(np.zeros((), x.dtype), name="value")
    elif isinstance(value, np.ndarray):
        value_t = ctx.const(value.reshape(()).astype(x.dtype), name="value")
    else:
        value_t = ctx.reshape(ctx.cast(value, x.dtype), [])
    return ctx.emit("PADV2", [cropped, grow, value_t], node.outputs[0].shape, x.dtype)


def fresh_like(d: Any) -> Any:
    """A size of the same kind as `d`, for an intermediate tensor: a new run-time size where `d` is one."""
    if isinstance(d, Sym) and d.symbols & d.space.unbacked:
        return d.space.fresh("intermediate size")
    return d
