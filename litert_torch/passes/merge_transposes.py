"""Merge transposes: move a TRANSPOSE up through the layout-agnostic ops that compute its input, onto a tensor
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
from litert_torch.passes.cleanup import remove_dead_ops
from litert_torch.passes.layout import (
    ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, REDUCTIONS, inverse, is_reshape_like, perm_of, reshape_op,
)


def _keeps_rank(op: ir.Op) -> bool:
    if op.opcode in ELEMENTWISE_UNARY or op.opcode in ELEMENTWISE_BINARY:
        return True
    return op.opcode in REDUCTIONS and bool(op.options.get("keep_dims")) and op.inputs[1].is_constant


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
        perm = tuple(perm_of(top))
        rank = len(perm)
        ops: dict[int, ir.Op] = {}
        leaves: dict[int, str] = {}
        stack = [top.inputs[0]]
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
        perm = perm_of(top)
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
                    data = np.transpose(t.data.reshape(padded), perm)
                    out = ir.Tensor(f"{t.name}/merged", data.shape, t.dtype, data)
            else:
                out = ir.Tensor(f"{t.name}/merged", [padded[p] for p in perm], t.dtype)
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
                axes = {int(a) % rank for a in op.inputs[1].data.reshape(-1)}
                data = np.array(sorted(inv[a] for a in axes), np.int32)
                inputs[1] = ir.Tensor(f"{op.inputs[1].name}/merged", data.shape, np.int32, data)
            if out is top.inputs[0]:
                result = top.outputs[0]
            else:
                result = ir.Tensor(f"{out.name}/merged", [out.shape[p] for p in perm], out.dtype)
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
    while True:
        # One round merges every transpose whose cone no other merge of the round touches; the next round
        # sees the graph they left.
        merge = _Merge(graph)
        claimed: set[int] = set()  # ops a merge of this round removes
        kept: set[int] = set()  # transposes a merge of this round reads as a leaf
        replacements: dict[int, list[ir.Op]] = {}
        for top in graph.ops:
            if perm_of(top) is None or not top.inputs[0].is_static or id(top) in claimed or id(top) in kept:
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
    perm = tuple(perm_of(top))
    found = []
    for op in cone:
        for t in op.inputs:
            if t is not None and leaves.get(id(t)) == "existing":
                found.append(merge.transposed[(id(t), perm)])
    return found
