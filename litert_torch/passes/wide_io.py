"""int64 and bfloat16 at a signature's edges (`convert(..., enable_x64=True)`, bfloat16 inputs).

The model computes int64 values in int32 (TFLite's index and arithmetic kernels take int32). With enable_x64
the chosen inputs and outputs are int64 tensors in the signature, each followed (inputs) or preceded (outputs)
by one CAST, so that callers and runtimes that feed int64 buffers need no conversion of their own:

    ids[int64] -> CAST -> ids/int32 -> ...        ... -> y/int32 -> CAST -> y[int64]

bfloat16 inputs and outputs are cast the same way to and from the float32 the model computes in.

An input value outside the int32 range is not representable inside the model; EdgeModel checks the range of
int64 inputs it narrows itself, and this CAST saturates nothing (it wraps), as the official converter's does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from litert_torch import ir


def cast_io(graph: ir.Graph, inputs: list[int], outputs: list[int], dtype: Any) -> None:
    """Make graph inputs at positions `inputs` and outputs at `outputs` `dtype` tensors, with a CAST at each."""
    dtype = np.dtype(dtype)
    prologue = []
    for i in inputs:
        x = graph.inputs[i]
        wide = ir.Tensor(x.name, x.shape, dtype, shape_signature=x._signature)
        x.name = f"{x.name}/{x.dtype.name}"  # the computed tensor keeps its dtype; the signature gets `dtype`
        prologue.append(ir.Op("CAST", [wide], [x]))
        graph.inputs[i] = wide
    graph.ops[:0] = prologue
    for i in outputs:
        y = graph.outputs[i]
        wide = ir.Tensor(f"{y.name}/{dtype.name}", y.shape, dtype, shape_signature=y._signature)
        graph.ops.append(ir.Op("CAST", [y], [wide]))
        graph.outputs[i] = wide
