"""Channel-last inputs and outputs: image tensors enter and leave the model as NHWC.

Used by `convert(..., channel_last_io=True)`. Each rank-4 (NCHW) graph input is replaced by an NHWC input
followed by a TRANSPOSE back to NCHW, and each rank-4 output is followed by a TRANSPOSE to NHWC. Run before the
layout pass, which then cancels these transposes against the ones conv and pooling lowerings wrap themselves
in, so that a conv net has no TRANSPOSE at all.

    x[N,C,H,W] -> T(0,2,3,1) -> CONV_2D ...        x[N,H,W,C] -> CONV_2D ...
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir
from litert_torch.passes.layout import transpose_op

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]


def apply(graph: ir.Graph) -> tuple[list[int], list[int]]:
    """Rewrite the graph's rank-4 inputs and outputs to NHWC; returns the positions of those changed."""
    changed_inputs, changed_outputs = [], []
    prologue = []
    for i, x in enumerate(graph.inputs):
        if x.rank != 4:
            continue
        nhwc = ir.Tensor(x.name, [x.shape[p] for p in TO_NHWC], x.dtype, quantization=x.quantization)
        x.name = f"{x.name}/nchw"
        prologue.append(transpose_op(nhwc, TO_NCHW, x, None))
        graph.inputs[i] = nhwc
        changed_inputs.append(i)
    graph.ops[:0] = prologue
    for i, y in enumerate(graph.outputs):
        if y.rank != 4 or y in graph.inputs:
            continue
        nhwc = ir.Tensor(f"{y.name}/nhwc", [y.shape[p] for p in TO_NHWC], y.dtype, quantization=y.quantization)
        graph.ops.append(transpose_op(y, TO_NHWC, nhwc, None))
        graph.outputs[i] = nhwc
        changed_outputs.append(i)
    return changed_inputs, changed_outputs


def channel_last_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.array(shape)[TO_NHWC].tolist())
