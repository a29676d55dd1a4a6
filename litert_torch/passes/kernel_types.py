"""Float types LiteRT's kernels lack, computed in float32.

float64: almost no LiteRT kernel takes it (ADD, RESHAPE and CONCATENATION refuse it as much as SOFTMAX does),
so a float64 model computes in float32, as the official converter's models do. Every float64 tensor inside the
graph becomes float32 (constants converted here); float64 graph inputs and outputs stay float64 in the signature,
with one CAST at each edge:

    x[f64] -> CAST -> x/float32 -> ... -> y/float32 -> CAST -> y[f64]

float16: most element-wise, shape and pooling kernels take it, but the builtins in `FLOAT32_ONLY` check for
float32 when the model is prepared or run and refuse the file, and the reductions in `ACCUMULATE_IN_FLOAT32` sum
in float16, where PyTorch's and ONNX's float16 ops accumulate in float32 (a variance over a few hundred values
overflows or loses every digit). Those ops read CASTs of their float16 inputs and write float32 results that one
CAST rounds back:

    DEPTHWISE_CONV_2D(x: f16, w: f16, b: f16) -> y: f16
    CAST(x) -> f32, w/f32, b/f32 (constants converted), DEPTHWISE_CONV_2D -> f32, CAST -> y: f16

The op then rounds once, at its output, as PyTorch's float16 ops do.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.passes.wide_io import cast_io

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)

# builtins whose float16 kernels are missing in LiteRT's CPU op set (the model fails to prepare or to invoke)
FLOAT32_ONLY = frozenset({
    "ARG_MAX", "ARG_MIN", "BATCH_MATMUL", "CONV_2D", "CUMSUM", "DEPTH_TO_SPACE", "DEPTHWISE_CONV_2D", "FLOOR_DIV",
    "FLOOR_MOD", "FULLY_CONNECTED", "GELU", "LOG_SOFTMAX", "MAX_POOL_2D", "POW", "PRELU", "REDUCE_PROD",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "SIGN", "SOFTMAX", "SPACE_TO_DEPTH", "TOPK_V2", "TRANSPOSE_CONV",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
})
# float16 kernels that exist but accumulate in float16
ACCUMULATE_IN_FLOAT32 = frozenset({"SUM", "MEAN", "AVERAGE_POOL_2D", "L2_NORMALIZATION"})


def run(graph: ir.Graph) -> bool:
    changed = _narrow_float64(graph)
    return _float16_in_float32(graph) or changed


def _narrow_float64(graph: ir.Graph) -> bool:
    tensors = [t for t in graph.tensors() if t.dtype == F64]
    if not tensors:
        return False
    edges_in = [i for i, t in enumerate(graph.inputs) if t.dtype == F64]
    edges_out = [i for i, t in enumerate(graph.outputs) if t.dtype == F64]
    for t in tensors:
        t.dtype = F32
        if t.data is not None:
            t.data = np.asarray(t.data, F32)
    cast_io(graph, edges_in, edges_out, F64)
    return True


def _float16_in_float32(graph: ir.Graph) -> bool:
    changed = False
    ops: list[ir.Op] = []
    for op in graph.ops:
        if op.opcode not in FLOAT32_ONLY and op.opcode not in ACCUMULATE_IN_FLOAT32 or not any(
                t is not None and t.dtype == F16 and t.quantization is None for t in (*op.inputs, *op.outputs)):
            ops.append(op)
            continue
        changed = True
        inputs = []
        for k, t in enumerate(op.inputs):
            if t is None or t.dtype != F16 or t.quantization is not None:
                inputs.append(t)
            elif t.is_constant:
                inputs.append(ir.Tensor(f"{t.name}/float32", t.shape, F32, np.asarray(t.data, F32)))
            else:
                wide = ir.Tensor(f"{t.name}/float32_{len(ops)}_{k}", t.shape, F32, shape_signature=t._signature)
                ops.append(ir.Op("CAST", [t], [wide], {}, op.source))
                inputs.append(wide)
        outputs, casts = [], []
        for t in op.outputs:
            if t.dtype != F16:
                outputs.append(t)
                continue
            wide = ir.Tensor(f"{t.name}/float32", t.shape, F32, shape_signature=t._signature)
            outputs.append(wide)
            casts.append(ir.Op("CAST", [wide], [t], {}, op.source))
        op.inputs, op.outputs = inputs, outputs
        ops.append(op)
        ops.extend(casts)
    graph.ops = ops
    return changed
