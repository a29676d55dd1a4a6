"""Integer kernels for PT2E-quantized ops: a float op between DEQUANTIZE inputs and a QUANTIZE output becomes the
int8 op itself.

A PT2E-quantized module reaches the IR as QUANTIZE / DEQUANTIZE pairs around float ops
(`litert_torch.lower.aten.quantized`). Where an op has an int8 kernel in LiteRT and every operand comes through a
DEQUANTIZE and its only use is a QUANTIZE, the op reads the int8 tensors and writes the quantized output
directly:

    x_q -> DEQUANTIZE -> CONV_2D(., DEQUANTIZE(w_q), bias) -> QUANTIZE -> y_q
    x_q -> CONV_2D(., w_q, bias_q[int32, scale = s_x * s_w]) -> y_q

Covered: CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (int8 activations, symmetric int8 weights per tensor or
per output channel, the bias quantized to int32 at s_x * s_w), ADD and MEAN (int8 operands of any scales), and
MAX_POOL_2D / AVERAGE_POOL_2D where input and output share their quantization. TRANSPOSE, RESHAPE and PAD run
on the int8 tensor (`_sink_dequantize`). The integer
kernels round once at the output where the float form rounds at each QUANTIZE, so results can differ from the
PyTorch module by one int8 step of an output (more after several layers). Ops that do not match keep their float
form between the pairs.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.passes.cleanup import remove_dead_ops

# op -> the axis of its weight that holds output channels (per-channel scales must run along it)
WEIGHTED = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}
# int8 kernels that need the same quantization in and out (a max of int8 codes is the int8 code of the max)
SAME_SCALE = ("MAX_POOL_2D", "AVERAGE_POOL_2D")
INT32_MAX = 2**31 - 1


def run(graph: ir.Graph) -> bool:
    changed = False
    while _sink_dequantize(graph):
        changed = True
    changed |= _requantize(graph)
    producers, consumers = graph.producers(), graph.consumers()
    for op in graph.ops:
        if op.opcode not in WEIGHTED and op.opcode not in ("ADD", "MEAN") and op.opcode not in SAME_SCALE:
            continue
        quantize = _only_quantize_use(op, consumers, graph)
        if quantize is None:
            continue
        if op.opcode in ("ADD", "MEAN") or op.opcode in SAME_SCALE:
            arity = 2 if op.opcode == "ADD" else 1
            found = [_dequantized(t, producers) for t in op.inputs[:arity]]
            operands = [q for q in found if q is not None and not q.is_constant and q.dtype == np.int8]
            if len(operands) != len(found):
                continue
            if op.opcode in SAME_SCALE and operands[0].quantization != quantize.outputs[0].quantization:
                continue
            op.inputs = [*operands, *op.inputs[arity:]]
        else:
            rewritten = _weighted_inputs(op, producers)
            if rewritten is None:
                continue
            op.inputs = rewritten
        op.outputs = list(quantize.outputs)
        quantize.outputs = [ir.Tensor(f"{quantize.outputs[0].name}/unused", quantize.outputs[0].shape, np.int8)]
        changed = True
    if changed:
        remove_dead_ops(graph)
    return changed


# ops that move or pad values without arithmetic: they run on the int8 tensor with its quantization unchanged
MOVES = ("TRANSPOSE", "RESHAPE", "PAD", "PADV2")


def _sink_dequantize(graph: ir.Graph) -> bool:
    """DEQUANTIZE -> TRANSPOSE / RESHAPE / PAD becomes that op on the int8 tensor, then a DEQUANTIZE, so that the
    layout transposes and explicit paddings around a convolution do not stand between it and its DEQUANTIZE. (PAD
    pads an int8 tensor with its zero point, the real 0; PADV2's -inf padding before a max pool becomes the int8
    minimum.)"""
    producers = graph.producers()
    changed = False
    for op in list(graph.ops):  # (the loop inserts ops)
        if op.opcode not in MOVES:
            continue
        dequantize = producers.get(op.input(0))
        if dequantize is None or dequantize.opcode != "DEQUANTIZE":
            continue
        q = dequantize.input(0)
        if q.is_constant or q.quantization is None or len(q.quantization.scale) != 1 or q.dtype != np.int8:
            continue
        rest = list(op.inputs[1:])
        if op.opcode == "PADV2":
            value = rest[1]
            if value is None or value.data is None or value.data.size != 1:
                continue
            v = float(value.data.reshape(()))
            zero = int(q.quantization.zero_point[0])
            if v == 0:
                code = zero
            elif v == -np.inf:
                code = -128
            else:
                continue
            rest[1] = ir.Tensor(f"{value.name}/int8", value.shape, np.int8, np.full(value.shape, code, np.int8),
                                quantization=q.quantization)
        out = op.outputs[0]
        moved = ir.Tensor(f"{out.name}/int8", out.shape, q.dtype, quantization=q.quantization,
                          shape_signature=out._signature)
        op.inputs, op.outputs = [q, *rest], [moved]
        graph.ops.insert(graph.ops.index(op) + 1, ir.Op("DEQUANTIZE", [moved], [out], {}, op.source))
        changed = True
    if changed:
        remove_dead_ops(graph)
    return changed


def _requantize(graph: ir.Graph) -> bool:
    """QUANTIZE(DEQUANTIZE(a)): `a` itself when the two quantizations are the same, else one int8 -> int8
    QUANTIZE (a requantization)."""
    producers = graph.producers()
    replaced: dict[ir.Tensor, ir.Tensor] = {}
    changed = False
    for op in graph.ops:
        if op.opcode != "QUANTIZE":
            continue
        dequantize = producers.get(op.input(0))
        if dequantize is None or dequantize.opcode != "DEQUANTIZE" or dequantize.input(0).is_constant:
            continue
        a = dequantize.input(0)
        if a.dtype != op.outputs[0].dtype or a.quantization is None or len(a.quantization.scale) != 1:
            continue
        if a.quantization == op.outputs[0].quantization and op.outputs[0] not in graph.outputs:
            replaced[op.outputs[0]] = a
        else:
            op.inputs = [a]
        changed = True
    if replaced:
        for op in graph.ops:
            op.inputs = [replaced.get(t, t) if t is not None else None for t in op.inputs]
    if changed:
        remove_dead_ops(graph)
    return changed


def _only_quantize_use(op: ir.Op, consumers: dict, graph: ir.Graph) -> ir.Op | None:
    out = op.outputs[0]
    uses = consumers.get(out, [])
    if len(op.outputs) != 1 or len(uses) != 1 or uses[0].opcode != "QUANTIZE" or out in graph.outputs:
        return None
    q = uses[0].outputs[0]
    if q.dtype != np.int8 or q.quantization is None or len(q.quantization.scale) != 1:
        return None
    return uses[0]


def _dequantized(t: ir.Tensor | None, producers: dict) -> ir.Tensor | None:
    """The int8 tensor `t` was dequantized from, when `t` is a DEQUANTIZE's output."""
    op = producers.get(t) if t is not None else None
    if op is None or op.opcode != "DEQUANTIZE":
        return None
    q = op.input(0)
    return q if q.quantization is not None and q.dtype == np.int8 else None


