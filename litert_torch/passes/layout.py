"""Layout pass: sink transposes towards the outputs and cancel the pairs that meet.

Lowerings of layout-sensitive ops wrap themselves in TRANSPOSEs (NCHW -> NHWC before, back after). This pass
moves each TRANSPOSE below the layout-agnostic ops that read it (elementwise ops, concatenation, reductions),
permuting their constants and axes, until it meets the inverse TRANSPOSE of the next conv or pool and both
vanish. Transposes that only move dimensions of size 1 become reshapes.

    TRANSPOSE(0,3,1,2) -> RELU -> TRANSPOSE(0,2,3,1) -> CONV_2D       RELU -> CONV_2D
                 before                                        after

Guarantee: the graph computes the same values; every op that reads a TRANSPOSE output and could take the
untransposed tensor instead now does, so a conv net keeps at most the transposes at its inputs and outputs.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.symbolic import DynamicSizeError, is_static

ELEMENTWISE_UNARY = {
    "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "GELU", "LEAKY_RELU", "ELU",
    "NEG", "ABS", "EXP", "LOG", "SQRT", "RSQRT", "SIN", "COS", "FLOOR", "CEIL", "SIGN", "CAST", "SQUARE",
    "QUANTIZE", "DEQUANTIZE",
}
ELEMENTWISE_BINARY = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "PRELU"}
REDUCTIONS = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"}
MAX_SWEEPS = 50


def perm_of(op: ir.Op) -> list[int] | None:
    if op.opcode != "TRANSPOSE" or not op.input(1).is_constant:
        return None
    return [int(p) for p in op.input(1).values]


def inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def is_reshape_like(shape: tuple[int, ...], perm: list[int]) -> bool:
    """True when transposing `shape` by `perm` keeps the order of all dimensions larger than 1."""
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


class LayoutPass:
    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.producers = graph.producers()

    def run(self) -> bool:
        changed_any = False
        for _ in range(MAX_SWEEPS):
            if not self._sweep():
                break
            changed_any = True
        return changed_any

    # ---- one sweep in topological order --------------------------------------------------------------------
    def _sweep(self) -> bool:
        changed = False
        new_ops: list[ir.Op] = []
        for op in self.graph.ops:
            try:
                replacement = self._rewrite(op)
            except DynamicSizeError:
                replacement = None  # the rewrite needs a size known only at run time
            if replacement is None:
                new_ops.append(op)
                continue
            changed = True
            new_ops.extend(replacement)
            for new in replacement:
                for t in new.outputs:
                    self.producers[t] = new
        self.graph.ops = new_ops
        return changed

    def _input_perm(self, t: ir.Tensor | None) -> list[int] | None:
        producer = self.producers.get(t) if t is not None else None
        return perm_of(producer) if producer is not None else None

    def _rewrite(self, op: ir.Op) -> list[ir.Op] | None:
        if op.opcode == "TRANSPOSE":
            return self._fold_transpose(op)
        if op.opcode in ELEMENTWISE_UNARY:
            return self._sink(op, [0])
        if op.opcode in ELEMENTWISE_BINARY:
            return self._sink(op, [0, 1])
        if op.opcode == "CONCATENATION":
            return self._sink(op, list(range(len(op.inputs))), axis_key="axis")
        if op.opcode in REDUCTIONS:
            return self._sink_reduction(op)
        if op.opcode == "RESHAPE":
            return self._sink_reshape(op)
        if op.opcode in ("SPLIT", "SPLIT_V"):
            return self._sink_split(op)
        if op.opcode in ("SLICE", "STRIDED_SLICE"):
            return self._sink_slice(op)
        if op.opcode in ("PAD", "PADV2", "MIRROR_PAD"):
            return self._sink_pad(op)
        if op.opcode in ("BROADCAST_TO", "TILE"):
            return self._sink_broadcast(op)
        return None

    def _fold_transpose(self, op: ir.Op) -> list[ir.Op] | None:
        """T_q(T_p(x)) -> T_(p.q)(x); the inner transpose dies when nothing else reads it."""
        perm = perm_of(op)
        x = op.input(0)
        inner = self._input_perm(x)
        if perm is None or inner is None:
            return None
        return [transpose_op(self.producers[x].input(0), [inner[p] for p in perm], op.outputs[0], op.source)]

    def _sink(self, op: ir.Op, positions: list[int], axis_key: str | None = None) -> list[ir.Op] | None:
        """op(T_p(x1), T_p(x2), const) -> T_p(op(x1, x2, const')).

        Operands may also be constants (permuted here) or tensors (of any rank that broadcasts) that transposing
        by p^-1 would only reshape.
        """
        out = op.outputs[0]
        perms = {i: self._input_perm(op.inputs[i]) for i in positions
                 if op.inputs[i] is not None and not op.input(i).is_constant}
        found = {tuple(p) for p in perms.values() if p is not None}
        if len(found) != 1:
            return None
        perm = list(found.pop())
        inv = inverse(perm)
        for i, p in perms.items():
            operand = op.input(i)
            padded = (1,) * (out.rank - operand.rank) + operand.shape
            if (p is not None and operand.rank != out.rank) or (p is None and not is_reshape_like(padded, inv)):
                return None
        extra: list[ir.Op] = []
        new_inputs = list(op.inputs)
        for i in positions:
            t = op.inputs[i]
            if t is None:
                continue
            if t.is_constant:
                if t.rank > out.rank:
                    return None
                if t.size != 1:
                    data = np.transpose(t.values.reshape((1,) * (out.rank - t.rank) + t.shape), inv)
                    new_inputs[i] = ir.Tensor(ir.derived_name(t.name, "nhwc"), data.shape, t.dtype, data)
            elif perms[i] is None:
                padded = (1,) * (out.rank - t.rank) + t.shape
                moved_t = ir.Tensor(ir.derived_name(t.name, "nhwc"), [padded[d] for d in inv], t.dtype,
                                    quantization=t.quantization)
                extra.append(reshape_op(t, moved_t, op.source))
                new_inputs[i] = moved_t
            else:
                new_inputs[i] = self.producers[t].input(0)
        inner_out = ir.Tensor(ir.derived_name(out.name, "pre"), [out.shape[i] for i in inv], out.dtype,
                              quantization=out.quantization)
        options = dict(op.options)
        if axis_key is not None:
            axis = options[axis_key]
            options[axis_key] = perm[axis if axis >= 0 else axis + out.rank]
        moved = ir.Op(op.opcode, new_inputs, [inner_out], options, op.source)
        return [*extra, moved, transpose_op(inner_out, perm, out, op.source)]

    def _sink_reduction(self, op: ir.Op) -> list[ir.Op] | None:
        x, axes_t = op.input(0), op.input(1)
        perm = self._input_perm(x)
        if perm is None or not axes_t.is_constant:
            return None
        source = self.producers[x].input(0)
        rank = x.rank
        axes = sorted({int(a) + rank if a < 0 else int(a) for a in axes_t.values.reshape(-1)})
        new_axes = sorted(perm[a] for a in axes)
        out = op.outputs[0]
        if op.options.get("keep_dims"):
            inner_shape = [1 if i in new_axes else d for i, d in enumerate(source.shape)]
            out_perm = perm
        else:
            kept_source = [i for i in range(rank) if i not in new_axes]  # source dims that survive, in order
            inner_shape = [source.shape[i] for i in kept_source]
            out_perm = [kept_source.index(perm[i]) for i in range(rank) if i not in axes]
        data = np.array(new_axes, np.int32)
        new_axes_t = ir.Tensor(ir.derived_name(axes_t.name, "nhwc"), data.shape, np.int32, data)
        inner_out = ir.Tensor(ir.derived_name(out.name, "pre"), inner_shape, out.dtype, quantization=out.quantization)
        moved = ir.Op(op.opcode, [source, new_axes_t], [inner_out], dict(op.options), op.source)
        return [moved, transpose_op(inner_out, out_perm, out, op.source)]

    def _sink_reshape(self, op: ir.Op) -> list[ir.Op] | None:
        """RESHAPE(T_p(x)) -> T_q(RESHAPE'(T_r(x))): the reshape runs on the untransposed tensor and the transpose
        moves below it. Unit dims are free; each group of (non-unit) axes the reshape merges or splits must be
        contiguous among x's non-unit axes. T_r reorders axes inside such groups only (the one real data
        movement of a channel shuffle) and is left out when it is the identity."""
        x, out = op.input(0), op.outputs[0]
        perm = self._input_perm(x)
        if perm is None:
            return None
        y_axes = [i for i in range(x.rank) if x.shape[i] != 1]
        out_axes = [j for j in range(out.rank) if out.shape[j] != 1]
        groups = reshape_groups(tuple(x.shape[i] for i in y_axes), tuple(out.shape[j] for j in out_axes))
        if groups is None:
            return None
        source = self.producers[x].input(0)
        x_axes = [a for a in range(source.rank) if source.shape[a] != 1]  # non-unit axes of x, in order
        rank_of = {a: r for r, a in enumerate(x_axes)}
        reordered = list(x_axes)
        placed = []
        for src, dst in groups:
            ranks = [rank_of[perm[y_axes[i]]] for i in src]
            start = min(ranks)
            if sorted(ranks) != list(range(start, start + len(ranks))):
                return None
            reordered[start:start + len(ranks)] = [x_axes[r] for r in ranks]
            placed.append((start, [out_axes[j] for j in dst]))
        placed.sort(key=lambda item: item[0])
        order = [a for _, dst in placed for a in dst]
        for j in range(out.rank):  # unit dims of the output go next to their neighbour, keeping q simple
            if j not in order:
                order.insert(order.index(j - 1) + 1 if j > 0 else 0, j)
        q = [order.index(a) for a in range(out.rank)]
        ops: list[ir.Op] = []
        if reordered != x_axes:
            inner = list(range(source.rank))
            for position, axis in zip(x_axes, reordered):
                inner[position] = axis
            shuffled = ir.Tensor(ir.derived_name(out.name, "shuffled"), [source.shape[a] for a in inner], source.dtype,
                                 quantization=source.quantization)
            ops.append(transpose_op(source, inner, shuffled, op.source))
            source = shuffled
        inner_out = ir.Tensor(ir.derived_name(out.name, "pre"), [out.shape[a] for a in order], out.dtype,
                              quantization=out.quantization)
        return [*ops, reshape_op(source, inner_out, op.source), transpose_op(inner_out, q, out, op.source)]

    def _sink_slice(self, op: ir.Op) -> list[ir.Op] | None:
        """SLICE / STRIDED_SLICE(T_p(x)) -> T_q(slice of x with the bounds permuted); axes a strided slice
        shrinks away drop out of the permutation (which often leaves the identity)."""
        x, out = op.input(0), op.outputs[0]
        perm = self._input_perm(x)
        bounds = op.tensor_inputs()[1:]
        if perm is None or not all(b.is_constant for b in bounds):
            return None
        options = dict(op.options)
        shrink = 0
        if op.opcode == "STRIDED_SLICE":
            if any(options.get(k) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "offset")):
                return None
            shrink = int(options.get("shrink_axis_mask", 0))
            options["shrink_axis_mask"] = sum(1 << perm[i] for i in range(x.rank) if shrink >> i & 1)
        inv = inverse(perm)
        new_bounds = []
        for b in bounds:
            values = b.values.reshape(-1)
            data = np.array([values[inv[a]] for a in range(x.rank)], np.int32)
            new_bounds.append(ir.Tensor(ir.derived_name(b.name, "moved"), data.shape, np.int32, data))
        kept_y = [i for i in range(x.rank) if not shrink >> i & 1]
        kept_x = [a for a in range(x.rank) if not options.get("shrink_axis_mask", 0) >> a & 1]
        q = [kept_x.index(perm[i]) for i in kept_y]
        inner_out = ir.Tensor(ir.derived_name(out.name, "pre"), [out.shape[q.index(j)] for j in range(len(q))],
                              out.dtype, quantization=out.quantization)
        moved = ir.Op(op.opcode, [self.producers[x].input(0), *new_bounds], [inner_out], options, op.source)
        return [moved, transpose_op(inner_out, q, out, op.source)]

    def _sink_pad(self, op: ir.Op) -> list[ir.Op] | None:
        """PAD(T_p(x), paddings) -> T_p(PAD(x, paddings with rows permuted)). A transpose of a graph input stays
        above the pad: nothing above it could cancel it, and it would move more data below."""
        x, paddings, out = op.input(0), op.input(1), op.outputs[0]
        perm = self._input_perm(x)
        if perm is None or not paddings.is_constant or self.producers[x].input(0) in self.graph.inputs:
            return None
        inv = inverse(perm)
        rows = paddings.values.reshape(-1, 2)
        moved = np.ascontiguousarray(rows[inv]).astype(np.int32)
        new_paddings = ir.Tensor(ir.derived_name(paddings.name, "moved"), moved.shape, np.int32, moved)
        inner_out = ir.Tensor(ir.derived_name(out.name, "pre"), [out.shape[i] for i in inv], out.dtype,
                              quantization=out.quantization)
        pad = ir.Op(op.opcode, [self.producers[x].input(0), new_paddings, *op.inputs[2:]], [inner_out],
                    dict(op.options), op.source)
        return [pad, transpose_op(inner_out, perm, out, op.source)]

    def _sink_broadcast(self, op: ir.Op) -> list[ir.Op] | None:
        """BROADCAST_TO / TILE(T_p(x), shape) -> T_p(BROADCAST_TO / TILE(x, shape permuted))."""
        x, shape_t, out = op.input(0), op.input(1), op.outputs[0]
        perm = self._input_perm(x)
        if perm is None or not shape_t.is_constant or x.rank != out.rank:
            return None
        inv = inverse(perm)
        values = shape_t.values.reshape(-1)
        moved = np.array([values[i] for i in inv], shape_t.dtype)
        new_shape = ir.Tensor(ir.derived_name(shape_t.name, "moved"), moved.shape, moved.dtype, moved)
        inner_out = ir.Tensor(ir.derived_name(out.name, "pre"), [out.shape[i] for i in inv], out.dtype,
                              quantization=out.quantization)
        moved_op = ir.Op(op.opcode, [self.producers[x].input(0), new_shape], [inner_out], dict(op.options), op.source)
        return [moved_op, transpose_op(inner_out, perm, out, op.source)]

    def _sink_split(self, op: ir.Op) -> list[ir.Op] | None:
        """SPLIT(T_p(x), axis) -> T_p(SPLIT(x, p[axis])) for each output."""
        data_index, axis_index = (1, 0) if op.opcode == "SPLIT" else (0, 2)
        x, axis_t = op.input(data_index), op.input(axis_index)
        perm = self._input_perm(x)
        if perm is None or not axis_t.is_constant:
            return None
        axis = int(axis_t.values.reshape(-1)[0])
        axis = axis + x.rank if axis < 0 else axis
        inv = inverse(perm)
        new_axis = np.array(perm[axis], np.int32)
        inputs = list(op.inputs)
        inputs[data_index] = self.producers[x].input(0)
        inputs[axis_index] = ir.Tensor(ir.derived_name(axis_t.name, "moved"), (), np.int32, new_axis)
        inner_outs = [ir.Tensor(ir.derived_name(o.name, "pre"), [o.shape[i] for i in inv], o.dtype,
                                quantization=o.quantization) for o in op.outputs]
        moved = ir.Op(op.opcode, inputs, inner_outs, dict(op.options), op.source)
        return [moved, *[transpose_op(i, perm, o, op.source) for i, o in zip(inner_outs, op.outputs)]]


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Split a reshape into groups of source axes and the destination axes they become (equal products),
    cutting wherever both prefix products agree. None for empty tensors."""
    if 0 in src or 0 in dst:
        return None
    prefix_src = np.cumprod([1, *src]).tolist()
    prefix_dst = np.cumprod([1, *dst]).tolist()
    cuts = sorted(set(prefix_src) & set(prefix_dst))
    groups, i0, j0 = [], 0, 0
    for value in cuts:
        i1 = max(i for i, v in enumerate(prefix_src) if v == value)
        j1 = max(j for j, v in enumerate(prefix_dst) if v == value)
        if (i1, j1) != (i0, j0):
            groups.append((list(range(i0, i1)), list(range(j0, j1))))
            i0, j0 = i1, j1
    if i0 != len(src) or j0 != len(dst):
        if prefix_src[-1] != prefix_dst[-1]:
            return None
        groups.append((list(range(i0, len(src))), list(range(j0, len(dst)))))
    return groups


def reshape_op(x: ir.Tensor, out: ir.Tensor, source: ir.SourceRef | None) -> ir.Op:
    """RESHAPE of `x` to `out`'s shape; one dynamic dimension is written -1 (more raise DynamicSizeError)."""
    dynamic = [d for d in out.shape if not is_static(d)]
    if len(dynamic) > 1:
        raise dynamic[0].needed("needed in a reshape's constant shape")
    shape = np.array([-1 if not is_static(d) else d for d in out.shape], np.int32)
    if not shape.size:
        # to a scalar: the option alone (a shape tensor of no elements has no data a file can hold, and the
        # runtime would read it as an unwritten tensor)
        return ir.Op("RESHAPE", [x], [out], {"new_shape": []}, source)
    const = ir.Tensor(f"{out.name}/shape", shape.shape, np.int32, shape)
    return ir.Op("RESHAPE", [x, const], [out], {"new_shape": shape.tolist()}, source)


def transpose_op(x: ir.Tensor, perm: list[int], out: ir.Tensor, source: ir.SourceRef | None) -> ir.Op:
    if perm == list(range(len(perm))):
        return reshape_op(x, out, source)  # a no-op reshape, removed by cleanup
    p = np.array(perm, np.int32)
    return ir.Op("TRANSPOSE", [x, ir.Tensor(f"{out.name}/perm", p.shape, np.int32, p)], [out], {}, source)


def transposes_to_reshapes(graph: ir.Graph) -> bool:
    """Replace each TRANSPOSE that only moves size-1 dimensions by a RESHAPE (no data movement)."""
    changed = False
    for i, op in enumerate(graph.ops):
        perm = perm_of(op)
        if perm is not None and is_reshape_like(op.input(0).shape, perm):
            graph.ops[i] = reshape_op(op.input(0), op.outputs[0], op.source)
            changed = True
    return changed


def run(graph: ir.Graph) -> bool:
    changed = LayoutPass(graph).run()
    return transposes_to_reshapes(graph) or changed
