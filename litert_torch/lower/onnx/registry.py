"""The ONNX lowering registry: ONNX op type -> `fn(ctx, node, inputs, attrs)`, filled by `onnx_ops` and
`onnx_rnn`; which ops are only folded, and which constant inputs reach the lowerings as parameters."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext, lowering_for
from litert_torch.node import Node
from litert_torch.symbolic import Sym

OnnxFn = Callable[[LoweringContext, Any, list, dict], Any]
LOWERINGS: dict[str, OnnxFn] = {}
DOCS: dict[str, str] = {}
# Evaluated at conversion when every input is a constant; never lowered.
FOLD_ONLY = {"Constant", "ConstantOfShape", "Shape", "Size", "Range"}
# Constant inputs that are parameters in disguise (shapes, axes, bounds): they reach the lowering as numpy
# arrays. Every other constant input is data and becomes a constant tensor.
PARAMETER_INPUTS = {
    "Reshape": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "Expand": {1}, "Tile": {1}, "Split": {1},
    "Slice": {1, 2, 3, 4}, "Clip": {1, 2}, "Pad": {1, 2, 3}, "Resize": {1, 2, 3}, "Upsample": {1},
    "ReduceMean": {1}, "ReduceSum": {1}, "ReduceMax": {1}, "ReduceMin": {1}, "Gather": {1},
    "LSTM": {1, 2, 3, 4, 5, 6, 7}, "GRU": {1, 2, 3, 4, 5}, "Trilu": {1},
}


def onnx_op(*names: str, doc: str | None = None):
    def register(fn: OnnxFn) -> OnnxFn:
        for name in names:
            LOWERINGS[name] = fn
            if doc:
                DOCS[name] = doc
        return fn
    return register

# Parameter inputs whose lowering also takes a value known only at run time (any other parameter input must be
# a constant: the frontend refuses the node otherwise).
RUNTIME_PARAMETERS: dict[str, set[int]] = {"Gather": {1}, "Clip": {1, 2}, "Trilu": {1}, "GRU": {1, 2, 3, 4, 5},
                                          "LSTM": {1, 2, 3, 4, 5, 6, 7}}


def tensor(ctx: LoweringContext, value: Any) -> ir.Tensor | None:
    """An input as a tensor: a constant one for a numpy array (a parameter input given as data), None for none."""
    if value is None or isinstance(value, ir.Tensor):
        return value
    return ctx.const(np.asarray(value))


def aten_fn(target):
    """The ATen lowering of `target`, which most ONNX lowerings call."""
    return lowering_for(target).fn


def sub(node: Node, shape, dtype=np.float32) -> Node:
    """`node` with one result of `shape` (for the intermediate steps of one ONNX node)."""
    return node.with_value(shape, dtype)


def out_shape(node: Node) -> tuple[int, ...]:
    return tuple(node.outputs[0].shape)


def const_list(value, what: str, ctx) -> list:
    if isinstance(value, ir.Tensor):
        if not value.is_constant:
            raise ctx.fail(f"{what} computed at run time has no lowering (it must be a constant)")
        value = value.data
    arr = np.asarray(value)
    if arr.dtype == object:  # sizes known only at run time (Syms) among ints
        return [v if isinstance(v, Sym) else int(v) for v in arr.reshape(-1)]
    return [int(v) if np.issubdtype(arr.dtype, np.integer) else float(v) for v in arr.reshape(-1)]


def scalar(value, ctx, what: str):
    values = const_list(value, what, ctx)
    if len(values) != 1:
        raise ctx.fail(f"{what} must be a single value")
    return values[0]
