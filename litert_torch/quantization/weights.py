"""The quantization passes of ours that rewrite the IR before a model is written: float16 weights behind a
DEQUANTIZE (`fp16_weights`), and int8 weights per channel for dense layers, embedding tables and gathered expert
tables (`int8_weights`, `int8_gathered_tables`). The int8 modes with activations go through ai-edge-quantizer
(`litert_torch.quantization.quantize`)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

import numpy as np

from litert_torch import ir

FP16_MIN_ELEMENTS = 16
# Ops whose constant inputs are weights that dynamic-range quantization turns into int8.
WEIGHT_OPS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "BATCH_MATMUL",
              "EMBEDDING_LOOKUP", "GATHER"}


# ---- fp16: our own pass -------------------------------------------------------------------------------------
def fp16_weights(graph: ir.Graph, keep: set[int] | None = None) -> int:
    """Store each float32 constant of FP16_MIN_ELEMENTS or more as float16 behind a DEQUANTIZE (one per
    constant, placed first in the graph). `keep`: ids of ops whose inputs stay float32. Returns the count."""
    widened: dict[int, ir.Tensor] = {}
    front: list[ir.Op] = []
    for op in graph.ops:
        if keep and id(op) in keep:
            continue
        for i, t in enumerate(op.inputs):
            if t is None or not t.is_constant or t.dtype != np.float32 or t.size < FP16_MIN_ELEMENTS:
                continue
            if id(t) not in widened:
                half = ir.Tensor(f"{t.name}/fp16", t.shape, np.float16, np.asarray(t.data, np.float16))
                wide = ir.Tensor(t.name, t.shape, np.float32)
                front.append(ir.Op("DEQUANTIZE", [half], [wide], {}, op.source))
                widened[id(t)] = wide
            op.inputs[i] = widened[id(t)]
    graph.ops[:0] = front
    return len(front)


# ---- int8 weights of dense layers and embedding tables: our own pass -----------------------------------------
INT8_WEIGHT_OPS = {"FULLY_CONNECTED": 1, "EMBEDDING_LOOKUP": 1}  # opcode -> index of the weight input


def int8_weights(graphs: Iterable[ir.Graph], *, release: Callable[[np.ndarray], None] | None = None) -> int:
    """Store the float32 weights of FULLY_CONNECTED and EMBEDDING_LOOKUP ops as int8, symmetric per output
    channel (per row of the table): LiteRT's hybrid kernels take them as they are (float activations, int8
    weights, no DEQUANTIZE), as with ai-edge-quantizer's dynamic_wi8_afp32 recipe. Weights that several tensors
    hold (one weight lowered in several signatures, a tied embedding) are quantized once and stay shared.
    Memory: one int8 copy of the weights, made while the graph is walked; nothing else is copied; `release` is
    given each float weight once it is quantized (see `memory.FilePages`). Returns how many weight tensors were
    quantized."""
    done: dict[tuple[int, int, tuple[int, ...]], ir.Tensor] = {}
    count = 0
    for graph in graphs:
        for op in graph.ops:
            index = INT8_WEIGHT_OPS.get(op.opcode)
            if index is None or len(op.inputs) <= index:
                continue
            w = op.inputs[index]
            if w is None or not w.is_constant or w.dtype != np.float32 or w.rank != 2:
                continue
            key = (w.values.ctypes.data, w.values.nbytes, w.shape)
            if key not in done:
                q, scale = _int8_rows(np.asarray(w.data, np.float32), release=release)
                done[key] = ir.Tensor(f"{w.name}/int8", w.shape, np.int8, q, quantization=ir.Quantization(
                    tuple(float(v) for v in scale), (0,) * len(scale), 0))
                count += 1
            op.inputs = [done[key] if i == index else t for i, t in enumerate(op.inputs)]
    return count


def int8_gathered_tables(graphs: Iterable[ir.Graph], *, release: Callable[[np.ndarray], None] | None = None) -> int:
    """Store the constant float32 [E, A, B] tables that a GATHER reads along axis 0 as int8: the experts' tables
    of a mixture-of-experts layer, symmetric per (expert, output channel), so that each output channel of each
    expert has its own scale. The channel axis is the one the table's products keep: B where the table is a
    right operand as stored (x [.., A] @ table[e], a column times it summed over A), A where it is read as
    [out, in] (a BATCH_MATMUL with adj_y, a row times it summed over B). A table read both ways stays float.

    A GATHER of the table (the experts a token picks) becomes a GATHER of the int8 table and of its scales, and
    a CAST: a token reads a quarter of the bytes. Where every reader of the gathered table can take the scales
    after its own work (`_reader_plan`: a product against it, a sum of it times a row or column), the scales
    multiply those results, the widened table never scaled whole. Where every reader is rows times the gathered
    tables summed along the rows (a few tokens' expert projections), those are FULLY_CONNECTEDs of each row by
    its table's rows taken as int8 (LiteRT's hybrid kernel: float row, int8 weights, per-tensor scale 1; one row
    times all the gathered tables is one product), with no widened copy at all. Otherwise a MUL scales the
    widened table. A BATCH_MATMUL that reads such a table whole as its right operand (each expert's first tile
    of a prefill chunk, multiplied in place) takes the int8 table as it is, LiteRT's hybrid product, and its
    result is multiplied by the scales. Tables of other ranks (position tables, embeddings) are left alone.
    Tables several ops read are quantized once. Returns how many tables were quantized."""
    graphs = list(graphs)

    def key_of(w: ir.Tensor) -> tuple[int, int, tuple[int, ...]]:
        return (w.values.ctypes.data, w.values.nbytes, tuple(w.shape))

    def gathered(op: ir.Op) -> ir.Tensor | None:
        w = op.inputs[0] if op.opcode == "GATHER" and op.inputs else None
        if (w is None or not w.is_constant or w.dtype != np.float32 or w.rank != 3
                or op.options.get("axis", 0) != 0 or op.options.get("batch_dims", 0) != 0
                or not all(isinstance(d, int) for d in op.outputs[0].shape)):
            return None
        return w

    def whole_product_axis(op: ir.Op) -> int | None:
        """The channel axis of the table a BATCH_MATMUL reads whole as its right operand, if it does."""
        w = op.inputs[1] if op.opcode == "BATCH_MATMUL" and len(op.inputs) > 1 else None
        if (w is None or not w.is_constant or w.rank != 3 or key_of(w) not in tables or op.options.get("adj_x")
                or op.input(0).dtype != np.float32 or op.outputs[0].rank != 3):
            return None
        return 1 if op.options.get("adj_y") else 2

    readers = [graph.consumers() for graph in graphs]
    tables = {key_of(w) for graph in graphs for op in graph.ops if (w := gathered(op)) is not None}
    # the channel axis of each table: every product or sum that reads it must keep the same one
    axes: dict[tuple, set[int]] = {key: set() for key in tables}
    for graph, uses in zip(graphs, readers):
        for op in graph.ops:
            w = gathered(op)
            if w is not None:
                for reader in uses.get(op.outputs[0], []):
                    plan = _reader_plan(op.outputs[0], reader, uses, graph.outputs)
                    if plan is not None:
                        axes[key_of(w)].add(plan.axis)
            elif (axis := whole_product_axis(op)) is not None:
                axes[key_of(op.input(1))].add(axis)
    axis_of = {key: (next(iter(found)) if found else 2) for key, found in axes.items() if len(found) <= 1}

    done: dict[tuple, _Int8Table] = {}

    def quantized(w: ir.Tensor) -> _Int8Table | None:
        key = key_of(w)
        if key not in axis_of:
            return None
        if key not in done:
            done[key] = _Int8Table(w, axis_of[key], release)
        return done[key]

    for graph, uses in zip(graphs, readers):
        later: dict[int, Callable[[ir.Op], list[ir.Op]]] = {}  # op id -> the ops to emit in its place
        dropped: set[int] = set()
        ops: list[ir.Op] = []
        for op in graph.ops:
            if id(op) in dropped:
                continue
            if id(op) in later:
                ops += later.pop(id(op))(op)
                continue
            w = gathered(op)
            table = quantized(w) if w is not None else None
            if table is not None:
                ops += table.gather(op, uses, graph.outputs, later, dropped)
                continue
            if whole_product_axis(op) is not None and (table := quantized(op.input(1))) is not None:
                ops += _scaled(op, op.outputs[0], table.scales(), [op.inputs[0], table.product])
                continue
            ops.append(op)
        graph.ops = ops
    return len(done)


def _scaled(op: ir.Op, out: ir.Tensor, scale: ir.Tensor, inputs: list | None = None) -> list[ir.Op]:
    """`op` (on `inputs`, by default its own) computing its output unscaled, then that times `scale`."""
    unscaled = ir.Tensor(f"{out.name}/unscaled", out.shape, out.dtype)
    return [ir.Op(op.opcode, list(inputs or op.inputs), [unscaled], dict(op.options), op.source),
            ir.Op("MUL", [unscaled, scale], [out], {"fused_activation_function": "NONE"}, op.source)]


class _Plan:
    """How one reader of a gathered [P, A, B] table takes the scales after its own work: the channel `axis` it
    keeps (1: A, 2: B), the op whose `result` gets scaled, the scales' `form` (gathered as [P, 1, C] "b",
    [P, C, 1] "c1" or [P, C] "rows"), and for a product summed later, the MUL and its other operand."""

    __slots__ = ("axis", "op", "result", "form", "mul", "other")

    def __init__(self, axis: int, op: ir.Op, result: ir.Tensor, form: str, mul: ir.Op | None = None,
                 other: ir.Tensor | None = None):
        self.axis, self.op, self.result, self.form, self.mul, self.other = axis, op, result, form, mul, other

    def row_products(self, table: ir.Tensor) -> bool:
        """Rows [P, 1, B] (or one row [1, 1, B]) times the gathered [A, B] tables, summed along the rows into
        [P, A]: products of a row by each table's rows."""
        p, _, b = table.shape
        return self.form == "rows" and self.axis == 1 and self.other is not None \
            and list(self.other.shape) in ([1, 1, b], [p, 1, b])


