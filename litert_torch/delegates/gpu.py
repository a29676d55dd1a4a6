"""LiteRT's GPU delegate (ML Drift): builtins and constraints, checked against the real delegate.

The table is held against LiteRT's GPU accelerator op by op and on whole models
(`tests/delegates/test_gpu_runtime.py`, through `gpu_runtime.gpu_residency`). General rules: tensors of rank 4
or less; float32/float16, int32, int16 and bool tensors, or int8/uint8 ones with quantization parameters (the
delegate dequantizes quantized models; unquantized int8/uint8 data crashes LiteRT's GPU compile, int64 is
refused); fused activations NONE, RELU, RELU6, RELU_N1_TO_1 and TANH. Op rules add what each op needs (constant
reduction axes, 1-D gather indices, ...). BROADCAST_TO, GATHER_ND and the fused LSTM have no GPU kernel. The
delegate takes only its largest partition (MAX_PARTITIONS); the plan models that.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.delegates.rules import (
    FLOAT_TYPES, Rule, all_of, check, constant_input, fused_activation_in, max_rank, supported,
)

TARGET = "gpu"
DELEGATE = "GPU"
# The delegate takes only its largest partition; the other GPU-capable ops run on the CPU. Measured on LiteRT's
# GPU accelerator: one refused op in a chain of nine leaves the larger side on the GPU. Between equal sizes the
# plan keeps the earlier one (the delegate's counts cannot tell which it takes).
MAX_PARTITIONS = 1
TENSOR_TYPES = (*FLOAT_TYPES, np.dtype(np.int32), np.dtype(np.int16), np.dtype(np.bool_))
COMPARISONS = {"EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"}


def _tensor_types(op: ir.Op) -> str | None:
    for t in (*op.inputs, *op.outputs):
        if t is None or t.is_constant or t.dtype in TENSOR_TYPES:
            continue
        if t.quantization is not None and t.dtype in (np.int8, np.uint8):
            continue  # quantized models run on the GPU in float, dequantized when the delegate loads them
        return f"{t.dtype} tensors (the GPU takes float32/float16, int32, int16, bool and quantized int8/uint8)"
    return None


def _no_shrink(op: ir.Op) -> str | None:
    masks = [k for k in ("shrink_axis_mask", "ellipsis_mask", "new_axis_mask") if op.options.get(k)]
    return f"STRIDED_SLICE with {masks[0]}" if masks else None


def _softmax_last_axis(op: ir.Op) -> str | None:
    return None if op.options.get("beta", 1.0) == 1.0 else "softmax with beta other than 1"


def _gather_1d_indices(op: ir.Op) -> str | None:
    rank = op.input(1).rank
    return None if rank <= 1 else f"GATHER with rank-{rank} indices (the GPU takes 1-D indices)"


def _distinct_inputs(op: ir.Op) -> str | None:
    # The delegate's words: "No support of few identical inputs in the same operation."
    same = op.inputs[0] is op.inputs[1]
    return f"{op.opcode} of one tensor with itself (the GPU compares two distinct tensors)" if same else None


def _float_data(op: ir.Op) -> str | None:
    dtype = op.input(0).dtype
    return None if dtype in FLOAT_TYPES else f"TOPK_V2 of {dtype} data (the GPU sorts float data)"


TABLE: dict[str, Rule] = {name: supported for name in (
    "ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "POW", "ABS", "NEG", "FLOOR",
    "SQRT", "RSQRT", "SQUARE", "EXP", "LOG", "SIN", "COS", "TANH", "LOGISTIC", "ELU", "GELU", "HARD_SWISH",
    "LEAKY_RELU", "RELU", "RELU6", "RELU_N1_TO_1", "PRELU", "CONCATENATION", "RESHAPE", "SPLIT", "SPLIT_V",
    "PAD", "TRANSPOSE", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "BATCH_MATMUL", "FULLY_CONNECTED", "CONV_2D",
    "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "CAST", "QUANTIZE", "DEQUANTIZE", "SELECT_V2", "EQUAL", "NOT_EQUAL",
    "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT", "ARG_MAX",
    "CUMSUM", "BITCAST",
)}
TABLE.update({
    "RESHAPE": constant_input(1, "new shape"),
    "SOFTMAX": _softmax_last_axis,
    "MEAN": constant_input(1, "reduction axes"),
    "SUM": constant_input(1, "reduction axes"),
    "REDUCE_MAX": constant_input(1, "reduction axes"),
    "REDUCE_MIN": constant_input(1, "reduction axes"),
    "REDUCE_PROD": constant_input(1, "reduction axes"),
    "SLICE": all_of(constant_input(1, "begin"), constant_input(2, "size")),
    "STRIDED_SLICE": _no_shrink,
    "PAD": constant_input(1, "paddings"),
    "GATHER": _gather_1d_indices,
    "TOPK_V2": _float_data,
    **{name: _distinct_inputs for name in COMPARISONS},
    "CONV_2D": constant_input(1, "weights"),
    "DEPTHWISE_CONV_2D": constant_input(1, "weights"),
    "TRANSPOSE_CONV": all_of(constant_input(0, "output shape"), constant_input(1, "weights")),
})
# No GPU kernel at all, kept here so that the reason is specific.
NOT_ON_GPU = {
    "BROADCAST_TO": "BROADCAST_TO has no GPU kernel (a broadcasting binary op does the same)",
    "GATHER_ND": "GATHER_ND has no GPU kernel",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "the fused LSTM has no GPU kernel",
}
GENERAL: list[Rule] = [max_rank(4), _tensor_types,
                       fused_activation_in({"NONE", "RELU", "RELU6", "RELU_N1_TO_1", "TANH"})]


def check_op(op: ir.Op) -> str | None:
    if op.opcode in NOT_ON_GPU:
        return NOT_ON_GPU[op.opcode]
    return check(TABLE, GENERAL, op, DELEGATE)
