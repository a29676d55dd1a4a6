"""What LiteRT-LM's GPU backend needs from a text bundle that its CPU backend does not.

LiteRT-LM runs a text bundle on the GPU (`litert_lm.Backend.GPU`) through LiteRT's GPU accelerator (ML Drift),
and asks it to take the whole model: an op the accelerator refuses fails the engine ("Hint fully delegated to
single delegate is set, but the graph is not fully delegated"). One op is worse than refused. The accelerator's
EMBEDDING_LOOKUP reads an int8 table with its quantization parameters; on a float32 table it stops the process
with a failed check ("EMBEDDING_LOOKUP: Unsupported external weights type: 1", litert-lm-api 0.18.1), so a float
bundle written with the token table in an EMBEDDING_LOOKUP kills the program that loads it on the GPU.

`float_lookups_as_gathers` guarantees afterwards that no EMBEDDING_LOOKUP reads a float32 table: each one that
did is a GATHER of the same table along its first axis, which gives the same rows on every backend (a copy, no
arithmetic) and which the GPU accelerator takes with a run-time index:

    EMBEDDING_LOOKUP(ids, table f32[V, H]) -> rows      becomes      GATHER(table, ids, axis=0) -> rows

An int8 table keeps its EMBEDDING_LOOKUP (the GPU reads it as it is, and a GATHER would have to widen the whole
table first).
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir


def float_lookups_as_gathers(model: ir.Model) -> int:
    """Rewrite, in place, every EMBEDDING_LOOKUP of a constant float32 table in `model` as a GATHER along the
    table's first axis (see the module docstring). Returns how many ops were rewritten."""
    count = 0
    for graph in model.subgraphs:
        for op in graph.ops:
            if op.opcode != "EMBEDDING_LOOKUP" or len(op.inputs) != 2:
                continue
            ids, table = op.inputs
            if table is None or not table.is_constant or np.dtype(table.dtype) != np.float32:
                continue
            op.opcode, op.inputs, op.options = "GATHER", [table, ids], {"axis": 0, "batch_dims": 0}
            count += 1
    return count
