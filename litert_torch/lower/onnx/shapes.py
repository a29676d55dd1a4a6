"""ONNX output shapes over dynamic dimensions, and shape arithmetic on sizes known only at run time.

A model converted with `dynamic_dims` has inputs whose shapes hold `symbolic.Sym`s. ONNX's own shape inference
cannot say what a computed dimension is (it gives an unknown dimension for `(L - 1) // 2 + 1`), so for every node
that reads a dynamic shape the frontend computes the output shapes here, from the op's definition, with the
same `Sym` arithmetic the PyTorch path uses. An op without a rule here, or a rule that cannot decide over the
whole range (a Slice bound that is sometimes past the end, a Split of a dynamic axis into equal parts), raises
`DynamicSizeError`, which the frontend reports with the node's name.

Sizes as values (`Shape` of a dynamic tensor, and the Gather / Concat / arithmetic that builds a Reshape target
from it) are numpy object arrays holding ints and Syms; `fold` evaluates those nodes at conversion time. Where
such a value becomes data of a run-time op, the frontend builds it in the model from the inputs' SHAPE.
"""

from __future__ import annotations

from math import prod
from typing import Any, Callable, Sequence

import numpy as np

from litert_torch.lower.onnx.registry import facts, set_fact
from litert_torch.symbolic import DynamicSizeError, Sym, broadcast_shapes, smax, smin

Shape = tuple[Any, ...]
INT64_MAX = 2**63 - 1


def is_symbolic(value: Any) -> bool:
    """A shape or an object array that holds a Sym."""
    if isinstance(value, np.ndarray):
        return value.dtype == object and any(isinstance(v, Sym) for v in value.reshape(-1))
    return any(isinstance(d, Sym) for d in value)


def ints(value: Any, what: str) -> list[Any]:
    """A constant operand (numpy array, possibly of Syms) as a flat list of ints and Syms."""
    if value is None:
        raise DynamicSizeError(f"{what} is missing")
    arr = np.asarray(value)
    if arr.dtype != object and not np.issubdtype(arr.dtype, np.integer):
        raise DynamicSizeError(f"{what} is not an integer constant")
    return [v if isinstance(v, Sym) else int(v) for v in arr.reshape(-1)]


def _attr_or_input(inputs: list, attrs: dict, index: int, name: str) -> list[Any] | None:
    if len(inputs) > index and inputs[index] is not None:
        return ints(inputs[index], name)
    return list(attrs[name]) if name in attrs else None


# ---- shape rules ---------------------------------------------------------------------------------------------
# Each rule: (input shapes, where a constant input is its numpy value; attributes; output count) -> shapes.
Rule = Callable[[list, dict, int], list[Shape]]


def rule(*ops: str) -> Callable[[Rule], Rule]:
    """Register `fn` as the shape rule of `ops` (their `OnnxOp.shape_rule`)."""
    def register(fn: Rule) -> Rule:
        for op in ops:
            set_fact(op, "shape_rule", fn, fn.__qualname__)
        return fn
    return register


def _shape(value: Any) -> Shape:
    return tuple(value.shape) if isinstance(value, np.ndarray) else tuple(value)


@rule("Abs", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity",
      "LeakyRelu", "Log", "Neg", "Not", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin", "Sqrt", "Tanh",
      "Softmax", "LogSoftmax", "Cast", "Clip", "BatchNormalization", "InstanceNormalization", "IsInf", "IsNaN",
      "Dropout", "GroupNormalization", "CastLike", "Trilu", "RMSNormalization")
def _same(inputs, attrs, n):
    return [_shape(inputs[0])] * n


@rule("Add", "Sub", "Mul", "Div", "Mod", "Pow", "And", "Or", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
      "Max", "Min", "Sum", "Where", "PRelu")
def _broadcast(inputs, attrs, n):
    return [broadcast_shapes(*[_shape(v) for v in inputs if v is not None])]


