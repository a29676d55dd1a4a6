"""What each builtin kernel requires of its op, checked before the LiteRT runtime sees a file.

For every op kind this toolkit writes: its operand counts (`ARITY`), and a check (`CHECKS`) of the dtypes and of
the output shape the kernel computes from its input shapes and options, so that a kernel never reads or writes
past a buffer. A check raises OpProblem saying what is wrong; `runtime.verify` names the subgraph and the op.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from litert_torch import ir

FLOATS = {np.dtype(np.float32), np.dtype(np.float16)}
INDEX = {np.dtype(np.int32), np.dtype(np.int64)}


class OpProblem(Exception):
    """What is wrong with one op (turned into a ModelFileError naming it)."""


class KernelGap(OpProblem):
    """A well-formed op that LiteRT's CPU kernels do not compute correctly: they abort, or give wrong values."""


SUB_BYTE = ("int4", "uint4", "int2")


# ---- helpers ---------------------------------------------------------------------------------------------------
# ops whose optional inputs may be left out (-1): the bias of the weighted ops, the LSTM's optional tensors
OMITTABLE = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "UNIDIRECTIONAL_SEQUENCE_LSTM"}


def _count(op: ir.Op, min_in: int, max_in: int, outs: int | tuple[int, int] = 1) -> None:
    n = len(op.inputs)
    if not min_in <= n <= max_in:
        raise OpProblem(f"{n} inputs (takes {min_in}..{max_in})")
    if any(t is None for t in op.inputs[:min_in]) or (op.opcode not in OMITTABLE and None in op.inputs):
        raise OpProblem("a required input is missing")
    low, high = (outs, outs) if isinstance(outs, int) else outs
    if not low <= len(op.outputs) <= high:
        raise OpProblem(f"{len(op.outputs)} outputs")


def any_dynamic(*tensors: ir.Tensor | None) -> bool:
    return any(t is not None and t.shape_signature is not None and any(d < 0 for d in t.shape_signature)
               for t in tensors)


def dims(t: ir.Tensor) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def _expect(op: ir.Op, shape: tuple[int, ...], out: int = 0) -> None:
    if any_dynamic(*op.inputs, *op.outputs):
        return
    got = dims(op.outputs[out])
    if got != tuple(shape):
        raise OpProblem(f"output shape {list(got)}, but the inputs give {list(shape)}")


def _same_dtype(*tensors: ir.Tensor | None) -> None:
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) > 1:
        raise OpProblem(f"operands of different dtypes {sorted(d.name for d in dtypes)}")


def _const(t: ir.Tensor | None, what: str) -> np.ndarray | None:
    if t is None:
        return None
    if t.dtype not in INDEX:
        raise OpProblem(f"{what} must be int32, got {t.dtype}")
    return None if t.data is None else np.asarray(t.data).astype(np.int64)