def _weighted_inputs(op: ir.Op, producers: dict) -> list | None:
    x = _dequantized(op.inputs[0], producers)
    w = _dequantized(op.inputs[1], producers)
    if x is None or w is None or x.is_constant or not w.is_constant:
        return None
    x_params, w_params = x.quantization, w.quantization  # both set: _dequantized returns only quantized tensors
    if x_params is None or w_params is None or len(x_params.scale) != 1:
        return None
    w_scales = np.asarray(w_params.scale, np.float64)
    if any(z != 0 for z in w_params.zero_point):
        return None  # LiteRT's int8 kernels take symmetric weights
    if w_scales.size > 1 and w_params.axis != WEIGHTED[op.opcode]:
        return None
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    rest = list(op.inputs[3:])
    if bias is not None:
        if bias.data is None or bias.dtype != np.float32:
            return None
        scales = float(x_params.scale[0]) * w_scales
        q = np.round(bias.data.astype(np.float64) / scales)
        if np.abs(q).max(initial=0) > INT32_MAX:
            return None
        bias = ir.Tensor(f"{bias.name}/int32", bias.shape, np.int32, q.astype(np.int32),
                         quantization=ir.Quantization(tuple(float(s) for s in scales.reshape(-1)),
                                                      (0,) * scales.size, 0))
    return [x, w, bias, *rest]
