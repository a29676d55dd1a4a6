"""XNNPACK (LiteRT's default CPU delegate): the builtins it takes, with their constraints. Ops it does not
take run on LiteRT's builtin CPU kernels, at the cost of leaving the delegated region.

The table follows the XNNPACK delegate of the LiteRT runtime this project pins (ai-edge-litert); the
constraints that are easy to miss -- SPLIT into at most 4 parts, STRIDED_SLICE with unit strides, CONCATENATION of at most 5 inputs, no SPLIT_V,
FULLY_CONNECTED with constant weights and bias -- are checked against that runtime op by op in
tests/delegates/test_xnnpack_runtime.py."""

from __future__ import annotations

from typing import Callable

import numpy as np

from litert_torch import ir
from litert_torch.delegates.rules import FLOAT_TYPES, Rule, activations_of, all_of, check, constant_input, supported

TARGET = "cpu"
DELEGATE = "XNNPACK"
MAX_SPLIT_OUTPUTS = 4
MAX_CONCAT_INPUTS = 5


def _float_activations(op: ir.Op) -> str | None:
    bad = [t for t in activations_of(op) if t.dtype not in FLOAT_TYPES and t.quantization is None]
    return f"{bad[0].dtype} tensors (XNNPACK takes float and quantized int8 activations)" if bad else None


def _no_shrink(op: ir.Op) -> str | None:
    masks = [k for k in ("shrink_axis_mask", "ellipsis_mask", "new_axis_mask") if op.options.get(k)]
    if masks:
        return f"STRIDED_SLICE with {masks[0]}"
    strides = op.input(3)
    if strides.data is None or np.any(np.asarray(strides.data) != 1):
        return "STRIDED_SLICE with a stride other than 1"
    return None


def _static_weights(op: ir.Op) -> str | None:
    return None if op.input(1).is_constant else "weights computed at run time"


def _static_bias(op: ir.Op) -> str | None:
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    return "bias computed at run time" if bias is not None and not bias.is_constant else None


def _at_most(limit: int, what: str, count: Callable[[ir.Op], int]) -> Rule:
    def rule(op: ir.Op) -> str | None:
        n = count(op)
        return f"{op.opcode} with {n} {what} (XNNPACK takes at most {limit})" if n > limit else None
    return rule


def _rank(limit: int) -> Rule:
    def rule(op: ir.Op) -> str | None:
        worst = max((t.rank for t in activations_of(op)), default=0)
        return f"a rank-{worst} tensor (XNNPACK takes up to rank {limit} here)" if worst > limit else None
    return rule


TABLE: dict[str, Rule] = {name: supported for name in (
    "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "ABS", "NEG", "FLOOR", "CEIL",
    "ROUND", "SQRT", "RSQRT", "SQUARE", "EXP", "LOG", "SIN", "COS", "TANH", "LOGISTIC", "ELU", "GELU",
    "HARD_SWISH", "LEAKY_RELU", "RELU", "RELU6", "RELU_N1_TO_1", "PRELU", "SOFTMAX",
    "CONCATENATION", "RESHAPE", "SLICE", "SPLIT", "PAD", "TRANSPOSE", "DEPTH_TO_SPACE",
    "SPACE_TO_DEPTH", "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN",
    "RESIZE_BILINEAR", "BATCH_MATMUL", "FULLY_CONNECTED", "CONV_2D",
    "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "QUANTIZE", "DEQUANTIZE",
)}
TABLE.update({
    "RESHAPE": constant_input(1, "new shape"),
    "STRIDED_SLICE": _no_shrink,
    "SPLIT": _at_most(MAX_SPLIT_OUTPUTS, "outputs", lambda op: len(op.outputs)),
    "CONCATENATION": _at_most(MAX_CONCAT_INPUTS, "inputs", lambda op: len(op.inputs)),
    "FULLY_CONNECTED": all_of(_static_weights, _static_bias),
    "CONV_2D": _static_weights,
    "DEPTHWISE_CONV_2D": _static_weights,
    "TRANSPOSE_CONV": all_of(constant_input(0, "output shape"), constant_input(1, "weights")),
    "PAD": constant_input(1, "paddings"),
    "MEAN": constant_input(1, "reduction axes"),
})

GENERAL: list[Rule] = [_float_activations, _rank(6)]


def check_op(op: ir.Op) -> str | None:
    return check(TABLE, GENERAL, op, DELEGATE)
