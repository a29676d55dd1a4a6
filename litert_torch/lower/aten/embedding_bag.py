"""nn.EmbeddingBag / F.embedding_bag: the rows of a table gathered per index and reduced per bag."""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common import exact
from litert_torch.lower.common.registry import LoweringContext, lowers
from litert_torch.symbolic import all_static, same_size

aten = torch.ops.aten

_MODES = {0: "sum", 1: "mean", 2: "max"}


@lowers(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def lower_embedding_bag(ctx, node, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                        per_sample_weights=None, include_last_offset=False, padding_idx=-1) -> tuple[ir.Tensor, None, None, None]:
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)

    Per bag, the sum, mean or maximum of the table rows its indices name (GATHER of every row). Bags of one
    length known at conversion (a 2-D input) are a RESHAPE and one SUM / MEAN / REDUCE_MAX; otherwise a [bags,
    indices] membership matrix, from the offsets (constant, or compared at run time: bag b holds the positions
    offsets[b] <= n < offsets[b + 1]) and, with padding_idx, the indices that are not it, selects the rows:
    a BATCH_MATMUL sums them, divided by the bag's count for the mean; the maximum is REDUCE_MAX of the selected
    rows with the others at -inf. An empty bag gives zeros, as in PyTorch. per_sample_weights scale the rows
    (sum mode).

    Limits: only the first result (the bags) is computed; static index and offset counts."""
    if any(i in node.used for i in (1, 2, 3)):
        raise ctx.fail("embedding_bag's offset2bag, bag_size and max_indices results have no lowering")
    return _bags(ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                 padding_idx), None, None, None


def _bags(ctx: LoweringContext, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
          padding_idx) -> ir.Tensor:
    how = _MODES.get(int(mode))
    if how is None:
        raise ctx.fail(f"embedding_bag mode {mode!r}")
    if indices.rank != 1 or offsets.rank != 1:
        raise ctx.fail("embedding_bag takes 1-D indices and offsets")
    n, count = indices.shape[0], offsets.shape[0]
    d = weight.shape[1]
    dtype = weight.dtype
    ids = ctx.cast(indices, np.int32)
    rows = ctx.emit("GATHER", [weight, ids], [n, d], dtype, axis=0, batch_dims=0)
    if per_sample_weights is not None:
        rows = ctx.emit("MUL", [rows, ctx.reshape(ctx.cast(per_sample_weights, dtype), [n, 1])], [n, d], dtype,
                        fused_activation_function="NONE")
    padded = padding_idx is not None and int(padding_idx) >= 0
    length = None if padded or include_last_offset else _equal_length(ctx, offsets, n)
    if length is not None:  # bags of one length, as a 2-D input makes them
        per_bag = ctx.reshape(rows, [count, length, d])
        opcode = {"sum": "SUM", "mean": "MEAN", "max": "REDUCE_MAX"}[how]
        return ctx.emit(opcode, [per_bag, ctx.const(np.array([1], np.int32), name="axis")], [count, d], dtype,
                        keep_dims=False)
    if not all_static([n, count]):
        raise ctx.fail("embedding_bag with a run-time number of indices or bags, other than the equal bags of a "
                       "2-D input, has no lowering")
    n, count = int(n), int(count)
    bags = count - 1 if include_last_offset else count
    member = _membership(ctx, offsets, ids, n, bags, include_last_offset, int(padding_idx) if padded else None)
    if how == "max":
        chosen = ctx.emit("SELECT_V2", [ctx.reshape(member, [bags, n, 1]), ctx.reshape(rows, [1, n, d]),
                                        ctx.const(np.array(-np.inf, dtype), name="lowest")], [bags, n, d], dtype)
        best = ctx.emit("REDUCE_MAX", [chosen, ctx.const(np.array([1], np.int32), name="axis")], [bags, d], dtype,
                        keep_dims=False)
        empty = ctx.emit("LOGICAL_NOT", [ctx.emit("REDUCE_ANY", [member, ctx.const(np.array([1], np.int32),
                                                                                   name="axis")],
                                                  [bags, 1], np.bool_, keep_dims=True)], [bags, 1], np.bool_)
        return ctx.emit("SELECT_V2", [empty, ctx.const(np.array(0, dtype), name="zero"), best], [bags, d], dtype)
    weights = ctx.cast(member, dtype)
    total = ctx.emit("BATCH_MATMUL", [weights, rows], [bags, d], dtype, adj_x=False, adj_y=False,
                     asymmetric_quantize_inputs=False)
    if how == "sum":
        return total
    sizes = ctx.emit("SUM", [weights, ctx.const(np.array([1], np.int32), name="axis")], [bags, 1], dtype,
                     keep_dims=True)
    sizes = ctx.emit("MAXIMUM", [sizes, ctx.const(np.array(1, dtype), name="one")], [bags, 1], dtype)
    return ctx.emit("DIV", [total, sizes], [bags, d], dtype, fused_activation_function="NONE")


def _equal_length(ctx: LoweringContext, offsets: ir.Tensor, n) -> int | None:
    """L when the offsets are 0, L, 2L, ... and the n indices fill those bags exactly (a constant, or the
    RANGE F.embedding_bag makes for a 2-D input of a run-time batch), else None."""
    count = offsets.shape[0]
    if offsets.is_constant:
        starts = np.asarray(offsets.data).astype(np.int64)
        if starts.size < 1 or not all_static([n]):
            return None
        length = int(n) // starts.size
        ok = length > 0 and length * starts.size == int(n) and (starts == np.arange(starts.size) * length).all()
        return length if ok else None
    producer = exact._producer(ctx, offsets)
    if producer is not None and producer.opcode == "CAST":
        producer = exact._producer(ctx, producer.input(0))
    if producer is None or producer.opcode != "RANGE":
        return None
    start, _, step = producer.tensor_inputs()
    if not (start.is_constant and step.is_constant) or int(start.values) != 0 or int(step.values) < 1:
        return None
    length = int(step.values)
    return length if same_size(n, count * length) else None


def _membership(ctx: LoweringContext, offsets: ir.Tensor, ids: ir.Tensor, n: int, bags: int,
                include_last_offset: bool, padding_idx: int | None) -> ir.Tensor:
    """bool [bags, n]: whether position n is in bag b (offsets[b] <= n < the next offset, or n for the last
    bag without include_last_offset), and its index is not padding_idx."""
    positions = np.arange(n, dtype=np.int32)
    if offsets.is_constant:
        starts = offsets.values.astype(np.int64)
        ends = starts[1:bags + 1] if include_last_offset else np.append(starts[1:], n)
        member = (starts[:bags, None] <= positions[None, :]) & (positions[None, :] < ends[:, None])
        result = ctx.const(member, name="bags")
    else:
        offs = ctx.cast(offsets, np.int32)
        start = ctx.reshape(ctx.slice(offs, [0], [bags]), [bags, 1])
        if include_last_offset:
            end = ctx.slice(offs, [1], [bags])
        else:
            end = ctx.emit("CONCATENATION", [ctx.slice(offs, [1], [bags - 1]),
                                             ctx.const(np.array([n], np.int32), name="end")], [bags], np.int32,
                           axis=0, fused_activation_function="NONE") if bags > 1 else \
                ctx.const(np.array([n], np.int32), name="end")
        end = ctx.reshape(end, [bags, 1])
        pos = ctx.const(positions.reshape(1, n), name="positions")
        result = ctx.emit("LOGICAL_AND", [ctx.emit("LESS_EQUAL", [start, pos], [bags, n], np.bool_),
                                          ctx.emit("LESS", [pos, end], [bags, n], np.bool_)], [bags, n], np.bool_)
    if padding_idx is not None:
        kept = ctx.emit("NOT_EQUAL", [ctx.reshape(ids, [1, n]), ctx.const(np.array(padding_idx, np.int32),
                                                                          name="padding_idx")], [1, n], np.bool_)
        result = ctx.emit("LOGICAL_AND", [result, kept], [bags, n], np.bool_)
    return result