_FORMS = {"b": lambda e, c: [e, 1, c], "c1": lambda e, c: [e, c, 1], "rows": lambda e, c: [e, c]}  # scale shapes


def _reader_plan(table: ir.Tensor, op: ir.Op, readers: dict[ir.Tensor, list[ir.Op]],
                 outputs: list[ir.Tensor]) -> _Plan | None:
    """How `op`, a reader of the gathered table [P, A, B], can take the table's scales after its own work, or
    None where it cannot:
    - a BATCH_MATMUL with the table as its right operand: its result's columns are the table's channels (B, or A
      with adj_y);
    - a MUL by a [P, A, 1] column read only by a SUM over A (x . table[:, :, c] for every c: channels B), or by a
      [P, 1, B] row read only by a SUM over B (channels A)."""
    if table in outputs or table.rank != 3:
        return None
    p, a, b = table.shape
    if op.opcode == "BATCH_MATMUL":
        if (op.inputs[1] is table and op.inputs[0] is not table and not op.options.get("adj_x")
                and op.outputs[0].rank == 3):
            return _Plan(1 if op.options.get("adj_y") else 2, op, op.outputs[0], "b")
        return None
    other = [t for t in op.inputs if t is not table]
    if (op.opcode != "MUL" or len(other) != 1 or other[0] is None or other[0].rank != 3
            or op.options.get("fused_activation_function", "NONE") != "NONE"):
        return None
    sums = readers.get(op.outputs[0], [])
    if len(sums) != 1 or op.outputs[0] in outputs:
        return None
    total = sums[0]
    axes = total.inputs[1] if total.opcode == "SUM" and len(total.inputs) > 1 else None
    if axes is None or not axes.is_constant or np.size(axes.values) != 1:
        return None
    over = int(np.ravel(axes.values)[0]) % 3
    if over == 1 and other[0].shape[2] == 1:
        axis, channels = 2, b
    elif over == 2 and other[0].shape[1] == 1:
        axis, channels = 1, a
    else:
        return None
    result = total.outputs[0]
    if total.options.get("keep_dims"):
        return _Plan(axis, total, result, "b" if axis == 2 else "c1", op, other[0])
    if list(result.shape) == [p, channels]:
        return _Plan(axis, total, result, "rows", op, other[0])
    return None  # the row or column was broadcast over more tables than were gathered


