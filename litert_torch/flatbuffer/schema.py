"""Tables that tie IR ops to the TFLite schema: options types, enum-valued option fields, dtypes, op versions.

The schema bindings come from `ai_edge_litert.schema_py_generated`; this module only holds the facts that the
bindings do not carry (which options table an opcode uses, which version a feature needs).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
from ai_edge_litert import schema_py_generated as schema

# Builtin opcode name -> name of its options table (the BuiltinOptions union member). Opcodes absent from this
# table take no options.
OPTIONS_TABLE: dict[str, str] = {
    "IF": "IfOptions",
    "ADD": "AddOptions",
    "SUB": "SubOptions",
    "MUL": "MulOptions",
    "DIV": "DivOptions",
    "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions",
    "CONV_2D": "Conv2DOptions",
    "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions",
    "FULLY_CONNECTED": "FullyConnectedOptions",
    "BATCH_MATMUL": "BatchMatMulOptions",
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "RESHAPE": "ReshapeOptions",
    "TRANSPOSE": "TransposeOptions",
    "CONCATENATION": "ConcatenationOptions",
    "SPLIT": "SplitOptions",
    "SPLIT_V": "SplitVOptions",
    "STRIDED_SLICE": "StridedSliceOptions",
    "SLICE": "SliceOptions",
    "SOFTMAX": "SoftmaxOptions",
    "LOG_SOFTMAX": "LogSoftmaxOptions",
    "PAD": "PadOptions",
    "PADV2": "PadV2Options",
    "LEAKY_RELU": "LeakyReluOptions",
    "GELU": "GeluOptions",
    "HARD_SWISH": "HardSwishOptions",
    "SQUEEZE": "SqueezeOptions",
    "EXPAND_DIMS": "ExpandDimsOptions",
    "CAST": "CastOptions",
    "GATHER": "GatherOptions",
    "GATHER_ND": "GatherNdOptions",
    "SELECT_V2": "SelectV2Options",
    "EQUAL": "EqualOptions",
    "NOT_EQUAL": "NotEqualOptions",
    "LESS": "LessOptions",
    "LESS_EQUAL": "LessEqualOptions",
    "GREATER": "GreaterOptions",
    "GREATER_EQUAL": "GreaterEqualOptions",
    "LOGICAL_AND": "LogicalAndOptions",
    "LOGICAL_OR": "LogicalOrOptions",
    "LOGICAL_NOT": "LogicalNotOptions",
    "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions",
    "ARG_MAX": "ArgMaxOptions",
    "ARG_MIN": "ArgMinOptions",
    "CUMSUM": "CumsumOptions",
    "TOPK_V2": "TopKV2Options",
    "MIRROR_PAD": "MirrorPadOptions",
    "TILE": "TileOptions",
    "BROADCAST_TO": "BroadcastToOptions",
    "REVERSE_V2": "ReverseV2Options",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions",
    "SPACE_TO_DEPTH": "SpaceToDepthOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions",
    "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "TRANSPOSE_CONV": "TransposeConvOptions",
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "UnidirectionalSequenceLSTMOptions",
    "POW": "PowOptions",
    "FLOOR_DIV": "FloorDivOptions",
    "FLOOR_MOD": "FloorModOptions",
    "SQUARE": "SquareOptions",
    "SQUARED_DIFFERENCE": "SquaredDifferenceOptions",
    "PACK": "PackOptions",
    "UNPACK": "UnpackOptions",
    "ABS": "AbsOptions",
    "NEG": "NegOptions",
    "EXP": "ExpOptions",
    "COS": "CosOptions",
    "SIGN": "SignOptions",
    "SHAPE": "ShapeOptions",
}

# Option fields whose values are schema enums, with the enum class. The IR keeps their names as strings.
ENUM_FIELDS: dict[str, type] = {
    "padding": schema.Padding,
    "fused_activation_function": schema.ActivationFunctionType,
    "weights_format": schema.FullyConnectedOptionsWeightsFormat,
    "in_data_type": schema.TensorType,
    "out_data_type": schema.TensorType,
    "output_type": schema.TensorType,
    "out_type": schema.TensorType,
    "mode": schema.MirrorPadMode,
}

_DTYPE_TO_TFL: dict[np.dtype, int] = {
    np.dtype(np.float32): schema.TensorType.FLOAT32,
    np.dtype(np.float16): schema.TensorType.FLOAT16,
    np.dtype(np.float64): schema.TensorType.FLOAT64,
    np.dtype(np.int32): schema.TensorType.INT32,
    np.dtype(np.int64): schema.TensorType.INT64,
    np.dtype(np.int16): schema.TensorType.INT16,
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.uint8): schema.TensorType.UINT8,
    np.dtype(np.uint16): schema.TensorType.UINT16,
    np.dtype(np.uint32): schema.TensorType.UINT32,
    np.dtype(np.uint64): schema.TensorType.UINT64,
    np.dtype(np.bool_): schema.TensorType.BOOL,
    np.dtype(np.complex64): schema.TensorType.COMPLEX64,
}
_TFL_TO_DTYPE = {v: k for k, v in _DTYPE_TO_TFL.items()}


# ml_dtypes' types (a dependency of ai-edge-litert; imported when first needed) by TFLite type. The sub-byte
# ones hold one value per numpy element; the file packs them, the first value in the lowest bits of a byte.
_ML_DTYPES = {schema.TensorType.BFLOAT16: "bfloat16", schema.TensorType.INT4: "int4",
              schema.TensorType.UINT4: "uint4", schema.TensorType.INT2: "int2"}
SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "int2": 2}


def tensor_type(dtype: np.dtype) -> int:
    dtype = np.dtype(dtype)
    found = _DTYPE_TO_TFL.get(dtype)
    if found is not None:
        return found
    for tfl, name in _ML_DTYPES.items():  # whoever made an ml_dtypes array has imported it
        if dtype.name == name:
            return tfl
    raise TypeError(f"dtype {dtype} has no TFLite tensor type")


def numpy_dtype(tfl_type: int) -> np.dtype | None:
    """The numpy dtype of a TFLite tensor type, or None for types numpy cannot hold (string, resource, ...)."""
    if tfl_type in _ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[tfl_type]))
    return _TFL_TO_DTYPE.get(tfl_type)


def packed_size(dtype: np.dtype, count: int) -> int:
    """The bytes `count` values of `dtype` take in a file's buffer."""
    bits = SUB_BYTE_BITS.get(np.dtype(dtype).name)
    return count * np.dtype(dtype).itemsize if bits is None else -(-count * bits // 8)


def pack_sub_byte(values: np.ndarray) -> np.ndarray:
    """int4/uint4/int2 values as the file stores them: 8 // bits to a byte, the first in the lowest bits."""
    bits = SUB_BYTE_BITS[values.dtype.name]
    per = 8 // bits
    codes = (values.reshape(-1).astype(np.int16) & ((1 << bits) - 1)).astype(np.uint8)
    codes = np.concatenate([codes, np.zeros(-len(codes) % per, np.uint8)]).reshape(-1, per)
    return np.bitwise_or.reduce(codes << (bits * np.arange(per, dtype=np.uint8)), axis=1).astype(np.uint8)


def unpack_sub_byte(raw: bytes | memoryview, dtype: np.dtype, count: int) -> np.ndarray:
    """The `count` values of `dtype` (int4/uint4/int2) packed in `raw`."""
    dtype = np.dtype(dtype)
    bits = SUB_BYTE_BITS[dtype.name]
    per = 8 // bits
    codes = (np.frombuffer(raw, np.uint8)[:, None] >> (bits * np.arange(per, dtype=np.uint8))) & ((1 << bits) - 1)
    values = codes.reshape(-1)[:count]
    if dtype.name != "uint4":  # sign-extend, in 8 bits
        half = np.uint8(1 << (bits - 1))
        values = (values ^ half).view(np.int8) - np.int8(half)
    return values.astype(dtype)


def enum_names(enum_cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_") and isinstance(v, int)}


BUILTIN_CODES: dict[str, int] = {
    k: v for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)
}
BUILTIN_NAMES: dict[int, str] = {v: k for k, v in BUILTIN_CODES.items()}
OPTIONS_TYPE_CODES: dict[str, int] = {
    k: v for k, v in vars(schema.BuiltinOptions).items() if not k.startswith("_") and isinstance(v, int)
}
OPTIONS_TYPE_NAMES: dict[int, str] = {v: k for k, v in OPTIONS_TYPE_CODES.items()}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_CAMEL_RE = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    return _CAMEL_RE.sub("_", name).lower()


# Op versions. Kernels are found by (builtin, version): an op must carry the lowest version whose kernel
# supports the features it uses, so that older runtimes reject what they cannot run and newer ones find it.
def _conv_version(op: Any) -> int:
    inp, weights = op.inputs[0], op.inputs[1]
    if inp.shape[-1] != weights.shape[-1]:  # grouped convolution
        return 6
    return 1


def _fc_version(op: Any) -> int:
    return 5 if op.options.get("keep_num_dims") else 1


def _transpose_version(op: Any) -> int:
    rank = op.inputs[0].rank
    return 6 if rank > 5 else 4 if rank == 5 else 1


def _transpose_conv_version(op: Any) -> int:
    return 3 if len(op.inputs) > 3 and op.inputs[3] is not None else 1


def _dequantize_version(op: Any) -> int:
    dtype = op.inputs[0].dtype
    return 3 if dtype == np.float16 else 2 if dtype == np.int8 else 1


VERSION_RULES: dict[str, Callable[[Any], int]] = {
    "DEQUANTIZE": _dequantize_version,
    "BROADCAST_TO": lambda op: 2,  # version 1 was never a runtime kernel
    "TRANSPOSE_CONV": _transpose_conv_version,
    "CONV_2D": _conv_version,
    "FULLY_CONNECTED": _fc_version,
    "TRANSPOSE": _transpose_version,
}


def op_version(op: Any) -> int:
    rule = VERSION_RULES.get(op.opcode)
    return rule(op) if rule else 1
