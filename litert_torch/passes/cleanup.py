"""Cleanup pass: no-op removal, reshape-chain collapsing and dead-op removal.

Guarantees afterwards: no RESHAPE to its input's own shape, no TRANSPOSE by the identity permutation, no CAST to
the same type, no 1x1 pooling window of stride 1, no MUL or DIV by a constant of ones and no ADD or SUB of a
constant of zeros that leaves its other operand's shape and type unchanged, no RESHAPE reading another RESHAPE, no
reduction keeping unit dims that a RESHAPE then drops, no RESHAPE flattening the input of a FULLY_CONNECTED
that flattens it itself, no two ops computing the same thing (one opcode, options and
inputs: two layers' transposes of one graph input, say), and no op whose outputs nobody reads.

    x -> RESHAPE[1,64] -> RESHAPE[64] -> y        x -> RESHAPE[64] -> y
    x -> MUL(x, [1, 1, 1]) -> ADD(., [0, 0, 0]) -> y        x -> y     (a layer norm's affine at its initial values)
"""

from __future__ import annotations

from litert_torch import ir
from litert_torch.passes.layout import perm_of


# Binary ops that return one operand unchanged when the other is a constant of this value, and the operand
# positions that constant may take (x * 1 = 1 * x = x, x / 1 = x, x + 0 = 0 + x = x, x - 0 = x; exact in IEEE
# arithmetic except that -0 + 0 is +0, which no reader can tell from -0 but by its sign bit).
_IDENTITY_OPERAND = {"MUL": (1, (0, 1)), "DIV": (1, (1,)), "ADD": (0, (0, 1)), "SUB": (0, (1,))}
_POOLS = ("AVERAGE_POOL_2D", "MAX_POOL_2D")


def _noop_source(op: ir.Op) -> ir.Tensor | None:
    """The input a no-op passes through unchanged, or None when `op` computes something."""
    if op.opcode in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        return op.inputs[0] if op.input(0).shape == op.outputs[0].shape else None
    if op.opcode == "TRANSPOSE":
        perm = perm_of(op)
        return op.inputs[0] if perm is not None and perm == list(range(len(perm))) else None
    if op.opcode == "CAST":
        return op.inputs[0] if op.input(0).dtype == op.outputs[0].dtype else None
    if op.options.get("fused_activation_function", "NONE") != "NONE" or any(
            t is not None and t.quantization is not None for t in (*op.inputs, *op.outputs)):
        return None  # a fused activation clamps; a quantized op may requantize
    if op.opcode in _POOLS:
        o = op.options
        unit = (o.get("filter_height"), o.get("filter_width"), o.get("stride_h"), o.get("stride_w")) == (1, 1, 1, 1)
        return op.inputs[0] if unit and op.input(0).shape == op.outputs[0].shape else None
    if op.opcode in _IDENTITY_OPERAND and len(op.inputs) == 2:
        value, positions = _IDENTITY_OPERAND[op.opcode]
        for pos in positions:
            const, other = op.input(pos), op.input(1 - pos)
            if (const.data is not None and not other.is_constant and other.shape == op.outputs[0].shape
                    and other.dtype == op.outputs[0].dtype and const.data.size and (const.data == value).all()):
                return other
    return None


def remove_noops(graph: ir.Graph) -> bool:
    """Drop no-op ops, their readers reading the op's input instead (one walk: linear in the graph)."""
    graph_inputs = set(graph.inputs)
    outputs = set(graph.outputs)
    subst: dict[ir.Tensor, ir.Tensor] = {}
    kept: list[ir.Op] = []
    for op in graph.ops:
        if subst:
            op.inputs = [subst.get(t, t) if t is not None else None for t in op.inputs]
        src = _noop_source(op)
        if src is None:
            kept.append(op)
            continue
        out = op.outputs[0]
        if out in outputs and (src in graph_inputs or src.is_constant or src in outputs):
            kept.append(op)  # the op gives the output a tensor of its own; keep it
            continue
        subst[out] = src
    if not subst:
        return False
    graph.ops = kept
    graph.outputs = [subst.get(t, t) for t in graph.outputs]
    return True


_SMALL = 4096  # constants up to this many elements are compared by value (permutations, axes, per-channel vectors)


def _operand_key(t: ir.Tensor | None):
    if t is None:
        return None
    if t.data is not None and t.data.size <= _SMALL and t.quantization is None:
        return ("const", t.dtype.str, t.shape, t.data.tobytes())
    return id(t)


def remove_duplicates(graph: ir.Graph) -> bool:
    """Each op whose opcode, options and inputs equal an earlier op's reads the earlier op's outputs instead
    (common subexpressions, one walk). Ops that touch variable tensors (recurrent state) are never merged, nor
    ops writing graph outputs, which keep tensors of their own."""
    outputs = set(graph.outputs)
    seen: dict[tuple, ir.Op] = {}
    subst: dict[ir.Tensor, ir.Tensor] = {}
    kept: list[ir.Op] = []
    for op in graph.ops:
        if subst:
            op.inputs = [subst.get(t, t) if t is not None else None for t in op.inputs]
        stateful = any(t is not None and t.is_variable for t in (*op.inputs, *op.outputs))
        if stateful or any(t in outputs for t in op.outputs):
            kept.append(op)
            continue
        key = (op.opcode, repr(sorted(op.options.items())), tuple(_operand_key(t) for t in op.inputs),
               tuple((t.shape, t.dtype.str, t.quantization) for t in op.outputs))
        first = seen.get(key)
        if first is None:
            seen[key] = op
            kept.append(op)
            continue
        subst.update(zip(op.outputs, first.outputs))
    if not subst:
        return False
    graph.ops = kept
    return True


def collapse_reshapes(graph: ir.Graph) -> bool:
    producers = graph.producers()
    changed = False
    for op in graph.ops:
        if op.opcode != "RESHAPE":
            continue
        inner = producers.get(op.input(0))
        if inner is not None and inner.opcode == "RESHAPE":
            op.inputs = [inner.inputs[0], *op.inputs[1:]]
            changed = True
    return changed


def absorb_flatten_into_dense(graph: ir.Graph) -> bool:
    """A FULLY_CONNECTED without keep_num_dims reads its input as [elements / K, K] whatever its rank: one
    reading a RESHAPE of x to [N, K], where x's last axis is already K, reads x instead."""
    producers = graph.producers()
    changed = False
    for op in graph.ops:
        if op.opcode != "FULLY_CONNECTED" or op.options.get("keep_num_dims") or op.inputs[0] is None:
            continue
        flatten = producers.get(op.input(0))
        if flatten is None or flatten.opcode != "RESHAPE":
            continue
        x, flat = flatten.input(0), flatten.outputs[0]
        if flat.rank == 2 and x.rank > 2 and x.is_static and flat.is_static and x.shape[-1] == flat.shape[1]:
            op.inputs = [x, *op.inputs[1:]]
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
        reducer = producers.get(op.input(0))
        if reducer is None or reducer.opcode not in REDUCERS or not reducer.options.get("keep_dims"):
            continue
        kept = reducer.outputs[0]
        if len(consumers.get(kept, [])) != 1 or kept in graph.outputs or not reducer.input(1).is_constant:
            continue
        rank = kept.rank
        axes = {int(a) + rank if a < 0 else int(a) for a in reducer.input(1).values.reshape(-1)}
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
    changed |= remove_duplicates(graph)
    changed |= collapse_reshapes(graph)
    changed |= absorb_flatten_into_dense(graph)
    changed |= drop_kept_dims(graph)
    changed |= remove_dead_ops(graph)
    return changed
