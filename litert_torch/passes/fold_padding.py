"""Fold explicit padding into the convolution or max pooling that reads it, where SAME padding is identical.

Guarantee afterwards: no PAD (zeros) feeds a VALID CONV_2D / DEPTHWISE_CONV_2D, and no PADV2 (-inf) feeds a
VALID MAX_POOL_2D, when TFLite's SAME rule pads exactly those rows and columns; the op reads the unpadded
tensor with padding SAME instead. (Zero padding before an average pool is not SAME: SAME averages exclude the
padding.)

    PAD[[0,0],[1,1],[1,1],[0,0]] -> CONV_2D(3x3, VALID)        CONV_2D(3x3, SAME)
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _window(op: ir.Op) -> tuple[list[int], list[int], list[int]]:
    """Kernel extent, stride and dilation over (H, W)."""
    o = op.options
    if op.opcode in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        kernel = list(op.input(1).shape[1:3])
        return kernel, [o["stride_h"], o["stride_w"]], [o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1)]
    return [o["filter_height"], o["filter_width"]], [o["stride_h"], o["stride_w"]], [1, 1]


def _pad_value_ok(pad: ir.Op, reader: ir.Op) -> bool:
    if reader.opcode == "MAX_POOL_2D":
        return pad.opcode == "PADV2" and pad.input(2).is_constant and bool(np.all(np.isneginf(pad.input(2).values)))
    if pad.opcode == "PAD":
        return True
    return pad.input(2).is_constant and not np.any(pad.input(2).values)


def run(graph: ir.Graph) -> bool:
    producers = graph.producers()
    consumers = graph.consumers()
    changed = False
    for op in graph.ops:
        if op.opcode not in ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D") or op.options.get("padding") != "VALID":
            continue
        pad = producers.get(op.input(0))
        if pad is None or pad.opcode not in ("PAD", "PADV2") or not pad.input(1).is_constant:
            continue
        if len(consumers.get(pad.outputs[0], [])) != 1 or pad.outputs[0] in graph.outputs:
            continue
        if not _pad_value_ok(pad, op):
            continue
        x = pad.input(0)
        pads = pad.input(1).values.reshape(-1, 2).tolist()
        if x.rank != 4 or pads[0] != [0, 0] or pads[3] != [0, 0]:
            continue
        kernel, stride, dilation = _window(op)
        if all(tuple(pads[1 + i]) == _same_padding(x.shape[1 + i], kernel[i], stride[i], dilation[i])
               for i in range(2)):
            op.inputs = [x, *op.inputs[1:]]
            op.options["padding"] = "SAME"
            changed = True
    return changed


NONNEGATIVE_ACTIVATIONS = {"RELU", "RELU6", "RELU_0_TO_1"}


def _nonnegative(op: ir.Op | None) -> bool:
    if op is None:
        return False
    return op.opcode in NONNEGATIVE_ACTIVATIONS or op.options.get("fused_activation_function") in ("RELU", "RELU6")


def zero_pad_nonnegative(graph: ir.Graph) -> bool:
    """A -inf PADV2 before MAX_POOL_2D whose input comes out of a ReLU becomes a plain zero PAD.

    Exact: every pooling window holds at least one real element, all real elements are >= 0, so a 0 in the
    padding never wins the max. PAD runs on XNNPACK and the GPU and NPU delegates; PADV2 on none of them.

        RELU -> PADV2(-inf) -> MAX_POOL_2D        RELU -> PAD -> MAX_POOL_2D
    """
    producers = graph.producers()
    consumers = graph.consumers()
    changed = False
    for i, op in enumerate(graph.ops):
        if op.opcode != "PADV2" or not op.input(2).is_constant or not np.all(np.isneginf(op.input(2).values)):
            continue
        readers = consumers.get(op.outputs[0], [])
        if not readers or any(r.opcode != "MAX_POOL_2D" for r in readers) or op.outputs[0] in graph.outputs:
            continue
        if _nonnegative(producers.get(op.input(0))):
            graph.ops[i] = ir.Op("PAD", op.inputs[:2], op.outputs, {}, op.source, op.value_node)
            changed = True
    return changed
