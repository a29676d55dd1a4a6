"""int4 weights for the gathered expert tables of mixture-of-experts layers, the part of an int4 recipe that
ai-edge-quantizer leaves float (it quantizes the weights of FULLY_CONNECTED and EMBEDDING_LOOKUP, not a table
that a GATHER reads by expert).

After `int4_gathered_tables`, every constant float32 [E, A, B] table that a GATHER reads along axis 0 is stored
int4 in blocks of `block` along B (each expert's [out, in] matrix blocked along its inputs, as ai-edge-quantizer's
BLOCKWISE_<block> FULLY_CONNECTED weights), with float16 scales; what reads it gets the same float32 values as
before (the dequantized table), so no reader changes:

    before:  GATHER(table f32 [E, A, B], experts) -> picked [P, A, B]
    after:   GATHER(table int4 [E, A, B], experts) -> CAST f32 -> RESHAPE [P, A, B/block, block]
             GATHER(scales f16 [E, A, B/block, 1], experts) -> CAST f32 ----> MUL -> RESHAPE picked [P, A, B]

LiteRT has no kernel that multiplies by a gathered int4 table, hence the widening: a token reads the int4 rows
of its k experts (k/E of the table's bytes) and widens only those. A BATCH_MATMUL that reads the table whole
(each expert's first tile of a prefill chunk, multiplied in place) reads the table widened whole the same way,
once per graph, before its first such product."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable

import ml_dtypes
import numpy as np

from litert_torch import ir

INT4_MAX = 7  # symmetric: [-7, 7], as ai-edge-quantizer's symmetric int4 weights


def int4_gathered_tables(graphs: Iterable[ir.Graph], block: int | None, *,
                         release: Callable[[np.ndarray], None] | None = None) -> int:
    """Store the gathered expert tables of `graphs` int4 in blocks of `block` along their last axis (None: one
    block per row, int4 per channel; see the module docstring); a table whose last axis is not a multiple of
    `block` stays float. Tables several graphs
    or ops read are quantized once. `release` is given each float table once it is quantized. Returns how many
    tables were quantized."""
    graphs = list(graphs)
    done: dict[tuple, _Int4Table] = {}

    def key_of(w: ir.Tensor) -> tuple:
        return (w.values.ctypes.data, w.values.nbytes, tuple(w.shape))

    def table_of(w: ir.Tensor | None) -> _Int4Table | None:
        if (w is None or not w.is_constant or w.dtype != np.float32 or w.rank != 3
                or w.shape[2] % (block or w.shape[2]) != 0):
            return None
        if key_of(w) not in done:
            done[key_of(w)] = _Int4Table(w, block or w.shape[2], release)
        return done[key_of(w)]

    # the tables some graph gathers by expert (the same weights may be another tensor in each signature)
    gathered = {key_of(op.input(0)) for graph in graphs for op in graph.ops if _gathers_experts(op)}
    for graph in graphs:
        ops: list[ir.Op] = []
        whole: dict[int, ir.Tensor] = {}  # table id -> the table widened in this graph
        for op in graph.ops:
            if _gathers_experts(op) and (table := table_of(op.inputs[0])) is not None:
                ops += table.gather(op)
                continue
            w = op.inputs[1] if op.opcode == "BATCH_MATMUL" and len(op.inputs) > 1 else None
            if w is not None and w.is_constant and key_of(w) in gathered and (table := table_of(w)) is not None:
                if id(w) not in whole:
                    widened, made = table.widened(op)
                    ops += made
                    whole[id(w)] = widened
                op.inputs = [op.inputs[0], whole[id(w)], *op.inputs[2:]]
            ops.append(op)
        graph.ops = ops
    return len(done)


def _gathers_experts(op: ir.Op) -> bool:
    """A GATHER of rows of a constant rank-3 table along axis 0, with a static output shape."""
    return (op.opcode == "GATHER" and bool(op.inputs) and op.inputs[0] is not None and op.inputs[0].is_constant
            and op.inputs[0].rank == 3 and op.options.get("axis", 0) == 0 and op.options.get("batch_dims", 0) == 0
            and all(isinstance(d, int) for d in op.outputs[0].shape))


class _Int4Table:
    """One table's int4 values [E, A, B] and float16 block scales [E, A, B / block, 1]."""

    def __init__(self, w: ir.Tensor, block: int, release: Callable[[np.ndarray], None] | None):
        self.w, self.block = w, block
        q, scale = int4_blocks(np.asarray(w.data, np.float32), block, release)
        self.int4 = ir.Tensor(f"{w.name}/int4", w.shape, ml_dtypes.int4, q)
        self.scales = ir.Tensor(f"{w.name}/scale", scale.shape, np.float16, scale)

    def gather(self, op: ir.Op) -> list[ir.Op]:
        """The ops replacing GATHER `op` of this table: its output, the chosen experts' rows widened."""
        indices, out = op.input(1), op.outputs[0]
        picked = ir.Tensor(f"{out.name}/int4", out.shape, ml_dtypes.int4)
        scales = ir.Tensor(f"{out.name}/scale", [*indices.shape, *self.scales.shape[1:]], np.float16)
        return [ir.Op("GATHER", [self.int4, indices], [picked], dict(op.options), op.source),
                ir.Op("GATHER", [self.scales, indices], [scales], dict(op.options), op.source),
                *self._widen(picked, scales, out, op.source)]

    def widened(self, op: ir.Op) -> tuple[ir.Tensor, list[ir.Op]]:
        """The whole table widened to float32 (for `op`, a product that reads it whole), and the ops making it."""
        out = ir.Tensor(f"{self.w.name}/widened", self.w.shape, np.float32)
        return out, self._widen(self.int4, self.scales, out, op.source)

    def _widen(self, values: ir.Tensor, scales: ir.Tensor, out: ir.Tensor, source) -> list[ir.Op]:
        """int4 `values` [..., A, B] times their float16 block `scales` [..., A, B / block, 1] into `out`."""
        *lead, b = out.shape
        blocked = [*lead, b // self.block, self.block]
        wide = ir.Tensor(f"{out.name}/wide", out.shape, np.float32)
        rows = ir.Tensor(f"{out.name}/blocks", blocked, np.float32)
        scale = ir.Tensor(f"{out.name}/scale_f32", scales.shape, np.float32)
        product = ir.Tensor(f"{out.name}/scaled", blocked, np.float32)
        return [ir.Op("CAST", [values], [wide], {}, source),
                _reshape(wide, rows, source),
                ir.Op("CAST", [scales], [scale], {}, source),
                ir.Op("MUL", [rows, scale], [product], {"fused_activation_function": "NONE"}, source),
                _reshape(product, out, source)]


def _reshape(x: ir.Tensor, out: ir.Tensor, source) -> ir.Op:
    shape = ir.Tensor(f"{out.name}/shape", [out.rank], np.int32, np.array(out.shape, np.int32))
    return ir.Op("RESHAPE", [x, shape], [out], {"new_shape": list(out.shape)}, source)


def recipe_int4_block(recipe: Any) -> int | None | bool:
    """What an ai-edge-quantizer recipe (a list of entries, or a JSON file of one) makes of the weights of
    FULLY_CONNECTED ops (its last entry for all ops or for FULLY_CONNECTED, as later entries override earlier
    ones): their int4 block size (None: per channel), or False where they are not int4 (or `recipe` is no
    such recipe: "fp16")."""
    if isinstance(recipe, (str, os.PathLike)) and os.fspath(recipe).endswith(".json"):
        with open(recipe) as f:
            recipe = json.load(f)
    if not isinstance(recipe, list):
        return False
    entries = [r for r in recipe if isinstance(r, dict) and r.get("operation") in ("*", "FULLY_CONNECTED")]
    weights = entries[-1].get("op_config", {}).get("weight_tensor_config") or {} if entries else {}
    if weights.get("num_bits") != 4:
        return False
    granularity = str(weights.get("granularity", ""))
    return int(granularity.removeprefix("BLOCKWISE_")) if granularity.startswith("BLOCKWISE_") else None


def int4_blocks(data: np.ndarray, block: int, release: Callable[[np.ndarray], None] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 of `data` [E, A, B] in blocks of `block` along B (scale = max |block| / 7; an all-zero
    block gets scale 1), a matrix at a time: the int4 values [E, A, B] and float16 scales [E, A, B / block, 1].
    The values are rounded against the float16 scales they are stored with."""
    e, a, b = data.shape
    q = np.empty(data.shape, ml_dtypes.int4)
    scales = np.empty((e, a, b // block, 1), np.float16)
    for i, m in enumerate(data):
        blocks = np.asarray(m, np.float32).reshape(a, b // block, block)
        s = (np.abs(blocks).max(axis=2, keepdims=True) / np.float32(INT4_MAX)).astype(np.float16)
        s = np.where(s > 0, s, np.float16(1.0))
        scaled = np.clip(np.rint(blocks / s.astype(np.float32)), -INT4_MAX, INT4_MAX)
        q[i] = scaled.reshape(a, b).astype(np.int8).astype(ml_dtypes.int4)
        scales[i] = s
        if release is not None:
            release(m)
    return q, scales
