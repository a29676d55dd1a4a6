"""Drop BROADCAST_TO where the ops reading it broadcast by themselves.

Guarantee afterwards: a BROADCAST_TO remains only where some reader needs the materialised shape (a reader
that does not broadcast, a graph output, or a broadcasting op whose result would shrink without it). GPU
delegates reject BROADCAST_TO, and skipping it saves a copy.

    x[1,4] -> BROADCAST_TO[3,4] -> ADD(y[3,4])        x[1,4] -> ADD(y[3,4])
"""

from __future__ import annotations


from litert_torch import ir
from litert_torch.symbolic import broadcast_shapes

BROADCASTING = {
    "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "POW", "SQUARED_DIFFERENCE", "FLOOR_DIV", "FLOOR_MOD",
    "SELECT_V2", "EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "LOGICAL_AND",
    "LOGICAL_OR", "PRELU",
}


def _still_same_shape(op: ir.Op, old: ir.Tensor, new: ir.Tensor) -> bool:
    shapes = [(new if t is old else t).shape for t in op.inputs if t is not None]
    try:
        return tuple(broadcast_shapes(*shapes)) == op.outputs[0].shape
    except ValueError:
        return False


def run(graph: ir.Graph) -> bool:
    consumers = graph.consumers()
    changed = False
    for op in list(graph.ops):
        if op.opcode != "BROADCAST_TO":
            continue
        src, out = op.input(0), op.outputs[0]
        readers = consumers.get(out, [])
        if not readers or out in graph.outputs:
            continue
        if all(r.opcode in BROADCASTING and _still_same_shape(r, out, src) for r in readers):
            for reader in readers:
                reader.inputs = [src if t is out else t for t in reader.inputs]
            graph.ops.remove(op)
            changed = True
    return changed
