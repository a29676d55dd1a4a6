"""Concatenations: nested ones flattened, and a concatenation that repeats an earlier one's inputs built on it.

Guarantees afterwards, for CONCATENATIONs without a fused activation:
- no input of one is the output of another along the same axis that nothing else reads (its inputs are
  spliced in: one copy of the data instead of two);
- none whose first inputs are all the inputs of an earlier one along the same axis lists them again: it reads
  that one's output instead. A DenseNet layer concatenates every feature map before it, the previous layer's
  concatenation plus one: each layer then copies its new features next to the previous result, two inputs,
  rather than all of them again (where XNNPACK, which takes at most five inputs, would need a tree of copies).

    CONCATENATION(a, b) -> p               CONCATENATION(a, b) -> p
    CONCATENATION(a, b, c) -> q            CONCATENATION(p, c) -> q
"""

from __future__ import annotations

from litert_torch import ir


def _plain(op: ir.Op) -> bool:
    return op.opcode == "CONCATENATION" and op.options.get("fused_activation_function", "NONE") == "NONE"


def _axis(op: ir.Op) -> int:
    return op.options.get("axis", 0) % op.outputs[0].rank


def flatten_nested(graph: ir.Graph) -> bool:
    producers, consumers = graph.producers(), graph.consumers()
    outputs = set(graph.outputs)
    changed = False
    for op in graph.ops:
        if not _plain(op):
            continue
        inputs: list[ir.Tensor | None] = []
        for t in op.tensor_inputs():
            inner = producers.get(t)
            if (inner is not None and _plain(inner) and _axis(inner) == _axis(op) and t not in outputs
                    and len(consumers.get(t, [])) == 1 and inner.outputs[0].quantization == op.outputs[0].quantization):
                inputs.extend(inner.tensor_inputs())
                changed = True
            else:
                inputs.append(t)
        op.inputs = inputs
    return changed


def reuse_prefixes(graph: ir.Graph) -> bool:
    earlier: dict[tuple, ir.Tensor] = {}  # (axis, quantization, input ids) -> that concatenation's output
    changed = False
    for op in graph.ops:
        if not _plain(op):
            continue
        key = (_axis(op), op.outputs[0].quantization)
        ids = tuple(id(t) for t in op.inputs)
        for n in range(len(ids) - 1, 1, -1):  # the longest earlier prefix of at least two inputs
            prefix = earlier.get((*key, ids[:n]))
            if prefix is not None:
                op.inputs = [prefix, *op.inputs[n:]]
                changed = True
                break
        earlier.setdefault((*key, ids), op.outputs[0])
    return changed


def run(graph: ir.Graph) -> bool:
    changed = flatten_nested(graph)
    return reuse_prefixes(graph) or changed
