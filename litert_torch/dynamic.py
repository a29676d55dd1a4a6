"""Dynamic dimensions of ONNX models: `convert_onnx(..., dynamic_dims={"x": {0: 64}})`.

(PyTorch models need none of this: `convert(..., dynamic_shapes=...)` lowers the one traced program with its
dimensions as symbols, `litert_torch.symbolic`. The ONNX frontend has no symbolic shapes yet.)

The ONNX graph is lowered twice with static inputs of two different sizes: the dimensions' maxima and one
less. The two graphs must have the same ops; where their tensors differ in size the dimension is dynamic (-1
in the shape signature), and where a constant operand differs it encodes a size, which is rewritten so that
the runtime computes it:

    RESHAPE new_shape   one dynamic entry -> -1; several -> a shape tensor built from SHAPE of the inputs
    SLICE size          an entry that spans the whole dynamic axis -> -1
    STRIDED_SLICE end   an end at the whole dynamic axis -> that axis's end_mask bit
    a growing constant  (a position table or mask: the shorter lowering's is a prefix of the longer's) -> the
                        constant built at the maximum, SLICEd to the run-time sizes of the model's inputs

Any other size-dependent constant cannot follow the size: the conversion stops with an error naming the op and
the PyTorch source line. The runtime resizes the inputs on each call (EdgeModel accepts any size in range on a
dynamic axis).
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.errors import ConversionError


def _int_const(name: str, values: list[int]) -> ir.Tensor:
    arr = np.array(values, np.int32)
    return ir.Tensor(name, arr.shape, np.int32, arr)


def _where(op: ir.Op) -> str:
    s = op.source
    if s is None:
        return op.opcode
    return f"{op.opcode} (from {s.target} at {s.location})" if s.location else f"{op.opcode} (from {s.target})"


class _Merger:
    def __init__(self, a: ir.Graph, b: ir.Graph, dims: str, a_at_max: bool = False):
        self.a, self.b, self.dims, self.a_at_max = a, b, dims, a_at_max
        self.pairs: dict[int, ir.Tensor] = {}  # id(tensor of a) -> its twin in b
        self.new_ops: list[tuple[int, list[ir.Op]]] = []

    def fail(self, op: ir.Op, what: str) -> ConversionError:
        return ConversionError(f"{_where(op)}: {what}; it depends on the size of {self.dims} and cannot follow it "
                               "at run time (make it static, or use buckets= for one static signature per size)")

    def run(self) -> None:
        a, b = self.a, self.b
        if [op.opcode for op in a.ops] != [op.opcode for op in b.ops]:
            first = next((i for i, (x, y) in enumerate(zip(a.ops, b.ops)) if x.opcode != y.opcode),
                         min(len(a.ops), len(b.ops)))
            op = a.ops[first] if first < len(a.ops) else b.ops[first]
            raise self.fail(op, "the graph's ops differ between two sizes")
        for t, u in zip(a.inputs, b.inputs):
            self._pair(t, u)
        for i, (op, twin) in enumerate(zip(a.ops, b.ops)):
            for t, u in zip(op.inputs, twin.inputs):
                if (t is None) != (u is None):
                    raise self.fail(op, "the operands differ between two sizes")
                if t is not None:
                    self._pair(t, u)
            for t, u in zip(op.outputs, twin.outputs):
                self._pair(t, u)
            self._fix_constants(i, op, twin)
        for at, ops in sorted(self.new_ops, key=lambda item: -item[0]):
            a.ops[at:at] = ops

    def _pair(self, t: ir.Tensor, u: ir.Tensor) -> None:
        if id(t) in self.pairs:
            return
        self.pairs[id(t)] = u
        if t.rank != u.rank:
            raise ConversionError(f"tensor {t.name} changes rank with the size of {self.dims}")
        if t.is_constant:
            return
        if tuple(t.shape) != tuple(u.shape):
            base = t.shape_signature or tuple(t.shape)
            t.shape_signature = tuple(-1 if x != y else s for x, y, s in zip(t.shape, u.shape, base))

    def _fix_constants(self, index: int, op: ir.Op, twin: ir.Op) -> None:
        for k, (t, u) in enumerate(zip(op.inputs, twin.inputs)):
            if t is None or not t.is_constant:
                continue
            same = t.data.shape == u.data.shape and np.array_equal(t.data, u.data)
            if same:
                continue
            if op.opcode == "RESHAPE" and k == 1:
                self._reshape(index, op, twin)
            elif op.opcode == "SLICE" and k == 2:
                op.inputs[2] = self._whole_axis(op, twin, t, u, "size", -1)
            elif op.opcode == "STRIDED_SLICE" and k == 2:
                self._strided_end(op, twin, t, u)
            elif self._is_prefix(t, u) or self._is_prefix(u, t):
                if not (self.a_at_max and self._is_prefix(t, u)):
                    raise self.fail(op, f"its constant operand {k} ({t.name}) grows with the input size; give the "
                                        f"dynamic dimensions a maximum (Dim(..., max=N), N <= {MAX_LOWERING_EXTENT}) "
                                        "so that it is built for the longest input")
                op.inputs[k] = self._sliced_constant(index, op, t, u)
            else:
                raise self.fail(op, f"its constant operand {k} ({t.name}, shape {list(t.shape)}) changes with the "
                                    "input size")

    @staticmethod
    def _is_prefix(t: ir.Tensor, u: ir.Tensor) -> bool:
        """`u` is `t` cut short along some axes (a table or mask built for a shorter input)."""
        if t.data.ndim != u.data.ndim or any(b > a for a, b in zip(t.data.shape, u.data.shape)):
            return False
        return np.array_equal(t.data[tuple(slice(0, n) for n in u.data.shape)], u.data)

    def _runtime_dim(self, op, size_a: int, size_b: int, ops: list, name: str) -> ir.Tensor:
        """A [1] int32 tensor holding, at run time, the model input dimension that is size_a here and size_b in
        the other lowering."""
        for t in self.a.inputs:
            u = self.pairs.get(id(t))
            for m in range(t.rank):
                if u is not None and t.shape[m] == size_a and u.shape[m] == size_b:
                    shape_t = ir.Tensor(f"{name}/shape_of_{t.name}", (t.rank,), np.int32)
                    ops.append(ir.Op("SHAPE", [t], [shape_t], {"out_type": "INT32"}, op.source))
                    piece = ir.Tensor(f"{name}/{t.name}_dim{m}", (1,), np.int32)
                    ops.append(ir.Op("SLICE", [shape_t, _int_const(f"{piece.name}/begin", [m]),
                                               _int_const(f"{piece.name}/size", [1])], [piece], {}, op.source))
                    return piece
        raise self.fail(op, f"a constant grows with a size ({size_a} vs {size_b}) that is no dimension of the "
                            "model's inputs")

    def _sliced_constant(self, index: int, op: ir.Op, t: ir.Tensor, u: ir.Tensor) -> ir.Tensor:
        """SLICE of the constant `t` (built at the maximum sizes) to the run-time sizes of its growing axes."""
        ops: list[ir.Op] = []
        pieces = []
        for axis, (a, b) in enumerate(zip(t.data.shape, u.data.shape)):
            if a == b:
                pieces.append(_int_const(f"{t.name}/size{axis}", [a]))
            else:
                pieces.append(self._runtime_dim(op, a, b, ops, f"{t.name}/size{axis}"))
        size = ir.Tensor(f"{t.name}/runtime_size", (t.rank,), np.int32)
        ops.append(ir.Op("CONCATENATION", pieces, [size], {"axis": 0, "fused_activation_function": "NONE"},
                         op.source))
        out = ir.Tensor(f"{t.name}/sliced", t.shape, t.dtype,
                        shape_signature=tuple(-1 if a != b else a for a, b in zip(t.data.shape, u.data.shape)))
        ops.append(ir.Op("SLICE", [t, _int_const(f"{t.name}/begin", [0] * t.rank), size], [out], {}, op.source))
        self.new_ops.append((index, ops))
        return out

    def _whole_axis(self, op, twin, t, u, what: str, replacement: int) -> ir.Tensor:
        """A per-axis constant whose differing entries are the whole axis in both graphs: set them to
        `replacement`."""
        x, y = op.inputs[0], twin.inputs[0]
        begin_a = op.inputs[1].data.reshape(-1) if op.inputs[1].is_constant else None
        values = t.data.reshape(-1).copy()
        for axis, (va, vb) in enumerate(zip(t.data.reshape(-1), u.data.reshape(-1))):
            if va == vb:
                continue
            start = int(begin_a[axis]) if begin_a is not None else 0
            if va + start != x.shape[axis] or vb + start != y.shape[axis]:
                raise self.fail(op, f"its {what} on axis {axis} ({va} vs {vb}) is not the rest of the axis")
            values[axis] = replacement
        return ir.Tensor(f"{t.name}/dynamic", t.shape, t.dtype, values.reshape(t.shape).astype(t.dtype))

    def _strided_end(self, op, twin, t, u) -> None:
        x, y = op.inputs[0], twin.inputs[0]
        mask = int(op.options.get("end_mask", 0))
        strides = op.inputs[3].data.reshape(-1) if op.inputs[3] is not None and op.inputs[3].is_constant else None
        for axis, (va, vb) in enumerate(zip(t.data.reshape(-1), u.data.reshape(-1))):
            if va == vb:
                continue
            forward = strides is None or strides[axis] > 0
            if not forward or va != x.shape[axis] or vb != y.shape[axis]:
                raise self.fail(op, f"its end on axis {axis} ({va} vs {vb}) is not the end of the axis")
            mask |= 1 << axis
        op.options["end_mask"] = mask

    def _reshape(self, index: int, op: ir.Op, twin: ir.Op) -> None:
        x, y = op.inputs[0], twin.inputs[0]
        new_a = [int(v) for v in op.inputs[1].data.reshape(-1)]
        new_b = [int(v) for v in twin.inputs[1].data.reshape(-1)]
        if len(new_a) != len(new_b):
            raise self.fail(op, "its target rank changes with the input size")
        differing = [k for k, (p, q) in enumerate(zip(new_a, new_b)) if p != q]
        if len(differing) == 1:
            values = list(new_a)
            values[differing[0]] = -1
            shape = np.array(values, np.int32)
            op.inputs[1] = ir.Tensor(f"{op.inputs[1].name}/dynamic", shape.shape, np.int32, shape)
            op.options["new_shape"] = values
            return
        # Several sizes follow the input: take each from the run-time shape of the input or of a graph input
        # that has it as a dimension; at most one left over (a product of sizes, say) becomes -1.
        candidates = [(x, y)] + [(t, self.pairs[id(t)]) for t in self.a.inputs if id(t) in self.pairs]
        source: dict[int, tuple[ir.Tensor, int]] = {}
        unknown = []
        for k in differing:
            found = next(((t, m) for t, u in candidates for m in range(t.rank)
                          if t.shape[m] == new_a[k] and u.shape[m] == new_b[k]), None)
            if found is None:
                unknown.append(k)
            else:
                source[k] = found
        if len(unknown) > 1:
            raise self.fail(op, f"its target dimensions {unknown} are neither dimensions of its input nor of the "
                                "model's inputs")
        name = op.outputs[0].name
        ops: list[ir.Op] = []
        shapes: dict[int, ir.Tensor] = {}
        pieces = []
        for k, value in enumerate(new_a):
            if k in source:
                tensor, axis = source[k]
                if id(tensor) not in shapes:
                    shape_t = ir.Tensor(f"{name}/shape_of_{tensor.name}", (tensor.rank,), np.int32)
                    ops.append(ir.Op("SHAPE", [tensor], [shape_t], {"out_type": "INT32"}, op.source))
                    shapes[id(tensor)] = shape_t
                piece = ir.Tensor(f"{name}/dim{k}", (1,), np.int32)
                begin = ir.Tensor(f"{name}/dim{k}/begin", (1,), np.int32, np.array([axis], np.int32))
                size = ir.Tensor(f"{name}/dim{k}/size", (1,), np.int32, np.array([1], np.int32))
                ops.append(ir.Op("SLICE", [shapes[id(tensor)], begin, size], [piece], {}, op.source))
            else:
                piece = ir.Tensor(f"{name}/dim{k}/static", (1,), np.int32,
                                  np.array([-1 if k in unknown else value], np.int32))
            pieces.append(piece)
        new_shape = ir.Tensor(f"{name}/new_shape", (len(new_a),), np.int32)
        ops.append(ir.Op("CONCATENATION", pieces, [new_shape], {"axis": 0, "fused_activation_function": "NONE"},
                         op.source))
        op.inputs[1] = new_shape
        op.options.pop("new_shape", None)
        self.new_ops.append((index, ops))


def merge(a: ir.Graph, b: ir.Graph, dims: list[str], a_at_max: bool = False) -> None:
    """Make graph `a` run at any size, given `b` (the same model lowered with the dynamic dimensions at another
    size; `a_at_max`: `a` is at their maximum sizes). Raises ConversionError naming what cannot follow the size."""
    _Merger(a, b, ", ".join(dims), a_at_max).run()


# Dimensions bounded at most this large are lowered at their maximum, so that constants that grow with them
# (position tables, masks) are built for the longest input and sliced at run time.
MAX_LOWERING_EXTENT = 8192