class _Int8Table:
    """One table's int8 values (plain, and as the per-tensor-scale-1 operand of LiteRT's hybrid kernels) and
    its scales per (expert, channel), in the forms its readers take them."""

    def __init__(self, w: ir.Tensor, axis: int, release: Callable[[np.ndarray], None] | None):
        self.w, self.axis = w, axis
        data = np.asarray(w.data, np.float32)
        q, scale = _int8_columns(data, release=release) if axis == 2 else _int8_matrix_rows(data, release)
        self.int8 = ir.Tensor(f"{w.name}/int8", w.shape, np.int8, q)
        self.product = ir.Tensor(f"{w.name}/int8_product", w.shape, np.int8, q,
                                 quantization=ir.Quantization((1.0,), (0,), 0))
        self._scale = scale  # [E, C]
        self._forms: dict[str, ir.Tensor] = {}

    def scales(self, form: str = "b") -> ir.Tensor:
        """The scales as a constant: [E, 1, C] ("b"), [E, C, 1] ("c1") or [E, C] ("rows")."""
        if form not in self._forms:
            shape = _FORMS[form](*self._scale.shape)
            self._forms[form] = ir.Tensor(f"{self.w.name}/scale" + ("" if form == "b" else f"_{form}"), shape,
                                          np.float32, self._scale.reshape(shape))
        return self._forms[form]

    def gather(self, op: ir.Op, readers: dict, outputs: list, later: dict, dropped: set) -> list[ir.Op]:
        """The ops replacing GATHER `op` of this table; readers to rewrite when met go into `later` (their
        replacements) and `dropped`."""
        out, indices = op.outputs[0], op.input(1)
        channels = self.w.shape[self.axis]
        uses = readers.get(out, []) if out.rank == 3 else []
        found = [_reader_plan(out, reader, readers, outputs) for reader in uses]
        plans = [plan for plan in found if plan is not None]
        usable = bool(uses) and len(plans) == len(found) and all(plan.axis == self.axis for plan in plans) \
            and not any(id(plan.op) in later for plan in plans)
        hybrid = usable and all(plan.row_products(out) for plan in plans)
        ops: list[ir.Op] = []
        picked = ir.Tensor(f"{out.name}/int8", out.shape, np.int8,
                           quantization=self.product.quantization if hybrid else None)
        ops.append(ir.Op("GATHER", [self.product if hybrid else self.int8, indices], [picked], dict(op.options),
                         op.source))
        made: dict[str, ir.Tensor] = {}

        def scale(form: str) -> ir.Tensor:
            if form not in made:
                shape = [*indices.shape, *_FORMS[form](1, channels)[1:]]
                made[form] = ir.Tensor(f"{out.name}/scale" + ("" if form == "b" else f"/{form}"), shape, np.float32)
                ops.append(ir.Op("GATHER", [self.scales(form), indices], [made[form]], dict(op.options),
                                 op.source))
            return made[form]

        if hybrid:  # int8 rows times float rows: FULLY_CONNECTEDs, their results read as [P, A]
            p, a, b = out.shape
            rows = None
            for plan in plans:
                dropped.add(id(plan.mul))
                other = plan.other
                if other is None:  # never: row_products holds for every plan here
                    raise TypeError("a row-product plan without the operand it multiplies")
                if list(other.shape) == [1, 1, b]:  # one row: one product with all [P * A, B] rows
                    if rows is None:
                        rows = ir.Tensor(f"{out.name}/rows", [p * a, b], np.int8,
                                         quantization=self.product.quantization)
                        ops.append(ir.Op("RESHAPE", [picked, _shape_const(rows)], [rows], {"new_shape": [p * a, b]},
                                         op.source))
                    make = functools.partial(_row_product, other, rows, plan.result, scale("rows"))
                else:  # a row per table: a product each
                    make = functools.partial(_row_products, other, picked, plan.result, scale("rows"))
                later[id(plan.op)] = make
            return ops
        if usable:  # the widened table itself is not scaled, its readers' results are
            for plan in plans:
                later[id(plan.op)] = functools.partial(_scaled, out=plan.result, scale=scale(plan.form))
            ops.append(ir.Op("CAST", [picked], [out], {}, op.source))
            return ops
        widened = ir.Tensor(f"{out.name}/float", out.shape, np.float32)
        ops.append(ir.Op("CAST", [picked], [widened], {}, op.source))
        ops.append(ir.Op("MUL", [widened, scale("b" if self.axis == 2 else "c1")], [out],
                         {"fused_activation_function": "NONE"}, op.source))
        return ops


