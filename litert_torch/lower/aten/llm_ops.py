"""Ops a model can call to state what it means where ATen has no single op for it, with their lowerings.

`litert_torch.embedding_lookup(table, ids)` is `table[ids]` for a constant table: one EMBEDDING_LOOKUP, which
(unlike GATHER) LiteRT runs on an int8 table with float output, so weight quantization covers the embeddings.

`litert_torch.update_cache(cache, update, start, axis)` writes `update` into a copy of `cache` starting at index
`start[0]` of `axis` (0 elsewhere), or at the full index vector `start` when it has one entry per axis of `cache`
(a model that writes several caches computes that vector once): a KV cache written at the input positions. torch.export keeps it as one node,
and it lowers to one DYNAMIC_UPDATE_SLICE, which LiteRT can run in place. In eager PyTorch (the reference) a
write past the end of `cache` is an error; TFLite's kernel would instead clamp the start index and overwrite
earlier entries, so callers must keep `start + update.shape[axis] <= cache.shape[axis]` (the LLM runner checks
it before every call).
"""

from __future__ import annotations

import numpy as np
import torch

from litert_torch import ir
from litert_torch.lower.common.registry import lowers, normalize_dim


@torch.library.custom_op("litert_torch::update_cache", mutates_args=())
def update_cache(cache: torch.Tensor, update: torch.Tensor, start: torch.Tensor, axis: int) -> torch.Tensor:
    axis = axis % cache.dim()
    flat = start.reshape(-1)
    begin = int(flat[axis]) if flat.numel() == cache.dim() else int(flat[0])
    length = update.shape[axis]
    if begin < 0 or begin + length > cache.shape[axis]:
        raise IndexError(f"update of {length} entries at {begin} does not fit axis {axis} of size "
                         f"{cache.shape[axis]}")
    out = cache.clone()
    out.narrow(axis, begin, length).copy_(update)
    return out


@update_cache.register_fake
def _(cache, update, start, axis):
    return torch.empty_like(cache)


@lowers(torch.ops.litert_torch.update_cache.default)
def lower_update_cache(ctx, node, cache, update, start, axis) -> ir.Tensor:
    """litert_torch::update_cache(Tensor cache, Tensor update, Tensor start, SymInt axis) -> Tensor

    DYNAMIC_UPDATE_SLICE of the update into the cache at start indices [0, .., start[0], .., 0] (or `start`
    itself when it holds one index per axis).

    Limits: the update must fit at start[0] (TFLite clamps the start index instead of failing)."""
    axis = normalize_dim(axis, cache.rank)
    if update.rank != cache.rank or any(u != c for i, (u, c) in enumerate(zip(update.shape, cache.shape))
                                         if i != axis):
        raise ctx.fail(f"the update {list(update.shape)} must match the cache {list(cache.shape)} on every "
                       f"axis but {axis}")
    if update.dtype != cache.dtype:
        update = ctx.cast(update, cache.dtype)
    if start.rank == 1 and start.shape[0] == cache.rank:  # the full index vector, as computed by the model
        return ctx.emit("DYNAMIC_UPDATE_SLICE", [cache, update, ctx.cast(start, np.int32)], like=cache)
    first = start if start.rank == 1 and start.shape[0] == 1 else None
    if first is None:
        flat = ctx.reshape(start, [start.size])
        first = ctx.emit("SLICE", [flat, ctx.const(np.array([0], np.int32), name="begin"),
                                   ctx.const(np.array([1], np.int32), name="size")], [1], flat.dtype)
    first = ctx.cast(first, np.int32)
    parts = []
    if axis > 0:
        parts.append(ctx.const(np.zeros(axis, np.int32), name="zeros_before"))
    parts.append(first)
    if axis < cache.rank - 1:
        parts.append(ctx.const(np.zeros(cache.rank - 1 - axis, np.int32), name="zeros_after"))
    indices = parts[0] if len(parts) == 1 else ctx.emit(
        "CONCATENATION", parts, [cache.rank], np.int32, axis=0, fused_activation_function="NONE")
    return ctx.emit("DYNAMIC_UPDATE_SLICE", [cache, update, indices], like=cache)


@torch.library.custom_op("litert_torch::embedding_lookup", mutates_args=())
def embedding_lookup(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(ids, table)


@embedding_lookup.register_fake
def _(table, ids):
    return table.new_empty((*ids.shape, *table.shape[1:]))


@lowers(torch.ops.litert_torch.embedding_lookup.default)
def lower_embedding_lookup(ctx, node, table, ids) -> ir.Tensor:
    """litert_torch::embedding_lookup(Tensor table, Tensor ids) -> Tensor

    EMBEDDING_LOOKUP of the flattened ids, reshaped to ids.shape + the row shape.

    Limits: a constant table."""
    if not table.is_constant:
        raise ctx.fail("EMBEDDING_LOOKUP needs a constant table")
    flat = ctx.reshape(ctx.cast(ids, np.int32), [ids.size])
    rows = ctx.emit("EMBEDDING_LOOKUP", [flat, table], [ids.size, *table.shape[1:]], table.dtype)
    return ctx.reshape(rows, [*ids.shape, *table.shape[1:]])
