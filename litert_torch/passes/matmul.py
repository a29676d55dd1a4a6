"""Transposes of a BATCH_MATMUL operand's last two axes folded into the op's adj_x / adj_y.

Guarantee afterwards: no BATCH_MATMUL reads a TRANSPOSE that only swaps its last two axes; it reads the
transpose's input with the adjoint flag flipped. The TRANSPOSE goes when nothing else reads it. A product with a
transposed run-time operand (attention scores against a key cache, `q @ k.transpose(-1, -2)`) then reads the
operand in place instead of copying it on every call.

    TRANSPOSE(k, [0, 1, 3, 2]) -> BATCH_MATMUL(q, ., adj_y=False)      BATCH_MATMUL(q, k, adj_y=True)
"""

from __future__ import annotations

from litert_torch import ir
from litert_torch.passes.layout import perm_of

FLAGS = ("adj_x", "adj_y")


def _swaps_last_two(op: ir.Op) -> bool:
    perm = perm_of(op)
    if perm is None or len(perm) < 2:
        return False
    rank = len(perm)
    return perm == [*range(rank - 2), rank - 1, rank - 2]


def run(graph: ir.Graph) -> bool:
    producers = graph.producers()
    changed = False
    for op in graph.ops:
        if op.opcode != "BATCH_MATMUL":
            continue
        for index, flag in enumerate(FLAGS):
            source = producers.get(op.input(index))
            if source is None or not _swaps_last_two(source):
                continue
            op.inputs = [source.inputs[0] if i == index else t for i, t in enumerate(op.inputs)]
            op.options = {**op.options, flag: not op.options.get(flag, False)}
            changed = True
    return changed