@rule("LayerNormalization")
def _layer_norm(inputs, attrs, n):
    shape = _shape(inputs[0])
    axis = attrs.get("axis", -1) % len(shape)
    stats = shape[:axis] + (1,) * (len(shape) - axis)
    return [shape, stats, stats][:n]


@rule("MatMul")
def _matmul(inputs, attrs, n):
    a, b = _shape(inputs[0]), _shape(inputs[1])
    a2, b2 = (a if len(a) > 1 else (1,) + a), (b if len(b) > 1 else b + (1,))
    out = broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out]


@rule("Gemm")
def _gemm(inputs, attrs, n):
    a, b = _shape(inputs[0]), _shape(inputs[1])
    m = a[1] if attrs.get("transA", 0) else a[0]
    cols = b[0] if attrs.get("transB", 0) else b[1]
    return [(m, cols)]


def _window(inputs, attrs, kernel: Sequence[int], dilations: Sequence[int], ceil_mode: bool = False) -> Shape:
    x = _shape(inputs[0])
    spatial = len(kernel)
    strides = list(attrs.get("strides", [1] * spatial))
    auto = attrs.get("auto_pad", "NOTSET")
    pads = list(attrs.get("pads", [0] * (2 * spatial)))
    out = []
    for i in range(spatial):
        size, k, s, d = x[2 + i], kernel[i], strides[i], dilations[i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-((-size) // s))
            continue
        span = size - (d * (k - 1) + 1) + (0 if auto == "VALID" else pads[i] + pads[i + spatial])
        out.append(-((-span) // s) + 1 if ceil_mode else span // s + 1)
    return tuple(x[:2]) + tuple(out)


@rule("Conv")
def _conv(inputs, attrs, n):
    w = _shape(inputs[1])
    kernel = list(attrs.get("kernel_shape", w[2:]))
    shape = _window(inputs, attrs, kernel, list(attrs.get("dilations", [1] * len(kernel))))
    return [shape[:1] + (w[0],) + shape[2:]]


@rule("ConvTranspose")
def _conv_transpose(inputs, attrs, n):
    x, w = _shape(inputs[0]), _shape(inputs[1])
    spatial = len(x) - 2
    if attrs.get("output_shape"):
        raise DynamicSizeError("ConvTranspose with output_shape over a dynamic size")
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    pads = list(attrs.get("pads", [0] * (2 * spatial)))
    extra = list(attrs.get("output_padding", [0] * spatial))
    kernel = list(attrs.get("kernel_shape", w[2:]))
    out = [(x[2 + i] - 1) * strides[i] - pads[i] - pads[i + spatial] + dilations[i] * (kernel[i] - 1) + extra[i] + 1
           for i in range(spatial)]
    return [(x[0], w[1] * attrs.get("group", 1), *out)]


@rule("MaxPool", "AveragePool")
def _pool(inputs, attrs, n):
    kernel = list(attrs["kernel_shape"])
    shape = _window(inputs, attrs, kernel, list(attrs.get("dilations", [1] * len(kernel))),
                    bool(attrs.get("ceil_mode", 0)))
    return [shape] * n


@rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(inputs, attrs, n):
    x = _shape(inputs[0])
    return [tuple(x[:2]) + (1,) * (len(x) - 2)]


@rule("Reshape")
def _reshape(inputs, attrs, n):
    x, target = _shape(inputs[0]), ints(inputs[1], "Reshape shape")
    allowzero = attrs.get("allowzero", 0)
    out = [x[i] if (isinstance(d, int) and d == 0 and not allowzero) else d for i, d in enumerate(target)]
    if sum(1 for d in out if isinstance(d, int) and d == -1) > 1:
        raise DynamicSizeError("Reshape with two -1 entries")
    if any(isinstance(d, int) and d == -1 for d in out):
        known = prod((d for d in out if not (isinstance(d, int) and d == -1)), start=1)
        total = prod(x, start=1)
        missing = total // known
        if not _equal(missing * known, total):
            raise DynamicSizeError(f"Reshape of {list(x)} elements into {target}: {known} does not divide the size "
                                   "at every point of the range")
        out = [missing if isinstance(d, int) and d == -1 else d for d in out]
    return [tuple(out)]


def _equal(a: Any, b: Any) -> bool:
    from litert_torch.symbolic import same_size

    return same_size(a, b)


@rule("Flatten")
def _flatten(inputs, attrs, n):
    x = _shape(inputs[0])
    axis = attrs.get("axis", 1) % len(x) if attrs.get("axis", 1) < 0 else attrs.get("axis", 1)
    return [(prod(x[:axis], start=1), prod(x[axis:], start=1))]


@rule("Transpose")
def _transpose(inputs, attrs, n):
    x = _shape(inputs[0])
    perm = list(attrs.get("perm", reversed(range(len(x)))))
    return [tuple(x[p] for p in perm)]


@rule("Concat")
def _concat(inputs, attrs, n):
    shapes = [_shape(v) for v in inputs if v is not None]
    axis = attrs["axis"] % len(shapes[0])
    total = sum((s[axis] for s in shapes), start=0)
    return [shapes[0][:axis] + (total,) + shapes[0][axis + 1:]]


@rule("Squeeze")
def _squeeze(inputs, attrs, n):
    x = _shape(inputs[0])
    axes = _attr_or_input(inputs, attrs, 1, "axes")
    if axes is None:
        if any(isinstance(d, Sym) for d in x):
            raise DynamicSizeError("Squeeze without axes of a tensor with a dynamic size")
        axes = [i for i, d in enumerate(x) if d == 1]
    axes = {a % len(x) for a in axes}
    return [tuple(d for i, d in enumerate(x) if i not in axes)]


@rule("Unsqueeze")
def _unsqueeze(inputs, attrs, n):
    x = list(_shape(inputs[0]))
    given = _attr_or_input(inputs, attrs, 1, "axes") or []
    for a in sorted(a % (len(x) + len(given)) for a in given):
        x.insert(a, 1)
    return [tuple(x)]


@rule("Slice")
def _slice(inputs, attrs, n):
    x = list(_shape(inputs[0]))
    starts, ends = ints(inputs[1], "Slice starts"), ints(inputs[2], "Slice ends")
    axes = ints(inputs[3], "Slice axes") if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
    steps = ints(inputs[4], "Slice steps") if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    for s, e, a, step in zip(starts, ends, axes, steps):
        a %= len(x)
        x[a] = slice_length(x[a], s, e, step)
    return [tuple(x)]


def slice_length(size: Any, start: Any, end: Any, step: int) -> Any:
    """The length of ONNX's Slice(start, end, step) of an axis of `size` (any of them may be a Sym)."""
    if isinstance(step, Sym) or step == 0:
        raise DynamicSizeError("Slice with a dynamic or zero step")
    if step < 0:
        if isinstance(size, Sym) or isinstance(start, Sym) or isinstance(end, Sym):
            raise DynamicSizeError("Slice with a negative step over a dynamic size")
        return len(range(*slice(start, end, step).indices(size)))
    start = _clamp(start + size if _negative(start) else start, size)
    end = size if (isinstance(end, int) and end >= INT64_MAX // 2) else \
        _clamp(end + size if _negative(end) else end, size)
    return smax(0, -((-(end - start)) // step))


def _negative(v: Any) -> bool:
    return (v < 0) if not isinstance(v, Sym) else bool(v < 0)


def _clamp(v: Any, size: Any) -> Any:
    return smin(smax(v, 0), size)


@rule("Gather")
def _gather(inputs, attrs, n):
    x, idx = _shape(inputs[0]), _shape(inputs[1])
    axis = attrs.get("axis", 0) % len(x)
    return [x[:axis] + idx + x[axis + 1:]]


@rule("Split")
def _split(inputs, attrs, n):
    x = _shape(inputs[0])
    axis = attrs.get("axis", 0) % len(x)
    sizes = _attr_or_input(inputs, attrs, 1, "split")
    if sizes is None:
        parts = attrs.get("num_outputs", n)
        if isinstance(x[axis], Sym):
            raise DynamicSizeError(f"Split of a dynamic axis into {parts} equal parts")
        each = -(-x[axis] // parts)
        sizes = [each] * (parts - 1) + [x[axis] - each * (parts - 1)]
    return [x[:axis] + (s,) + x[axis + 1:] for s in sizes]


@rule("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")
def _reduce(inputs, attrs, n):
    x = _shape(inputs[0])
    axes = _attr_or_input(inputs, attrs, 1, "axes")
    if not axes:
        axes = [] if attrs.get("noop_with_empty_axes", 0) else list(range(len(x)))
    return [_reduced(x, axes, attrs.get("keepdims", 1))]


@rule("ArgMax", "ArgMin")
def _arg_reduce(inputs, attrs, n):
    return [_reduced(_shape(inputs[0]), [attrs.get("axis", 0)], attrs.get("keepdims", 1))]


def _reduced(x: Shape, axes: list[int], keep: int) -> Shape:
    reduced = {a % len(x) for a in axes}
    return tuple((1 if i in reduced else d) for i, d in enumerate(x) if keep or i not in reduced)


@rule("Expand")
def _expand(inputs, attrs, n):
    return [broadcast_shapes(_shape(inputs[0]), tuple(ints(inputs[1], "Expand shape")))]


@rule("Tile")
def _tile(inputs, attrs, n):
    x, reps = _shape(inputs[0]), ints(inputs[1], "Tile repeats")
    return [tuple(d * r for d, r in zip(x, reps))]


@rule("Pad")
def _pad(inputs, attrs, n):
    x = _shape(inputs[0])
    pads = ints(inputs[1], "Pad pads") if len(inputs) > 1 else list(attrs["pads"])
    rank = len(x)
    return [tuple(x[i] + pads[i] + pads[i + rank] for i in range(rank))]


@rule("Resize", "Upsample")
def _resize(inputs, attrs, n):
    x = _shape(inputs[0])
    scales_at = 1 if len(inputs) == 2 else 2
    sizes = ints(inputs[3], "Resize sizes") if len(inputs) > 3 and inputs[3] is not None else None
    if sizes is not None:
        return [tuple(sizes)]
    scales = np.asarray(inputs[scales_at], np.float64).reshape(-1) if inputs[scales_at] is not None else None
    if scales is None or scales.size != len(x):
        raise DynamicSizeError("Resize without scales or sizes")
    out = []
    for d, s in zip(x, scales):
        if float(s).is_integer():
            out.append(d * int(s))
        elif isinstance(d, Sym):
            raise DynamicSizeError(f"Resize by the non-integer scale {s} of a dynamic size")
        else:
            out.append(int(np.floor(d * s)))
    return [tuple(out)]


@rule("DepthToSpace")
def _depth_to_space(inputs, attrs, n):
    b = attrs["blocksize"]
    x = _shape(inputs[0])
    return [(x[0], x[1] // (b * b), x[2] * b, x[3] * b)]


def infer(op_type: str, inputs: list, attrs: dict, n_outputs: int) -> list[Shape]:
    """The output shapes of one node. `inputs`: per input its shape (a tuple of ints and Syms), or its numpy
    value where it is a constant, or None where absent."""
    fn = facts(op_type).shape_rule
    if fn is None:
        raise DynamicSizeError(f"onnx::{op_type} has no rule for dynamic shapes here")
    return fn(inputs, attrs, n_outputs)


# ---- shape arithmetic at conversion time ------------------------------------------------------------------------
def _sizes(value: Any) -> np.ndarray:
    arr = np.asarray(value)
    return arr if arr.dtype == object else arr.astype(object)


def _fold_binary(fn):
    def fold(inputs, attrs):
        a, b = (_sizes(v) for v in inputs)
        return [fn(a, b)]
    return fold


def _truncating_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def one(x, y):
        if not isinstance(x, Sym) and not isinstance(y, Sym):
            q = abs(int(x)) // abs(int(y))
            return q if (int(x) >= 0) == (int(y) > 0) else -q
        if _negative(x) or _negative(y):
            raise DynamicSizeError("Div of a dynamic size by a negative number")
        return x // y
    return np.vectorize(one, otypes=[object])(a, b)


def _fold_gather(inputs, attrs):
    data, idx = _sizes(inputs[0]), np.asarray(inputs[1]).astype(np.int64)
    axis = attrs.get("axis", 0) % max(data.ndim, 1)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return [np.take(data, idx, axis=axis)]


def _fold_concat(inputs, attrs):
    return [np.concatenate([_sizes(v).reshape(-1) if _sizes(v).ndim == 0 else _sizes(v) for v in inputs],
                           axis=attrs["axis"])]


def _fold_unsqueeze(inputs, attrs):
    x = _sizes(inputs[0])
    axes = _attr_or_input(inputs, attrs, 1, "axes") or []
    for a in sorted(a % (x.ndim + len(axes)) for a in axes):
        x = np.expand_dims(x, a)
    return [x]


def _fold_squeeze(inputs, attrs):
    x = _sizes(inputs[0])
    axes = _attr_or_input(inputs, attrs, 1, "axes")
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes)) if axes else np.squeeze(x)]


def _fold_slice(inputs, attrs):
    x = _sizes(inputs[0])
    if x.ndim != 1:
        raise DynamicSizeError("Slice of a multi-dimensional array of sizes")
    starts, ends = ints(inputs[1], "Slice starts"), ints(inputs[2], "Slice ends")
    steps = ints(inputs[4], "Slice steps") if len(inputs) > 4 and inputs[4] is not None else [1]
    end = min(int(ends[0]), len(x)) if int(ends[0]) >= 0 else int(ends[0])
    return [x[slice(int(starts[0]), end, int(steps[0]))]]


def _fold_reshape(inputs, attrs):
    x = _sizes(inputs[0])
    return [x.reshape([int(d) for d in ints(inputs[1], "Reshape shape")])]


_SIZE_FOLDS: dict[str, Callable[[list, dict], list[np.ndarray]]] = {
    "Add": _fold_binary(lambda a, b: a + b),
    "Sub": _fold_binary(lambda a, b: a - b),
    "Mul": _fold_binary(lambda a, b: a * b),
    "Div": _fold_binary(_truncating_div),
    "Gather": _fold_gather,
    "Concat": _fold_concat,
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Slice": _fold_slice,
    "Reshape": _fold_reshape,
    "Identity": lambda inputs, attrs: [_sizes(inputs[0])],
    "Cast": lambda inputs, attrs: [_sizes(inputs[0])],
}
for _op, _fold in _SIZE_FOLDS.items():
    set_fact(_op, "size_fold", _fold, "shapes")


def shape_value(shape: Shape, start: int | None = None, end: int | None = None) -> np.ndarray:
    """ONNX's Shape of a tensor with dynamic sizes: an object array of ints and Syms."""
    return np.array(list(shape)[slice(start, end)] or [], dtype=object)


def fold(op_type: str, inputs: list, attrs: dict) -> list[np.ndarray]:
    """Evaluate a node of shape arithmetic whose inputs hold sizes known only at run time."""
    fn = facts(op_type).size_fold
    if fn is None:
        raise DynamicSizeError(f"onnx::{op_type} on sizes known only at run time has no rule here")
    return fn(inputs, attrs)
