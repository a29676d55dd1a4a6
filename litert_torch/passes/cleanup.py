"""Cleanup pass: no-op removal, reshape-chain collapsing and dead-op removal.

Guarantees afterwards: no RESHAPE to its input's own shape, no TRANSPOSE by the identity permutation, no CAST to
the same type, no RESHAPE reading another RESHAPE, no reduction keeping unit dims that a RESHAPE then drops,
and no op whose outputs nobody reads.

    x -> RESHAPE[1,64] -> RESHAPE[64] -> y        x -> RESHAPE[64] -> y
"""

from __future__ import annotations

from litert_torch import ir
from litert_torch.passes.layout import perm_of


def _is_noop(op: ir.Op) -> bool:
    if op.opcode in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        return op.inputs[0].shape == op.outputs[0].shape
    if op.opcode == "TRANSPOSE":
        perm = perm_of(op)
        return perm is not None and perm == list(range(len(perm)))
    if op.opcode == "CAST":
        return op.inputs[0].dtype == op.outputs[0].dtype
    return False


def remove_noops(graph: ir.Graph) -> bool:
    """Drop no-op ops, their readers reading the op's input instead (one walk: linear in the graph)."""
    graph_inputs = set(graph.inputs)
    outputs = set(graph.outputs)
    subst: dict[ir.Tensor, ir.Tensor] = {}
    kept: list[ir.Op] = []
    for op in graph.ops:
        if subst:
            op.inputs = [subst.get(t, t) if t is not None else None for t in op.inputs]
        if not _is_noop(op):
            kept.append(op)
            continue
        src, out = op.inputs[0], op.outputs[0]
        if out in outputs and (src in graph_inputs or src.is_constant or src in outputs):
            kept.append(op)  # the op gives the output a tensor of its own; keep it
            continue
        subst[out] = src
    if not subst:
        return False
    graph.ops = kept
    graph.outputs = [subst.get(t, t) for t in graph.outputs]
    return True


def collapse_reshapes(graph: ir.Graph) -> bool:
    producers = graph.producers()
    changed = False
    for op in graph.ops:
        if op.opcode != "RESHAPE":
            continue
        inner = producers.get(op.inputs[0])
        if inner is not None and inner.opcode == "RESHAPE":
            op.inputs = [inner.inputs[0], *op.inputs[1:]]
            changed = True
    return changed


REDUCERS = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL"}


def drop_kept_dims(graph: ir.Graph) -> bool:
    """A reduction with keep_dims whose only reader reshapes the kept unit dims away becomes a reduction
    without keep_dims (one op instead of two)."""
    consumers = graph.consumers()
    producers = graph.producers()
    changed = False
    for op in list(graph.ops):
        if op.opcode != "RESHAPE":
            continue
        reducer = producers.get(op.inputs[0])
        if reducer is None or reducer.opcode not in REDUCERS or not reducer.options.get("keep_dims"):
            continue
        kept = reducer.outputs[0]
        if len(consumers.get(kept, [])) != 1 or kept in graph.outputs or not reducer.inputs[1].is_constant:
            continue
        rank = kept.rank
        axes = {int(a) + rank if a < 0 else int(a) for a in reducer.inputs[1].data.reshape(-1)}
        if tuple(d for i, d in enumerate(kept.shape) if i not in axes) != op.outputs[0].shape:
            continue
        reducer.options["keep_dims"] = False
        reducer.outputs = [op.outputs[0]]
        graph.ops.remove(op)
        changed = True
    return changed


def remove_dead_ops(graph: ir.Graph) -> bool:
    live = set(graph.outputs)
    kept: list[ir.Op] = []
    for op in reversed(graph.ops):
        if any(t in live for t in op.outputs):
            kept.append(op)
            live.update(t for t in op.inputs if t is not None)
    changed = len(kept) != len(graph.ops)
    graph.ops = kept[::-1]
    return changed


def run(graph: ir.Graph) -> bool:
    changed = remove_noops(graph)
    changed |= collapse_reshapes(graph)
    changed |= drop_kept_dims(graph)
    changed |= remove_dead_ops(graph)
    return changed