def _shape_const(t: ir.Tensor) -> ir.Tensor:
    return ir.Tensor(f"{t.name}/shape", [t.rank], np.int32, np.array(t.shape, np.int32))


def _fully_connected(x: ir.Tensor, weights: ir.Tensor, out: ir.Tensor, source: Any) -> ir.Op:
    return ir.Op("FULLY_CONNECTED", [x, weights, None], [out], {
        "fused_activation_function": "NONE", "keep_num_dims": False, "asymmetric_quantize_inputs": False}, source)


def _slice0(x: ir.Tensor, index: int, out: ir.Tensor, source: Any) -> ir.Op:
    """x[index:index + 1] along the first axis."""
    begin = np.zeros(x.rank, np.int32)
    begin[0] = index
    return ir.Op("SLICE", [x, ir.Tensor(f"{out.name}/begin", [x.rank], np.int32, begin),
                           ir.Tensor(f"{out.name}/size", [x.rank], np.int32, np.array(out.shape, np.int32))],
                 [out], {}, source)


def _row_products(rows: ir.Tensor, tables: ir.Tensor, result: ir.Tensor, scale: ir.Tensor,
                  total: ir.Op) -> list[ir.Op]:
    """In place of SUM `total` of rows [P, 1, B] times gathered int8 `tables` [P, A, B]: a hybrid
    FULLY_CONNECTED of each row by its table's rows, the [1, A] results joined into `result` [P, A] and
    scaled."""
    p, a, b = tables.shape
    ops, parts = [], []
    for j in range(p):
        table = ir.Tensor(f"{result.name}/table_{j}", [1, a, b], np.int8, quantization=tables.quantization)
        matrix = ir.Tensor(f"{result.name}/matrix_{j}", [a, b], np.int8, quantization=tables.quantization)
        row = ir.Tensor(f"{result.name}/row_{j}", [1, 1, b], np.float32)
        part = ir.Tensor(f"{result.name}/product_{j}", [1, a], np.float32)
        ops += [_slice0(tables, j, table, total.source),
                ir.Op("RESHAPE", [table, _shape_const(matrix)], [matrix], {"new_shape": [a, b]}, total.source),
                _slice0(rows, j, row, total.source),
                _fully_connected(row, matrix, part, total.source)]
        parts.append(part)
    unscaled = ir.Tensor(f"{result.name}/unscaled", result.shape, np.float32)
    ops.append(ir.Op("CONCATENATION", [*parts], [unscaled], {"axis": 0, "fused_activation_function": "NONE"},
                     total.source))
    ops.append(ir.Op("MUL", [unscaled, scale], [result], {"fused_activation_function": "NONE"}, total.source))
    return ops


