"""Merge transposes: transposes of the pieces of one split tensor become one transpose before the split, and a
TRANSPOSE moves up through the layout-agnostic ops that compute its input, onto a tensor
that is already transposed the same way, so that one TRANSPOSE serves both.

The layout pass sinks every transpose below the ops that read it. When a transposed tensor has a reader that
needs it as it is (a dense layer on the other branch of a residual, say), the original transpose stays, and the
copy sunk through the other readers is stuck where it meets a layout-sensitive op: one transpose more than
before, and the ops in between computing in the other layout. This pass undoes such a sink.

Guarantee afterwards: no TRANSPOSE T_p(y) is left where y is computed, through elementwise ops and reductions
that keep their dims and that nothing else reads, from constants, tensors that T_p only reshapes, and tensors
x that the graph already transposes by the same p: those ops then compute on T_p(x) directly.

    x -> TRANSPOSE_p -> a ----------------------------> ADD(a, FC(...))
    x -> MEAN -> SUB(x, .) -> MUL -> TRANSPOSE_p -> FC           (two transposes of the same data)

    x -> TRANSPOSE_p -> a ----------------------------> ADD(a, FC(...))
                        a -> MEAN -> SUB(a, .) -> MUL -> FC      (one)
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.errors import MalformedGraphError
from litert_torch.passes.cleanup import remove_dead_ops
from litert_torch.passes.layout import (
    ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, REDUCTIONS, inverse, is_reshape_like, perm_of, reshape_op,
)


def _keeps_rank(op: ir.Op) -> bool:
    if op.opcode in ELEMENTWISE_UNARY or op.opcode in ELEMENTWISE_BINARY:
        return True
    return op.opcode in REDUCTIONS and bool(op.options.get("keep_dims")) and op.input(1).is_constant


def _top_perm(top: ir.Op) -> list[int]:
    """The permutation of `top`, a TRANSPOSE this pass picked for having a constant one."""
    perm = perm_of(top)
    if perm is None:
        raise MalformedGraphError(f"{top!r} was taken for a TRANSPOSE with a constant permutation")
    return perm


class _Merge:
    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = set(graph.outputs)
        self.transposed: dict[tuple[int, tuple[int, ...]], ir.Tensor] = {}
        for op in graph.ops:
            perm = perm_of(op)
            if perm is not None:
                self.transposed.setdefault((id(op.inputs[0]), tuple(perm)), op.outputs[0])

    def cone(self, top: ir.Op) -> tuple[list[ir.Op], dict[int, str]] | None:
        """The ops computing `top`'s input, which would compute in the transposed layout instead, and how each
        leaf tensor (by id) gets there ("existing", "constant", "reshape"); None when the transpose cannot move."""
        perm = tuple(_top_perm(top))
        rank = len(perm)
        ops: dict[int, ir.Op] = {}
        leaves: dict[int, str] = {}
        stack = [top.input(0)]
        while stack:
            t = stack.pop()
            if id(t) in leaves or (t in self.producers and id(self.producers[t]) in ops):
                continue
            if t.quantization is not None:
                return None
            if t.is_constant:
                leaves[id(t)] = "constant"
                continue
            if t.rank == rank and self.transposed.get((id(t), perm)) is not None \
                    and self.transposed[(id(t), perm)] is not top.outputs[0]:
                leaves[id(t)] = "existing"
                continue
            producer = self.producers.get(t)
            if producer is not None and t.rank == rank and t not in self.outputs and _keeps_rank(producer) \
                    and len(producer.outputs) == 1:
                ops[id(producer)] = producer
                stack.extend(x for x in producer.inputs[:2 if producer.opcode in ELEMENTWISE_BINARY else 1]
                             if x is not None)
                continue
            padded = (1,) * (rank - t.rank) + tuple(t.shape)
            if t.rank <= rank and t.is_static and is_reshape_like(padded, list(perm)):
                leaves[id(t)] = "reshape"
                continue
            return None
        if not ops or not any(kind == "existing" for kind in leaves.values()):
            return None  # nothing to merge with: moving the transpose up would not remove it
        inside = set(ops)
        for op in ops.values():
            for reader in self.consumers.get(op.outputs[0], []):
                if reader is not top and id(reader) not in inside:
                    return None  # a value of the cone is read as it is elsewhere
        return [op for op in self.graph.ops if id(op) in inside], leaves

    def move(self, top: ir.Op, cone: list[ir.Op], leaves: dict[int, str]) -> list[ir.Op]:
        """The cone's ops recomputed in the transposed layout, writing `top`'s output."""
        perm = _top_perm(top)
        inv = inverse(perm)
        rank = len(perm)
        new: dict[int, ir.Tensor] = {}
        ops: list[ir.Op] = []

        def moved(t: ir.Tensor) -> ir.Tensor:
            if id(t) in new:
                return new[id(t)]
            kind = leaves[id(t)]
            padded = (1,) * (rank - t.rank) + tuple(t.shape)
            if kind == "existing":
                out = self.transposed[(id(t), tuple(perm))]
            elif kind == "constant":
                if t.size == 1:
                    out = t
                else:
                    data = np.transpose(t.values.reshape(padded), perm)
                    out = ir.Tensor(ir.derived_name(t.name, "merged"), data.shape, t.dtype, data)
            else:
                out = ir.Tensor(ir.derived_name(t.name, "merged"), [padded[p] for p in perm], t.dtype)
                ops.append(reshape_op(t, out, top.source))
            new[id(t)] = out
            return out

        for op in cone:
            out = op.outputs[0]
            inputs = list(op.inputs)
            options = dict(op.options)
            count = 2 if op.opcode in ELEMENTWISE_BINARY else 1
            inputs[:count] = [moved(x) if x is not None else None for x in inputs[:count]]
            if op.opcode in REDUCTIONS:
                axes = {int(a) % rank for a in op.input(1).values.reshape(-1)}
                data = np.array(sorted(inv[a] for a in axes), np.int32)
                inputs[1] = ir.Tensor(f"{op.input(1).name}/merged", data.shape, np.int32, data)
            if out is top.inputs[0]:
                result = top.outputs[0]
            else:
                result = ir.Tensor(ir.derived_name(out.name, "merged"), [out.shape[p] for p in perm], out.dtype)
            new[id(out)] = result
            ops.append(ir.Op(op.opcode, inputs, [result], options, op.source, op.value_node))
        return ops


def _topological(ops: list[ir.Op]) -> list[ir.Op]:
    """`ops` in an order where each op follows the producers of its inputs, otherwise as given."""
    producer = {id(t): op for op in ops for t in op.outputs}
    done: set[int] = set()
    order: list[ir.Op] = []
    for root in ops:
        stack = [(root, False)]
        while stack:
            op, expanded = stack.pop()
            if id(op) in done:
                continue
            if expanded:
                done.add(id(op))
                order.append(op)
                continue
            stack.append((op, True))
            for t in reversed(op.inputs):
                p = producer.get(id(t)) if t is not None else None
                if p is not None and id(p) not in done:
                    stack.append((p, False))
    return order


def run(graph: ir.Graph) -> bool:
    # The layout pass leaves the transposes it moved past for cleanup; as readers they would hide every merge.
    changed = remove_dead_ops(graph)
    changed = share_split_transposes(graph) or changed
    while True:
        # One round merges every transpose whose cone no other merge of the round touches; the next round
        # sees the graph they left.
        merge = _Merge(graph)
        claimed: set[int] = set()  # ops a merge of this round removes
        kept: set[int] = set()  # transposes a merge of this round reads as a leaf
        replacements: dict[int, list[ir.Op]] = {}
        for top in graph.ops:
            if perm_of(top) is None or not top.input(0).is_static or id(top) in claimed or id(top) in kept:
                continue
            found = merge.cone(top)
            if found is None:
                continue
            cone, leaves = found
            existing = {id(merge.producers[t]) for t in _existing_leaves(merge, top, cone, leaves)}
            if any(id(op) in claimed for op in cone) or existing & claimed:
                continue
            claimed.update(id(op) for op in cone)
            claimed.add(id(top))
            kept |= existing
            replacements[id(top)] = merge.move(top, cone, leaves)
        if not replacements:
            return changed
        ops: list[ir.Op] = []
        for op in graph.ops:
            if id(op) in replacements:
                ops.extend(replacements[id(op)])
            elif id(op) not in claimed:
                ops.append(op)
        graph.ops = _topological(ops)
        changed = True


def _existing_leaves(merge: _Merge, top: ir.Op, cone: list[ir.Op], leaves: dict[int, str]) -> list[ir.Tensor]:
    """The outputs of the transposes that the merge of `top` would read."""
    perm = tuple(_top_perm(top))
    found = []
    for op in cone:
        for t in op.inputs:
            if t is not None and leaves.get(id(t)) == "existing":
                found.append(merge.transposed[(id(t), perm)])
    return found


# ---- transposes of the pieces of one tensor --------------------------------------------------------------
def _unit_slice(op: ir.Op) -> int | None:
    """The axis a constant SLICE takes one position of, keeping every other axis whole; else None."""
    if op.opcode != "SLICE" or not (op.input(1).is_constant and op.input(2).is_constant):
        return None
    x = op.input(0)
    if not x.is_static:
        return None
    begin = [int(v) for v in op.input(1).values.reshape(-1)]
    size = [int(v) for v in op.input(2).values.reshape(-1)]
    size = [x.shape[a] - begin[a] if n == -1 else n for a, n in enumerate(size)]
    cut = [a for a in range(x.rank) if (begin[a], size[a]) != (0, x.shape[a])]
    if len(cut) != 1 or size[cut[0]] != 1:
        return None
    return cut[0]


def _scalar_chain(start: ir.Tensor, consumers, outputs) -> tuple[list[ir.Op], ir.Op] | None:
    """The elementwise ops (unary, or binary with a one-element constant) that alone read `start` and then each
    other, and the TRANSPOSE that ends them."""
    chain: list[ir.Op] = []
    t = start
    while True:
        readers = consumers.get(t, [])
        if t in outputs or len(readers) != 1 or t.quantization is not None:
            return None
        op = readers[0]
        if perm_of(op) is not None and op.inputs[0] is t:
            return chain, op
        scalar_binary = (op.opcode in ELEMENTWISE_BINARY and op.inputs[0] is t and op.inputs[1] is not None
                         and op.input(1).is_constant and op.input(1).size == 1)
        if not (op.opcode in ELEMENTWISE_UNARY or scalar_binary) or len(op.outputs) != 1:
            return None
        chain.append(op)
        t = op.outputs[0]


def _lift(axis: int, perm: list[int]) -> tuple[int, ...]:
    """A piece's permutation on the whole tensor: the sliced axis first, then the piece's axes as `perm` orders
    them."""
    return tuple([axis] + [j if j < axis else j + 1 for j in perm])


def share_split_transposes(graph: ir.Graph) -> bool:
    """Transposes of several pieces of one tensor, taken by SLICEs of one position each along one axis (the
    q, k and v of a packed projection, which the layout pass sank below the split), become one TRANSPOSE of
    the whole tensor with that axis first, and SLICEs of it:

        x -> SLICE(i) -> RESHAPE -> [MUL by a scalar] -> TRANSPOSE_p      (one transpose per piece)
        x -> TRANSPOSE_P -> SLICE(i) -> RESHAPE -> [MUL by a scalar]      (one transpose in all)

    A piece read by a BATCH_MATMUL may join the others with its last two axes swapped, the matmul then reading
    it through its adj_x / adj_y flag (q, v and the k of q @ k^T share one transpose). Pieces whose transposes
    still differ stay as they are."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    groups: dict[tuple[int, tuple[int, ...]], list] = {}
    candidates: list = []
    alternatives: dict[int, tuple] = {}
    for op in graph.ops:
        axis = _unit_slice(op)
        if axis is None:
            continue
        x, piece = op.input(0), op.outputs[0]
        readers = consumers.get(piece, [])
        if piece in outputs or len(readers) != 1 or readers[0].opcode != "RESHAPE" or x.quantization is not None \
                or piece.quantization is not None:
            continue
        squeeze = readers[0]
        squeezed = tuple(d for a, d in enumerate(x.shape) if a != axis)
        if tuple(squeeze.outputs[0].shape) != squeezed:
            continue
        found = _scalar_chain(squeeze.outputs[0], consumers, outputs)
        if found is None:
            continue
        chain, top = found
        if top.outputs[0].quantization is not None:
            continue
        index = int(op.input(1).values.reshape(-1)[axis])
        p = _top_perm(top)
        member = (index, op, squeeze, chain, top, None)
        candidates.append((id(x), _lift(axis, p), member))
        # a transposed operand of one BATCH_MATMUL may instead come with its last two axes in the other order,
        # the matmul reading it through its adjoint flag
        readers = consumers.get(top.outputs[0], [])
        if len(p) >= 2 and len(readers) == 1 and readers[0].opcode == "BATCH_MATMUL" and \
                top.outputs[0] not in outputs and sum(t is top.outputs[0] for t in readers[0].inputs) == 1:
            swapped = p[:-2] + [p[-1], p[-2]]
            alternatives[id(top)] = (id(x), _lift(axis, swapped), (*member[:5], readers[0]))
    counts: dict = {}
    for key_x, lifted, _ in candidates:
        counts[(key_x, lifted)] = counts.get((key_x, lifted), 0) + 1
    for key_x, lifted, member in candidates:
        key = (key_x, lifted)
        other = alternatives.get(id(member[4]))
        if other is not None and counts.get(other[:2], 0) > counts[key]:
            key, member = other[:2], other[2]
        groups.setdefault(key, []).append(member)
    removed: set[int] = set()
    added: list[ir.Op] = []
    for (_, lifted), members in groups.items():
        if len(members) < 2 or len({m[0] for m in members}) != len(members):
            continue
        x = members[0][1].inputs[0]
        shape = [x.shape[a] for a in lifted]
        whole = ir.Tensor(f"{x.name}/shared_transpose", shape, x.dtype)
        perm = ir.Tensor(f"{x.name}/shared_perm", (len(lifted),), np.int32, np.array(lifted, np.int32))
        added.append(ir.Op("TRANSPOSE", [x, perm], [whole], {}, members[0][4].source))
        for index, slice_op, squeeze, chain, top, matmul in members:
            # the pieces's last tensor: the transpose's own output, or for a matmul operand read through its
            # adjoint flag a new one, its last two axes the other way round
            last = top.outputs[0] if matmul is None else ir.Tensor(f"{top.outputs[0].name}/adjoint", shape[1:],
                                                                   top.outputs[0].dtype)
            if matmul is not None:
                position = next(i for i, t in enumerate(matmul.inputs) if t is top.outputs[0])
                flag = "adj_x" if position == 0 else "adj_y"
                matmul.inputs[position] = last
                matmul.options[flag] = not matmul.options.get(flag, False)
            begin = np.zeros(len(shape), np.int32)
            begin[0] = index
            sizes = np.array([1] + shape[1:], np.int32)
            piece = ir.Tensor(f"{top.outputs[0].name}/piece", [1] + shape[1:], x.dtype)
            added.append(ir.Op("SLICE", [whole, ir.Tensor(f"{piece.name}/begin", begin.shape, np.int32, begin),
                                         ir.Tensor(f"{piece.name}/size", sizes.shape, np.int32, sizes)],
                               [piece], {}, slice_op.source))
            t = ir.Tensor(f"{top.outputs[0].name}/squeezed", shape[1:], x.dtype) if chain else last
            added.append(reshape_op(piece, t, squeeze.source))
            for k, op in enumerate(chain):
                out = last if k == len(chain) - 1 else \
                    ir.Tensor(f"{op.outputs[0].name}/shared", shape[1:], op.outputs[0].dtype)
                added.append(ir.Op(op.opcode, [t, *op.inputs[1:]], [out], dict(op.options), op.source,
                                   op.value_node))
                t = out
            removed.update(id(o) for o in (slice_op, squeeze, *chain, top))
    if not added:
        return False
    graph.ops = _topological([op for op in graph.ops if id(op) not in removed] + added)
    return True
