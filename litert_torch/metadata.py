"""Our entries in `Model.metadata`: the source map and the I/O description. The runtime ignores them; our tools
read them.

`litert_torch.source_map` (JSON):
    {"version": 1, "subgraphs": [{"ops": [{"node": "conv2d", "target": "aten.convolution.default",
                                            "location": "model.py:12 in forward", "module": "conv1 (Conv2d)"}, ...]}]}
  one entry per op, in op order (null for ops with no PyTorch origin).

`litert_torch.io` (JSON):
    {"version": 1, "signatures": {"serving_default": {
        "inputs": ["x"], "outputs": ["output_0"],
        "in_spec": <torch pytree spec of (args, kwargs), treespec_dumps format>,
        "out_spec": <torch pytree spec of the output>,
        "tensor_input_positions": [0],
        "input_dtypes": ["int64"], "output_dtypes": ["float32"],
        "channel_last_inputs": [], "channel_last_outputs": []}}}
  `tensor_input_positions` are the positions, among the flattened (args, kwargs) leaves, that feed the
  signature's inputs (the other leaves were constants baked into the model). `input_dtypes` and
  `output_dtypes` are the PyTorch dtypes; an "int64" there is an int32 tensor in the model (TFLite kernels take
  int32 indices), which EdgeModel range-checks on the way in and widens on the way out.
  `channel_last_inputs` / `channel_last_outputs` name the image tensors that are NHWC in the model
  (`convert(..., channel_last_io=True)`); callers pass and receive those as NHWC.
"""

from __future__ import annotations

import json
from typing import Any

from litert_torch import ir

SOURCE_MAP_KEY = "litert_torch.source_map"
IO_KEY = "litert_torch.io"
FORMAT_VERSION = 1


def source_map_json(model: ir.Model) -> bytes:
    return _dumps({
        "version": FORMAT_VERSION,
        "subgraphs": [{"ops": [op.source.to_json() if op.source else None for op in g.ops]} for g in model.subgraphs],
    })


def io_json(signatures: dict[str, dict[str, Any]]) -> bytes:
    return _dumps({"version": FORMAT_VERSION, "signatures": signatures})


def read_json(model_metadata: dict[str, bytes], key: str) -> Any | None:
    raw = model_metadata.get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
