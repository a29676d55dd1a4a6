"""Transposes of a BATCH_MATMUL operand's last two axes folded into the op's adj_x / adj_y.

Guarantee afterwards: no BATCH_MATMUL reads a TRANSPOSE that only swaps its last two axes; it reads the
transpose's input with the adjoint flag flipped. The TRANSPOSE goes when nothing else reads it. A product with a
transposed run-time operand (attention scores against a key cache, `q @ k.transpose(-1, -2)`) then reads the
operand in place instead of copying it on every call.

    TRANSPOSE(k, [0, 1, 3, 2]) -> BATCH_MATMUL(q, ., adj_y=False)      BATCH_MATMUL(q, k, adj_y=True)
"""

from __future__ import annotations

from litert_torch import ir
from litert_torch.passes.layout import is_reshape_like, perm_of, reshape_op, transpose_op

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
            source = producers.get(op.inputs[index])
            if source is None or not _swaps_last_two(source):
                continue
            op.inputs = [source.inputs[0] if i == index else t for i, t in enumerate(op.inputs)]
            op.options = {**op.options, flag: not op.options.get(flag, False)}
            changed = True
    return changed


# A product of a few rows against a large run-time matrix (attention at decode: a handful of query rows against
# every cached key or value) is computed the other way round. XNNPACK repacks a run-time right-hand operand on
# every call (read, write, read again), while a left-hand operand is read in place; with the large matrix on the
# left, only the few rows are repacked, and the small result is transposed back.
SKINNY_ROWS = 8  # at most this many rows on the left
WIDE_ROWS = 64  # and at least this many on the right, and 8x as many as on the left


def skinny_lhs(graph: ir.Graph) -> bool:
    """BATCH_MATMUL(a, b, adj_y=True) with few rows in `a` and many in a run-time `b` becomes
    TRANSPOSE(BATCH_MATMUL(b, a, adj_y=True)): the same dot products, (b·aᵀ)ᵀ = a·bᵀ."""
    changed = False
    ops: list[ir.Op] = []
    for op in graph.ops:
        a, b = op.inputs[:2] if op.opcode == "BATCH_MATMUL" else (None, None)
        if a is None or not _swappable(op, a, b):
            ops.append(op)
            continue
        out = op.outputs[0]
        rank = len(out.shape)
        flipped = ir.Tensor(f"{out.name}/flipped", [*out.shape[:-2], out.shape[-1], out.shape[-2]], out.dtype)
        ops.append(ir.Op("BATCH_MATMUL", [b, a], [flipped], {**op.options, "adj_x": False, "adj_y": True},
                         op.source))
        perm = [*range(rank - 2), rank - 1, rank - 2]
        back = reshape_op(flipped, out, op.source) if is_reshape_like(flipped.shape, perm) \
            else transpose_op(flipped, perm, out, op.source)
        ops.append(back)
        changed = True
    graph.ops = ops
    return changed


def _swappable(op: ir.Op, a: ir.Tensor, b: ir.Tensor) -> bool:
    if op.options.get("adj_x") or not op.options.get("adj_y") or b.is_constant or a.is_constant:
        return False
    if a.dtype != "float32" or b.dtype != "float32" or len(a.shape) != len(b.shape) or len(a.shape) < 2:
        return False
    shapes = (a.shape, b.shape, op.outputs[0].shape)
    if not all(isinstance(d, int) for s in shapes for d in s):
        return False
    rows, wide = a.shape[-2], b.shape[-2]
    return a.shape[:-2] == b.shape[:-2] and rows <= SKINNY_ROWS and wide >= max(WIDE_ROWS, 8 * rows)
