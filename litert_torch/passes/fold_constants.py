"""Constant folding on the IR: ops whose inputs are all constants become constants.

Most constants are already folded at the ATen level (nodes whose inputs are parameters are evaluated with
PyTorch); this pass catches what passes create. Guarantee afterwards: no op of the kinds below reads only
constants.

    CONST -> TRANSPOSE -> CONV_2D        CONST' -> CONV_2D
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from litert_torch import ir


def _axis(op: ir.Op, rank: int) -> int:
    axis = op.options.get("axis", 0)
    return axis + rank if axis < 0 else axis


FOLDERS: dict[str, Callable[[ir.Op, list[np.ndarray]], np.ndarray]] = {
    "RESHAPE": lambda op, v: v[0].reshape(op.outputs[0].shape),
    "TRANSPOSE": lambda op, v: np.transpose(v[0], v[1].astype(np.int64)),
    "CAST": lambda op, v: v[0].astype(op.outputs[0].dtype),
    "ADD": lambda op, v: v[0] + v[1],
    "SUB": lambda op, v: v[0] - v[1],
    "MUL": lambda op, v: v[0] * v[1],
    "MAXIMUM": lambda op, v: np.maximum(v[0], v[1]),
    "MINIMUM": lambda op, v: np.minimum(v[0], v[1]),
    "NEG": lambda op, v: -v[0],
    "CONCATENATION": lambda op, v: np.concatenate(v, axis=_axis(op, op.outputs[0].rank)),
}


def run(graph: ir.Graph) -> bool:
    changed = False
    replacements: dict[ir.Tensor, ir.Tensor] = {}
    kept = []
    for op in graph.ops:
        op.inputs = [replacements.get(t, t) if t is not None else None for t in op.inputs]
        fold = FOLDERS.get(op.opcode)
        out = op.outputs[0] if len(op.outputs) == 1 else None
        if (fold is None or out is None or op.options.get("fused_activation_function", "NONE") != "NONE"
                or not all(t is not None and t.is_constant for t in op.inputs) or out in graph.outputs):
            kept.append(op)
            continue
        value = np.asarray(fold(op, [t.data for t in op.inputs])).astype(out.dtype).reshape(out.shape)
        replacements[out] = ir.Tensor(out.name, out.shape, out.dtype, value)
        changed = True
    graph.ops = kept
    graph.outputs = [replacements.get(t, t) for t in graph.outputs]
    return changed
