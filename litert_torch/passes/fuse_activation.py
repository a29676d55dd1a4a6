"""Fuse RELU / RELU6 / RELU_N1_TO_1 into the op before them (`fused_activation_function`).

Guarantee afterwards: an activation op remains only where its input has other readers, is a graph output, or
comes from an op that cannot carry a fused activation.

    CONV_2D -> RELU        CONV_2D(fused_activation_function=RELU)
"""

from __future__ import annotations

from litert_torch import ir
from litert_torch.passes.fold_affine import value_node

ACTIVATIONS = {"RELU": "RELU", "RELU6": "RELU6", "RELU_N1_TO_1": "RELU_N1_TO_1"}
CAN_FUSE = {
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV", "AVERAGE_POOL_2D",
    "MAX_POOL_2D", "CONCATENATION",
}


def run(graph: ir.Graph) -> bool:
    consumers = graph.consumers()
    producers = graph.producers()
    changed = False
    for op in list(graph.ops):
        if op.opcode not in ACTIVATIONS:
            continue
        x = op.input(0)
        prev = producers.get(x)
        if prev is None or prev.opcode not in CAN_FUSE or len(consumers.get(x, [])) != 1 or x in graph.outputs:
            continue
        if x.dtype.kind != "f" or prev.options.get("fused_activation_function", "NONE") != "NONE":
            continue
        prev.options["fused_activation_function"] = ACTIVATIONS[op.opcode]
        prev.outputs = [op.outputs[0]]
        prev.value_node = value_node(op)
        producers[op.outputs[0]] = prev
        graph.ops.remove(op)
        changed = True
    return changed