def _row_product(row: ir.Tensor, rows: ir.Tensor, result: ir.Tensor, scale: ir.Tensor, total: ir.Op) -> list[ir.Op]:
    """In place of SUM `total` of row [1, 1, B] times gathered tables (their int8 `rows` [P * A, B]): a hybrid
    FULLY_CONNECTED, its [1, P * A] result read as `result` [P, A] and scaled."""
    product = ir.Tensor(f"{result.name}/product", [1, rows.shape[0]], np.float32)
    unscaled = ir.Tensor(f"{result.name}/unscaled", result.shape, np.float32)
    return [_fully_connected(row, rows, product, total.source),
            ir.Op("RESHAPE", [product, _shape_const(unscaled)], [unscaled], {"new_shape": list(result.shape)},
                  total.source),
            ir.Op("MUL", [unscaled, scale], [result], {"fused_activation_function": "NONE"}, total.source)]


def _int8_matrix_rows(data: np.ndarray, release: Callable[[np.ndarray], None] | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """`_int8_rows` of each matrix of `data` [E, A, B] (scales [E, A]), a matrix at a time."""
    q = np.empty(data.shape, np.int8)
    scale = np.empty(data.shape[:2], np.float32)
    for i, m in enumerate(data):
        q[i], scale[i] = _int8_rows(np.asarray(m, np.float32))
        if release is not None:
            release(m)
    return q, scale


def _int8_columns(data: np.ndarray, release: Callable[[np.ndarray], None] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`_int8_rows` per column of each matrix of `data` [..., K, N] (scales [..., N]), a matrix at a time so
    that the float temporaries stay small; `release` is given each matrix of `data` once it is read."""
    matrices = data.reshape(-1, *data.shape[-2:])
    q = np.empty(matrices.shape, np.int8)
    scale = np.empty((matrices.shape[0], matrices.shape[-1]), np.float32)
    for i, m in enumerate(matrices):
        q_t, scale[i] = _int8_rows(np.ascontiguousarray(m.T))
        q[i] = q_t.T
        if release is not None:
            release(m)
    return q.reshape(data.shape), scale.reshape(*data.shape[:-2], data.shape[-1])


def _int8_rows(data: np.ndarray, block: int = 4096, release: Callable[[np.ndarray], None] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row (scale = max |row| / 127; an all-zero row gets scale 1), a block of rows at a
    time so that the float temporaries stay small; `release` is given each block of `data` once it is read."""
    scale = np.empty(data.shape[0], np.float32)
    q = np.empty(data.shape, np.int8)
    for start in range(0, data.shape[0], block):
        rows = data[start:start + block]
        s = np.maximum(rows.max(axis=1), -rows.min(axis=1)) / np.float32(127.0)
        s = np.where(s > 0, s, np.float32(1.0)).astype(np.float32)
        scaled = rows / s[:, None]
        if release is not None:
            release(rows)
        np.rint(scaled, out=scaled)
        np.clip(scaled, -127, 127, out=scaled)
        q[start:start + block] = scaled
        scale[start:start + block] = s
    return q, scale
