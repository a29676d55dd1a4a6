"""Constant folding on the IR: ops whose inputs are all constants become constants.

Most constants are already folded at the ATen level (nodes whose inputs are parameters are evaluated with
PyTorch); this pass catches what passes create. Guarantee afterwards: no op of the kinds below reads only
constants.

    CONST -> TRANSPOSE -> CONV_2D        CONST' -> CONV_2D

A quantized constant (an int8 weight read through DEQUANTIZE) is transposed or reshaped at conversion instead:
the DEQUANTIZE moves after the folded TRANSPOSE / RESHAPE, the int8 data and its per-channel axis permuted.

    W_q -> DEQUANTIZE -> TRANSPOSE -> CONV_2D        W_q' -> DEQUANTIZE -> CONV_2D
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
    changed = _move_dequantize(graph)
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
        value = np.asarray(fold(op, [t.values for t in op.tensor_inputs()])).astype(out.dtype).reshape(out.shape)
        replacements[out] = ir.Tensor(out.name, out.shape, out.dtype, value)
        changed = True
    graph.ops = kept
    graph.outputs = [replacements.get(t, t) for t in graph.outputs]
    return changed


def _move_dequantize(graph: ir.Graph) -> bool:
    """TRANSPOSE / RESHAPE(DEQUANTIZE(int8 constant)) -> DEQUANTIZE(transposed / reshaped int8 constant)."""
    producers, consumers = graph.producers(), graph.consumers()
    changed = False
    for op in graph.ops:
        if op.opcode not in ("TRANSPOSE", "RESHAPE") or op.options.get("fused_activation_function", "NONE") != "NONE":
            continue
        source = op.input(0)
        dequantize = producers.get(source)
        if (dequantize is None or dequantize.opcode != "DEQUANTIZE" or not dequantize.input(0).is_constant
                or len(consumers.get(source, [])) != 1 or source in graph.outputs
                or not all(t is None or t.is_constant for t in op.inputs[1:])):
            continue
        q = dequantize.input(0)
        params = q.quantization
        out = op.outputs[0]
        if op.opcode == "TRANSPOSE":
            perm = [int(p) for p in op.input(1).values]
            data = np.transpose(q.values, perm)
            if params is not None and len(params.scale) > 1:
                params = ir.Quantization(params.scale, params.zero_point, perm.index(params.axis))
        else:
            if (params is not None and len(params.scale) > 1
                    and tuple(out.shape[:params.axis + 1]) != tuple(q.shape[:params.axis + 1])):
                continue  # the per-channel axis keeps its place only when the reshape leaves the dims up to it
            data = q.values.reshape(out.shape)
        moved = ir.Tensor(f"{q.name}/{op.opcode.lower()}", data.shape, q.dtype, data, quantization=params)
        op.opcode, op.inputs, op.options = "DEQUANTIZE", [moved], {}
        dequantize.outputs = [ir.Tensor(f"{source.name}/unused", source.shape, source.dtype)]
        changed = True
    if changed:
        cleanup_dead(graph)
    return changed


def cleanup_dead(graph: ir.Graph) -> None:
    from litert_torch.passes.cleanup import remove_dead_ops

    remove_dead_ops(graph)
