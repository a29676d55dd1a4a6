"""LiteRT's GPU delegate (ML Drift): builtins and constraints, from its published operator rules.

General rules: tensors of rank 4 or less; float32/float16 activations, or int8/uint8 ones with quantization
parameters (the delegate dequantizes quantized models and computes in float); int32 only as indices, shapes or
cast inputs; fused activations NONE, RELU, RELU6, RELU_N1_TO_1 and TANH. Op rules add what each op needs (constant
reduction axes, 3-D/4-D slices, ...). BROADCAST_TO and GATHER_ND have no GPU kernel.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.delegates.rules import (
    FLOAT_TYPES, Rule, all_of, check, constant_input, fused_activation_in, max_rank, supported,
)

TARGET = "gpu"
DELEGATE = "GPU"
INDEX_OPS = {"GATHER", "CAST", "RESHAPE", "ARG_MAX", "ARG_MIN", "EMBEDDING_LOOKUP"}


def _float_activations(op: ir.Op) -> str | None:
    # The data the op computes on: its first input and its outputs (later inputs may be int32 axes or shapes).
    data = [t for t in (op.inputs[:1] + op.outputs) if t is not None and not t.is_constant]
    for t in data:
        if t.dtype in FLOAT_TYPES:
            continue
        if t.quantization is not None and t.dtype in (np.int8, np.uint8):
            continue  # quantized models run on the GPU in float, dequantized when the delegate loads them
        if t.dtype == np.int32 and op.opcode in INDEX_OPS:
            continue
        return f"{t.dtype} activations (the GPU computes in float32/float16)"
    return None


def _slice_rank(op: ir.Op) -> str | None:
    rank = op.inputs[0].rank
    return None if rank in (3, 4) else f"a rank-{rank} slice (the GPU slices 3-D and 4-D tensors)"


def _no_shrink(op: ir.Op) -> str | None:
    masks = [k for k in ("shrink_axis_mask", "ellipsis_mask", "new_axis_mask") if op.options.get(k)]
    return f"STRIDED_SLICE with {masks[0]}" if masks else None


def _softmax_last_axis(op: ir.Op) -> str | None:
    return None if op.options.get("beta", 1.0) == 1.0 else "softmax with beta other than 1"


def _gather_constant_indices(op: ir.Op) -> str | None:
    return None if op.inputs[1].is_constant else "GATHER with indices computed at run time"


TABLE: dict[str, Rule] = {name: supported for name in (
    "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW", "ABS", "NEG", "FLOOR",
    "SQRT", "RSQRT", "SQUARE", "EXP", "LOG", "SIN", "COS", "TANH", "LOGISTIC", "ELU", "GELU", "HARD_SWISH",
    "LEAKY_RELU", "RELU", "RELU6", "RELU_N1_TO_1", "PRELU", "CONCATENATION", "RESHAPE", "SPLIT", "SPLIT_V",
    "PAD", "TRANSPOSE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "BATCH_MATMUL", "FULLY_CONNECTED", "CONV_2D",
    "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "CAST", "QUANTIZE", "DEQUANTIZE", "SELECT_V2", "EQUAL", "NOT_EQUAL",
    "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "LOGICAL_AND",
)}
TABLE.update({
    "RESHAPE": constant_input(1, "new shape"),
    "SOFTMAX": _softmax_last_axis,
    "MEAN": constant_input(1, "reduction axes"),
    "SUM": constant_input(1, "reduction axes"),
    "REDUCE_MAX": constant_input(1, "reduction axes"),
    "REDUCE_MIN": constant_input(1, "reduction axes"),
    "REDUCE_PROD": constant_input(1, "reduction axes"),
    "SLICE": all_of(_slice_rank, constant_input(1, "begin"), constant_input(2, "size")),
    "STRIDED_SLICE": all_of(_slice_rank, _no_shrink),
    "PAD": constant_input(1, "paddings"),
    "GATHER": _gather_constant_indices,
    "CONV_2D": constant_input(1, "weights"),
    "DEPTHWISE_CONV_2D": constant_input(1, "weights"),
    "TRANSPOSE_CONV": all_of(constant_input(0, "output shape"), constant_input(1, "weights")),
})
# No GPU kernel at all, kept here so that the reason is specific.
NOT_ON_GPU = {
    "BROADCAST_TO": "BROADCAST_TO has no GPU kernel (a broadcasting binary op does the same)",
    "GATHER_ND": "GATHER_ND has no GPU kernel",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "the fused LSTM has no GPU kernel",
    "TOPK_V2": "TOPK_V2 has no GPU kernel",
    "CUMSUM": "CUMSUM has no GPU kernel",
}
GENERAL: list[Rule] = [max_rank(4), _float_activations,
                       fused_activation_in({"NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH"})]


def check_op(op: ir.Op) -> str | None:
    if op.opcode in NOT_ON_GPU:
        return NOT_ON_GPU[op.opcode]
    return check(TABLE, GENERAL, op, DELEGATE)