def _axis(axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise OpProblem(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        raise OpProblem(f"shapes {list(a)} and {list(b)} do not broadcast") from None


# ---- checks per op ---------------------------------------------------------------------------------------------
def unary(op: ir.Op) -> None:
    x, y = op.input(0), op.outputs[0]
    if op.opcode not in ("CAST", "QUANTIZE", "DEQUANTIZE"):
        _same_dtype(x, y)
    _expect(op, dims(x))


def bitcast(op: ir.Op) -> None:
    x, y = op.input(0), op.outputs[0]
    if x.dtype.itemsize != y.dtype.itemsize:
        raise OpProblem(f"a bitcast from {x.dtype} to {y.dtype}, of another element size")
    _expect(op, dims(x))


# binary kernels that read plain (unquantized) tensors of these dtypes as quantized ones and abort the process
# on their missing scales (LiteRT's CPU kernels, measured op by op)
ABORTS_ON_PLAIN: dict[str, set[np.dtype]] = {
    **{op: {np.dtype(np.int8), np.dtype(np.uint8)}
       for op in ("ADD", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL")},
    "SUB": {np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)},
    "SQUARED_DIFFERENCE": {np.dtype(np.int8)},
}


def binary(op: ir.Op) -> None:
    a, b = op.tensor_inputs(2)
    if any(t.dtype in ABORTS_ON_PLAIN.get(op.opcode, ()) and t.quantization is None for t in (a, b)):
        raise KernelGap(f"plain {a.dtype} operands without quantization parameters, which the kernel reads as "
                        "quantized (it aborts the process)")
    if op.opcode not in ("LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"):
        if a.dtype.kind == "f" or op.outputs[0].dtype.kind == "f":
            _same_dtype(a, b, op.outputs[0])
    else:
        _same_dtype(a, b)
    if len(dims(a)) > 6 or len(dims(b)) > 6:
        raise OpProblem("operands of rank above 6")
    _expect(op, _broadcast(dims(a), dims(b)))


def select(op: ir.Op) -> None:
    c, a, b = op.tensor_inputs()
    _same_dtype(a, b, op.outputs[0])
    _expect(op, _broadcast(_broadcast(dims(c), dims(a)), dims(b)))


def conv2d(op: ir.Op) -> None:
    x, w = op.tensor_inputs(2)
    b = op.inputs[2] if len(op.inputs) > 2 else None
    if x.rank != 4 or w.rank != 4:
        raise OpProblem(f"input rank {x.rank} and filter rank {w.rank} (both must be 4)")
    depthwise = op.opcode == "DEPTHWISE_CONV_2D"
    out_c = w.shape[3] if depthwise else w.shape[0]
    if depthwise:
        if w.shape[0] != 1 or x.shape[3] == 0 or out_c % x.shape[3]:
            raise OpProblem(f"depthwise filter {list(w.shape)} for an input of {x.shape[3]} channels")
    elif w.shape[3] == 0 or x.shape[3] % w.shape[3]:
        raise OpProblem(f"filter {list(w.shape)} for an input of {x.shape[3]} channels")
    if b is not None and dims(b) != (out_c,):
        raise OpProblem(f"bias of shape {list(b.shape)} for {out_c} output channels")
    sh, sw = int(op.options.get("stride_h", 1)), int(op.options.get("stride_w", 1))
    dh = int(op.options.get("dilation_h_factor", 1))
    dw = int(op.options.get("dilation_w_factor", 1))
    if min(sh, sw, dh, dw) < 1:
        raise OpProblem("stride and dilation must be positive")
    kh, kw = w.shape[1], w.shape[2]
    size = []
    for n, k, s, d in ((x.shape[1], kh, sh, dh), (x.shape[2], kw, sw, dw)):
        if op.options.get("padding") in ("SAME", 0):
            size.append(-(-n // s))
        else:
            size.append((n - (k - 1) * d - 1) // s + 1)
    if min(size) < 0:
        raise OpProblem("the filter is larger than the input")
    _weights(op, x, w, ("int4",))  # per channel (int2 gives NaN)
    _expect(op, (x.shape[0], size[0], size[1], out_c))


def transpose_conv(op: ir.Op) -> None:
    shape, w, x = op.tensor_inputs(3)
    b = op.inputs[3] if len(op.inputs) > 3 else None
    want = _const(shape, "output shape")
    if x.rank != 4 or w.rank != 4 or (want is not None and want.shape != (4,)):
        raise OpProblem("input, filter and output shape must be rank 4")
    if w.shape[3] != x.shape[3]:
        raise OpProblem(f"filter {list(w.shape)} for an input of {x.shape[3]} channels")
    if b is not None and dims(b) != (w.shape[0],):
        raise OpProblem(f"bias of shape {list(b.shape)} for {w.shape[0]} output channels")
    if want is not None:
        if want[3] != w.shape[0] or want[0] != x.shape[0] or (want < 1).any():
            raise OpProblem(f"output shape {want.tolist()} does not fit the filter and input")
        _expect(op, tuple(int(v) for v in want))


def fully_connected(op: ir.Op) -> None:
    x, w = op.tensor_inputs(2)
    b = op.inputs[2] if len(op.inputs) > 2 else None
    if w.rank != 2 or w.shape[1] == 0:
        raise OpProblem(f"weights of shape {list(w.shape)} (must be [out, in])")
    size = int(np.prod(dims(x), dtype=np.int64))
    if x.rank == 0 or size % w.shape[1]:
        raise OpProblem(f"an input of shape {list(x.shape)} for weights {list(w.shape)}")
    if b is not None and dims(b) != (w.shape[0],):
        raise OpProblem(f"bias of shape {list(b.shape)} for {w.shape[0]} outputs")
    if op.options.get("keep_num_dims"):
        if x.shape[-1] != w.shape[1]:
            raise OpProblem(f"an input of shape {list(x.shape)} for weights {list(w.shape)}")
        want = (*dims(x)[:-1], w.shape[0])
    else:
        want = (size // w.shape[1], w.shape[0])
    _weights(op, x, w, ("int4", "int2"))
    if w.dtype.name == "int2" and w.quantization is not None and w.quantization.block_scales is not None:
        raise KernelGap("int2 weights in blocks, which the reference kernel computes wrongly (XNNPack refuses them)")
    _expect(op, want)


def _weights(op: ir.Op, x: ir.Tensor, w: ir.Tensor, sub_byte: tuple[str, ...] = ()) -> None:
    """Float ops take float weights of their dtype, or int8 ones (dynamic-range "hybrid" kernels), or the
    sub-byte dtypes `sub_byte` whose hybrid kernels compute them (measured against the dequantized weights:
    int4 in convolutions and FULLY_CONNECTED, int2 in FULLY_CONNECTED)."""
    if x.dtype.kind == "f":
        _same_dtype(x, op.outputs[0])
        if w.dtype.name in SUB_BYTE and w.dtype.name not in sub_byte:
            raise KernelGap(f"{w.dtype} weights, which LiteRT's {op.opcode} kernels do not compute correctly")
        if w.dtype != x.dtype and w.dtype != np.int8 and w.dtype.name not in SUB_BYTE:
            raise OpProblem(f"weights of dtype {w.dtype} for a {x.dtype} input")
    _scales(w, 0, w.rank - 1)


def _scales(w: ir.Tensor, out_axis: int, in_axis: int) -> None:
    """A quantized table's scales must cover it: one, or one per channel along an axis it has, or (int4) the
    blockwise scales tensor [out, in / block]: the kernels index them without looking."""
    q = w.quantization
    if w.dtype.name in SUB_BYTE and q is None:
        raise OpProblem(f"{w.dtype} weights without quantization parameters")
    if q is None:
        return
    if q.block_scales is not None:
        s, block = q.block_scales, q.block_size
        if w.rank != 2 or block <= 0 or w.shape[in_axis] % block:
            raise OpProblem(f"blocks of {block} over weights of shape {list(w.shape)}")
        want = (w.shape[out_axis], w.shape[in_axis] // block)
        if not s.is_constant or s.dtype.kind != "f" or dims(s) != want:
            raise OpProblem(f"block scales of dtype {s.dtype} and shape {list(s.shape)} (must be constant floats of "
                            f"shape {list(want)})")
    elif len(q.scale) > 1 and not (0 <= q.axis < w.rank and len(q.scale) == w.shape[q.axis]):
        raise OpProblem(f"{len(q.scale)} scales along axis {q.axis} of weights of shape {list(w.shape)}")


def batch_matmul(op: ir.Op) -> None:
    a, b = op.tensor_inputs(2)
    if a.rank < 2 or b.rank < 2:
        raise OpProblem("operands of rank below 2")
    adj_x, adj_y = bool(op.options.get("adj_x")), bool(op.options.get("adj_y"))
    m, k = (a.shape[-1], a.shape[-2]) if adj_x else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if adj_y else (b.shape[-2], b.shape[-1])
    if k != k2 and not any_dynamic(a, b):
        raise OpProblem(f"inner sizes {k} and {k2} differ")
    _weights(op, a, b)
    _expect(op, (*_broadcast(dims(a)[:-2], dims(b)[:-2]), m, n))


def reshape(op: ir.Op) -> None:
    """The element count kept; a shape input is a vector of the output's rank, and a constant one gives the
    output's shape (one -1 standing for the dimension the others leave)."""
    x, y = op.input(0), op.outputs[0]
    _same_dtype(x, y)
    if not any_dynamic(x, y) and int(np.prod(dims(x), dtype=np.int64)) != int(np.prod(dims(y), dtype=np.int64)):
        raise OpProblem(f"{list(x.shape)} has not the element count of {list(y.shape)}")
    shape = op.inputs[1] if len(op.inputs) > 1 else None
    if shape is None:
        return
    values = _const(shape, "shape")
    if shape.rank != 1 or (not any_dynamic(shape, y) and shape.shape[0] != y.rank):
        raise OpProblem(f"a shape input of shape {list(shape.shape)} for an output of rank {y.rank}")
    if values is None or any_dynamic(x, y):
        return
    wanted = values.tolist()
    if wanted.count(-1) > 1 or any(v < -1 for v in wanted):
        raise OpProblem(f"shape {wanted}")
    if -1 in wanted:
        known = int(np.prod([v for v in wanted if v != -1], dtype=np.int64))
        at = wanted.index(-1)  # with a 0 among the others, any size fits: the output's
        wanted[at] = int(np.prod(dims(x), dtype=np.int64)) // known if known else dims(y)[at]
    if tuple(wanted) != dims(y):
        raise OpProblem(f"shape {values.tolist()} for an output of shape {list(y.shape)}")


def transpose(op: ir.Op) -> None:
    x = op.input(0)
    perm = _const(op.inputs[1], "permutation")
    if perm is None:
        raise OpProblem("the permutation must be a constant")
    if sorted(perm.reshape(-1).tolist()) != list(range(x.rank)) or x.rank > 6:
        raise OpProblem(f"permutation {perm.tolist()} for rank {x.rank}")
    _same_dtype(x, op.outputs[0])
    _expect(op, tuple(x.shape[int(p)] for p in perm.reshape(-1)))


def concatenation(op: ir.Op) -> None:
    first = op.input(0)
    axis = _axis(int(op.options.get("axis", 0)), first.rank)
    _same_dtype(*op.inputs, op.outputs[0])
    total = 0
    inputs = op.tensor_inputs()
    for t in inputs:
        if t.rank != first.rank or any(t.shape[d] != first.shape[d] for d in range(first.rank) if d != axis):
            if not any_dynamic(t, first):
                raise OpProblem(f"inputs of shapes {[list(t.shape) for t in inputs]} do not concatenate on {axis}")
        total += t.shape[axis] if t.rank else 0
    _expect(op, tuple(total if d == axis else first.shape[d] for d in range(first.rank)))


def split(op: ir.Op) -> None:
    axis_t, x = op.tensor_inputs()
    axis = _const(axis_t, "axis")
    n = int(op.options.get("num_splits", 0))
    if axis is None or n != len(op.outputs) or n < 1:
        raise OpProblem(f"num_splits {n} with {len(op.outputs)} outputs")
    a = _axis(int(axis.reshape(-1)[0]), x.rank)
    if x.shape[a] % n:
        raise OpProblem(f"{x.shape[a]} does not split in {n}")
    for i in range(n):
        _same_dtype(x, op.outputs[i])
        _expect(op, tuple(x.shape[d] // n if d == a else x.shape[d] for d in range(x.rank)), out=i)


def slice_(op: ir.Op) -> None:
    x, begin_t, size_t = op.tensor_inputs()
    begin, size = _const(begin_t, "begin"), _const(size_t, "size")
    if begin is None or size is None:
        return
    if begin.shape != (x.rank,) or size.shape != (x.rank,):
        raise OpProblem(f"begin {begin.tolist()} and size {size.tolist()} for rank {x.rank}")
    shape = dims(x)
    want = tuple(shape[d] - begin[d] if size[d] == -1 else size[d] for d in range(x.rank))
    if (begin < 0).any() or any(begin[d] + want[d] > shape[d] or want[d] < 0 for d in range(x.rank)):
        raise OpProblem(f"begin {begin.tolist()} and size {size.tolist()} outside {list(shape)}")
    _same_dtype(x, op.outputs[0])
    _expect(op, want)


def strided_slice(op: ir.Op) -> None:
    x = op.input(0)
    for t, what in zip(op.inputs[1:4], ("begin", "end", "strides")):
        v = _const(t, what)
        if v is not None and v.shape != (x.rank,):
            raise OpProblem(f"{what} {v.tolist()} for rank {x.rank}")
        if what == "strides" and v is not None and (v == 0).any():
            raise OpProblem("a stride of 0")
    _same_dtype(x, op.outputs[0])
    if not any_dynamic(x, op.outputs[0]):
        ref = np.empty(dims(x), np.int8)
        b, e, s = (np.asarray(t.data).reshape(-1) for t in op.tensor_inputs(4)[1:])
        index = []
        for d in range(x.rank):
            lo = None if op.options.get("begin_mask", 0) >> d & 1 else int(b[d])
            hi = None if op.options.get("end_mask", 0) >> d & 1 else int(e[d])
            index.append(slice(lo, hi, int(s[d])))
        want = ref[tuple(index)].shape
        shrink = op.options.get("shrink_axis_mask", 0)
        want = tuple(n for d, n in enumerate(want) if not shrink >> d & 1)
        if op.options.get("ellipsis_mask", 0) or op.options.get("new_axis_mask", 0):
            return
        _expect(op, want)


def gather(op: ir.Op) -> None:
    x, idx = op.tensor_inputs()
    if idx.dtype not in INDEX:
        raise OpProblem(f"indices of dtype {idx.dtype}")
    if x.rank == 0:
        raise OpProblem("a scalar input")
    axis = _axis(int(op.options.get("axis", 0)), x.rank)
    batch = int(op.options.get("batch_dims", 0))
    if batch != 0:
        return
    if idx.data is not None and idx.data.size and (idx.data.min() < 0 or idx.data.max() >= x.shape[axis]):
        raise OpProblem("constant indices out of range")
    _same_dtype(x, op.outputs[0])
    _expect(op, (*dims(x)[:axis], *dims(idx), *dims(x)[axis + 1:]))


def gather_nd(op: ir.Op) -> None:
    x, idx = op.tensor_inputs()
    if idx.dtype not in INDEX or idx.rank < 1:
        raise OpProblem(f"indices of dtype {idx.dtype} and rank {idx.rank}")
    k = int(idx.shape[-1])
    if k > x.rank:
        raise OpProblem(f"index tuples of {k} values into a rank-{x.rank} tensor")
    if idx.data is not None and idx.data.size:
        limits = np.array(dims(x)[:k])
        if (idx.data < 0).any() or (idx.data >= limits).any():
            raise OpProblem("constant indices out of range")
    _same_dtype(x, op.outputs[0])
    _expect(op, (*dims(idx)[:-1], *dims(x)[k:]))


def scatter_nd(op: ir.Op) -> None:
    idx, updates, shape_t = op.tensor_inputs()
    if idx.dtype not in INDEX or idx.rank < 1:
        raise OpProblem(f"indices of dtype {idx.dtype} and rank {idx.rank}")
    want = _const(shape_t, "output shape")
    _same_dtype(updates, op.outputs[0])
    if want is None:
        return
    k = int(idx.shape[-1])
    if want.ndim != 1 or k > want.size or (want < 0).any():
        raise OpProblem(f"output shape {want.tolist()} for index tuples of {k} values")
    if dims(updates) != (*dims(idx)[:-1], *(int(v) for v in want[k:])):
        raise OpProblem(f"updates of shape {list(updates.shape)} for indices {list(idx.shape)} into "
                        f"{want.tolist()}")
    _expect(op, tuple(int(v) for v in want))


def where(op: ir.Op) -> None:
    (x,), (out,) = op.tensor_inputs(), op.outputs
    if out.dtype not in (np.dtype(np.int64), np.dtype(np.int32)) or out.rank != 2:
        raise OpProblem(f"coordinates of dtype {out.dtype} and rank {out.rank}")
    width = int((out.shape_signature or out.shape)[1])
    if width >= 0 and width != x.rank:
        raise OpProblem(f"coordinates of {out.shape[1]} values for a rank-{x.rank} tensor")


def fill(op: ir.Op) -> None:
    dims_t, value = op.tensor_inputs()
    if value.size != 1:
        raise OpProblem(f"a fill value of {value.size} elements")
    _same_dtype(value, op.outputs[0])
    want = _const(dims_t, "output shape")
    if want is not None:
        if want.ndim != 1 or (want < 0).any():
            raise OpProblem(f"output shape {want.tolist()}")
        _expect(op, tuple(int(v) for v in want))


def axis_op(op: ir.Op) -> None:
    """CUMSUM and REVERSE_V2: the input's shape and type, along axes in range."""
    x, axes_t = op.tensor_inputs()
    axes = _const(axes_t, "axis")
    if axes is not None:
        for a in axes.reshape(-1):
            _axis(int(a), x.rank)
    _same_dtype(x, op.outputs[0])
    _expect(op, dims(x))


def split_v(op: ir.Op) -> None:
    x, sizes_t, axis_t = op.tensor_inputs()
    sizes, axis = _const(sizes_t, "size_splits"), _const(axis_t, "axis")
    n = len(op.outputs)
    if axis is None or sizes is None:
        return
    a = _axis(int(axis.reshape(-1)[0]), x.rank)
    sizes = sizes.reshape(-1)
    if sizes.size != n or int(op.options.get("num_splits", n)) != n:
        raise OpProblem(f"{sizes.size} sizes for {n} outputs")
    free = int((sizes == -1).sum())
    if free > 1 or (sizes < -1).any() or (not free and int(sizes.sum()) != x.shape[a]) or \
            (free and int(sizes[sizes >= 0].sum()) > x.shape[a]):
        raise OpProblem(f"sizes {sizes.tolist()} for an axis of {x.shape[a]}")
    rest = x.shape[a] - int(sizes[sizes >= 0].sum())
    for i, size in enumerate(sizes):
        _same_dtype(x, op.outputs[i])
        _expect(op, tuple((rest if size == -1 else int(size)) if d == a else x.shape[d] for d in range(x.rank)),
                out=i)


def topk(op: ir.Op) -> None:
    x, k_t = op.tensor_inputs()
    values, indices = op.outputs
    k = _const(k_t, "k")
    if x.rank < 1 or indices.dtype not in INDEX:
        raise OpProblem(f"an input of rank {x.rank}, indices of dtype {indices.dtype}")
    _same_dtype(x, values)
    if k is not None:
        count = int(k.reshape(-1)[0])
        if not 0 <= count <= x.shape[-1]:
            raise OpProblem(f"k={count} of an axis of {x.shape[-1]}")
        for out in (0, 1):
            _expect(op, (*dims(x)[:-1], count), out=out)


def embedding_lookup(op: ir.Op) -> None:
    ids, table = op.tensor_inputs()
    if ids.dtype != np.int32 or ids.rank != 1 or table.rank < 2:
        raise OpProblem(f"ids of dtype {ids.dtype} and rank {ids.rank} into a table of rank {table.rank}")
    if ids.data is not None and ids.data.size and (ids.data.min() < 0 or ids.data.max() >= table.shape[0]):
        raise OpProblem("constant ids out of range")
    if table.dtype.name in ("int2", "uint4"):
        raise KernelGap(f"a table of dtype {table.dtype}")
    _scales(table, 0, table.rank - 1)
    _expect(op, (*dims(ids), *dims(table)[1:]))


def dynamic_update_slice(op: ir.Op) -> None:
    x, update, start_t = op.tensor_inputs()
    if update.rank != x.rank or any(u > d for u, d in zip(dims(update), dims(x))):
        raise OpProblem(f"an update {list(update.shape)} larger than its operand {list(x.shape)}")
    if start_t.dtype not in INDEX or start_t.rank != 1 or start_t.shape[0] != x.rank:
        raise OpProblem(f"start indices of dtype {start_t.dtype} and shape {list(start_t.shape)}")
    _same_dtype(x, update, op.outputs[0])
    _expect(op, dims(x))


def range_op(op: ir.Op) -> None:
    start, limit, delta = op.tensor_inputs()
    if any(t.size != 1 for t in (start, limit, delta)):
        raise OpProblem("start, limit and delta must hold one value each")
    _same_dtype(start, limit, delta, op.outputs[0])
    if op.outputs[0].rank != 1:
        raise OpProblem(f"an output of rank {op.outputs[0].rank}")


def broadcast_args(op: ir.Op) -> None:
    a, b = op.tensor_inputs()
    if a.rank != 1 or b.rank != 1 or a.dtype not in INDEX:
        raise OpProblem("shapes that are not 1-D integer tensors")
    _same_dtype(a, b, op.outputs[0])
    _expect(op, (max(a.shape[0], b.shape[0]),))


def reduce(op: ir.Op) -> None:
    x, axes_t = op.tensor_inputs()
    axes = _const(axes_t, "axes")
    if axes is None:
        return
    dims = sorted({_axis(int(a), x.rank) for a in axes.reshape(-1)})
    keep = bool(op.options.get("keep_dims"))
    want = tuple(1 if d in dims else x.shape[d] for d in range(x.rank)) if keep else \
        tuple(x.shape[d] for d in range(x.rank) if d not in dims)
    if x.dtype.kind == "f":
        _same_dtype(x, op.outputs[0])
    _expect(op, want)


def arg(op: ir.Op) -> None:
    x, axis_t = op.tensor_inputs()
    axis = _const(axis_t, "axis")
    if op.outputs[0].dtype not in INDEX:
        raise OpProblem(f"output dtype {op.outputs[0].dtype}")
    if axis is None:
        return
    a = _axis(int(axis.reshape(-1)[0]), x.rank)
    _expect(op, tuple(x.shape[d] for d in range(x.rank) if d != a))


def softmax(op: ir.Op) -> None:
    if op.input(0).rank < 1:
        raise OpProblem("a rank-0 input")
    unary(op)


def pool(op: ir.Op) -> None:
    x = op.input(0)
    if x.rank != 4:
        raise OpProblem(f"input rank {x.rank} (must be 4)")
    fh, fw = int(op.options.get("filter_height", 1)), int(op.options.get("filter_width", 1))
    sh, sw = int(op.options.get("stride_h", 1)), int(op.options.get("stride_w", 1))
    if min(fh, fw, sh, sw) < 1:
        raise OpProblem("filter and stride must be positive")
    size = []
    for n, k, s in ((x.shape[1], fh, sh), (x.shape[2], fw, sw)):
        size.append(-(-n // s) if op.options.get("padding") in ("SAME", 0) else (n - k) // s + 1)
    if min(size) < 1 and not any_dynamic(x):
        raise OpProblem("the window is larger than the input")
    _same_dtype(x, op.outputs[0])
    _expect(op, (x.shape[0], size[0], size[1], x.shape[3]))


def pad(op: ir.Op) -> None:
    x, pads_t = op.tensor_inputs(2)
    pads = _const(pads_t, "paddings")
    if pads is None:
        return
    if pads.shape != (x.rank, 2) or (pads < 0).any() and op.opcode == "MIRROR_PAD":
        raise OpProblem(f"paddings {pads.tolist()} for rank {x.rank}")
    if op.opcode == "MIRROR_PAD":
        limit = [d - (1 if op.options.get("mode") in ("REFLECT", 0) else 0) for d in dims(x)]
        if any(p > lim for row, lim in zip(pads.tolist(), limit) for p in row):
            raise OpProblem(f"mirror paddings {pads.tolist()} wider than the input {list(x.shape)}")
    if len(op.inputs) > 2 and op.inputs[2] is not None:
        _same_dtype(x, op.inputs[2])
    _same_dtype(x, op.outputs[0])
    _expect(op, tuple(int(x.shape[d] + pads[d, 0] + pads[d, 1]) for d in range(x.rank)))


def pack(op: ir.Op) -> None:
    first = op.input(0)
    if int(op.options.get("values_count", len(op.inputs))) != len(op.inputs):
        raise OpProblem("values_count differs from the number of inputs")
    axis = _axis(int(op.options.get("axis", 0)), first.rank + 1)
    if any(dims(t) != dims(first) for t in op.tensor_inputs()):
        raise OpProblem("inputs of different shapes")
    _same_dtype(*op.inputs, op.outputs[0])
    shape = list(dims(first))
    shape.insert(axis, len(op.inputs))
    _expect(op, tuple(shape))


def unpack(op: ir.Op) -> None:
    x = op.input(0)
    if x.rank == 0:
        raise OpProblem("a scalar input")
    axis = _axis(int(op.options.get("axis", 0)), x.rank)
    if int(op.options.get("num", 0)) != len(op.outputs) or x.shape[axis] != len(op.outputs):
        raise OpProblem(f"num {op.options.get('num')} with {len(op.outputs)} outputs for {x.shape[axis]} slices")
    for i in range(len(op.outputs)):
        _expect(op, tuple(x.shape[d] for d in range(x.rank) if d != axis), out=i)


def broadcast_to(op: ir.Op) -> None:
    shape = _const(op.inputs[1], "shape")
    if shape is not None:
        _expect(op, _broadcast(dims(op.input(0)), tuple(int(v) for v in shape.reshape(-1))))


def tile(op: ir.Op) -> None:
    x = op.input(0)
    reps = _const(op.inputs[1], "multiples")
    if reps is None:
        return
    if reps.shape != (x.rank,) or (reps < 0).any():
        raise OpProblem(f"multiples {reps.tolist()} for rank {x.rank}")
    _expect(op, tuple(int(x.shape[d] * reps[d]) for d in range(x.rank)))


def shape_of(op: ir.Op) -> None:
    if op.outputs[0].dtype not in INDEX:
        raise OpProblem(f"output dtype {op.outputs[0].dtype}")
    _expect(op, (op.input(0).rank,))


def expand_squeeze(op: ir.Op) -> None:
    reshape(op)


def resize(op: ir.Op) -> None:
    x = op.input(0)
    size = _const(op.inputs[1], "size")
    if x.rank != 4 or (size is not None and (size.shape != (2,) or (size < 1).any())):
        raise OpProblem(f"an input of rank {x.rank} or size {None if size is None else size.tolist()}")
    if size is not None:
        _expect(op, (x.shape[0], int(size[0]), int(size[1]), x.shape[3]))


def lstm(op: ir.Op) -> None:
    x = op.input(0)
    if x.rank != 3:
        raise OpProblem(f"an input of rank {x.rank}")
    w = op.inputs[4]  # input-to-forget weights [units, features]
    if w is None or w.rank != 2 or w.shape[1] != x.shape[2]:
        raise OpProblem("input weights that do not fit the input")
    units = w.shape[0]
    for i in list(range(1, 9)):
        t = op.inputs[i]
        if t is not None and (t.rank != 2 or t.shape[0] != units):
            raise OpProblem(f"weight {i} of shape {list(t.shape)} for {units} units")
    for i in (12, 13, 14, 15):
        t = op.inputs[i]
        if t is not None and dims(t) != (units,):
            raise OpProblem(f"bias {i} of shape {list(t.shape)} for {units} units")
    for i in (18, 19):
        t = op.inputs[i]
        if t is None or not t.is_variable or t.shape[-1] != units:
            raise OpProblem("state tensors that do not fit the units")
    major = bool(op.options.get("time_major"))
    batch = x.shape[1] if major else x.shape[0]
    if op.input(18).rank != 2 or op.input(18).shape[0] != batch or op.input(19).shape[0] != batch:
        raise OpProblem("state tensors that do not fit the batch")
    _expect(op, (*dims(x)[:2], units))


def depth_space(op: ir.Op) -> None:
    x = op.input(0)
    r = int(op.options.get("block_size", 0))
    if x.rank != 4 or r < 1:
        raise OpProblem(f"an input of rank {x.rank} or block size {r}")
    n, h, w, c = dims(x)
    if op.opcode == "DEPTH_TO_SPACE":
        if c % (r * r):
            raise OpProblem(f"{c} channels for block size {r}")
        want = (n, h * r, w * r, c // (r * r))
    else:
        if h % r or w % r:
            raise OpProblem(f"a {h}x{w} input for block size {r}")
        want = (n, h // r, w // r, c * r * r)
    _same_dtype(x, op.outputs[0])
    _expect(op, want)


CHECKS: dict[str, Callable[[ir.Op], None]] = {}
# opcode -> (min inputs, max inputs, outputs)
ARITY: dict[str, tuple] = {}


def _register(check: Callable[[ir.Op], None], arity: tuple, *opcodes: str) -> None:
    for opcode in opcodes:
        CHECKS[opcode] = check
        ARITY[opcode] = arity


_register(unary, (1, 1), "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "ELU",
          "NEG", "ABS", "EXP", "LOG", "SQRT", "RSQRT", "SIN", "COS", "FLOOR", "CEIL", "SIGN", "SQUARE", "CAST",
          "QUANTIZE", "DEQUANTIZE", "LOGICAL_NOT", "ROUND", "LEAKY_RELU", "GELU", "ZEROS_LIKE", "ONES_LIKE")
_register(binary, (2, 2), "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE",
          "FLOOR_DIV", "FLOOR_MOD", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL",
          "LOGICAL_AND", "LOGICAL_OR", "PRELU", "ATAN2", "BITWISE_XOR", "RIGHT_SHIFT")
_register(select, (3, 3), "SELECT", "SELECT_V2")
_register(bitcast, (1, 1), "BITCAST")
_register(conv2d, (2, 3), "CONV_2D")
# the depthwise kernel reads a bias it is not given (a process-killing read past the op's inputs): its bias slot
# must be there, holding a tensor or -1 (which the runtime refuses cleanly)
_register(conv2d, (3, 3), "DEPTHWISE_CONV_2D")
_register(transpose_conv, (3, 4), "TRANSPOSE_CONV")
_register(fully_connected, (2, 3), "FULLY_CONNECTED")
_register(batch_matmul, (2, 2), "BATCH_MATMUL")
_register(reshape, (1, 2), "RESHAPE")
_register(expand_squeeze, (1, 2), "SQUEEZE", "EXPAND_DIMS")
_register(transpose, (2, 2), "TRANSPOSE")
_register(concatenation, (1, 1 << 16), "CONCATENATION")
_register(split, (2, 2, (1, 1 << 16)), "SPLIT")
_register(slice_, (3, 3), "SLICE")
_register(strided_slice, (4, 4), "STRIDED_SLICE")
_register(gather, (2, 2), "GATHER")
_register(gather_nd, (2, 2), "GATHER_ND")
_register(scatter_nd, (3, 3), "SCATTER_ND")
_register(fill, (2, 2), "FILL")
_register(where, (1, 1), "WHERE")
_register(axis_op, (2, 2), "CUMSUM", "REVERSE_V2")
_register(split_v, (3, 3, (1, 1 << 16)), "SPLIT_V")
_register(topk, (2, 2, 2), "TOPK_V2")
_register(embedding_lookup, (2, 2), "EMBEDDING_LOOKUP")
_register(dynamic_update_slice, (3, 3), "DYNAMIC_UPDATE_SLICE")
_register(range_op, (3, 3), "RANGE")
_register(broadcast_args, (2, 2), "BROADCAST_ARGS")
_register(reduce, (2, 2), "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY",
          "REDUCE_ALL")
_register(arg, (2, 2), "ARG_MAX", "ARG_MIN")
_register(softmax, (1, 1), "SOFTMAX", "LOG_SOFTMAX")
_register(pool, (1, 1), "MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D")
_register(pad, (2, 3), "PAD", "PADV2", "MIRROR_PAD")
_register(pack, (1, 1 << 16), "PACK")
_register(unpack, (1, 1, (1, 1 << 16)), "UNPACK")
_register(broadcast_to, (2, 2), "BROADCAST_TO")
_register(tile, (2, 2), "TILE")
_register(shape_of, (1, 1), "SHAPE")
_register(resize, (2, 2), "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
_register(lstm, (20, 24), "UNIDIRECTIONAL_SEQUENCE_LSTM")
_register(depth_space, (1, 1), "DEPTH_TO_SPACE", "SPACE_TO_DEPTH")


def check_op(op: ir.Op) -> None:
    """`op`'s operand counts and its kind's check (raises OpProblem); `op.opcode` must be in CHECKS."""
    _count(op, *ARITY[op.opcode])
    CHECKS[op.opcode](op)
