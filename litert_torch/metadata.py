"""Our entries in `Model.metadata`: the source map and the I/O description. The runtime ignores them; our tools
read them.

Every entry of ours (these two, `litert_torch.delegate_plan` and `litert_torch.quantization`) is JSON, stored
zlib-compressed when that is smaller (`encode`; a stored entry starts with "{" when it is plain JSON and with
zlib's header byte otherwise); `decode` reads both.

`litert_torch.source_map` (JSON, strings interned so that repeated file names and targets cost little):
    {"version": 1, "strings": ["conv2d", "aten.convolution.default", "model.py:12 in forward", "conv1 (Conv2d)"],
     "subgraphs": [{"ops": [[0, 1, 2, 3, -1], ...]}]}
  one entry per op, in op order: indices into `strings` of the fx node, ATen target, source location, module
  and the node whose value the op's first output holds when that is another node (a conv with a folded batch
  norm or fused activation), -1 where unknown or the same; null for ops with no PyTorch origin.
  `decode_source_map` turns it into dicts.

`litert_torch.io` (JSON):
    {"version": 1, "signatures": {"serving_default": {
        "inputs": ["args_0"], "parameters": ["x"], "outputs": ["output_0"],
        "in_spec": <torch pytree spec of (args, kwargs), treespec_dumps format>,
        "out_spec": <torch pytree spec of the output>,
        "tensor_input_positions": [0],
        "input_dtypes": ["int64"], "output_dtypes": ["float32"],
        "channel_last_inputs": [], "channel_last_outputs": []}}}
  `inputs` are the signature's input names (args_<i> for positional inputs, keyword names for keyword ones, as
  the official litert-torch names them); `parameters` the names forward gives the same inputs, which calls may
  use instead. `tensor_input_positions` are the positions, among the flattened (args, kwargs) leaves, that feed the
  signature's inputs (the other leaves were constants baked into the model). `input_dtypes` and
  `output_dtypes` are the PyTorch dtypes; an "int64" there is an int32 tensor in the model (TFLite kernels take
  int32 indices), which EdgeModel range-checks on the way in and widens on the way out.
  `channel_last_inputs` / `channel_last_outputs` name the image tensors that are NHWC in the model
  (`convert(..., channel_last_io=True)`); callers pass and receive those as NHWC.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from litert_torch import ir
from litert_torch.errors import ModelFileError

# The signature key of a model converted without naming its signatures (TFLite's own default).
DEFAULT_SIGNATURE = "serving_default"

SOURCE_MAP_KEY = "litert_torch.source_map"
IO_KEY = "litert_torch.io"
FORMAT_VERSION = 1


def source_map_json(model: ir.Model) -> bytes:
    strings: list[str] = []
    index: dict[str, int] = {}

    def intern(value: str | None) -> int:
        if value is None:
            return -1
        if value not in index:
            index[value] = len(strings)
            strings.append(value)
        return index[value]

    subgraphs = []
    for graph in model.subgraphs:
        ops = []
        for op in graph.ops:
            s = op.source
            ops.append(None if s is None else [intern(s.node), intern(s.target), intern(s.location), intern(s.module),
                                               intern(op.value_node if op.value_node != s.node else None)])
        subgraphs.append({"ops": ops})
    return encode({"version": FORMAT_VERSION, "strings": strings, "subgraphs": subgraphs})


def decode_source_map(data: Any) -> list[list[dict[str, Any] | None]]:
    """Per subgraph, per op: {"node", "target", "location", "module"} or None. Malformed data gives []."""
    try:
        strings = data["strings"]

        def text(i: int) -> str | None:
            return strings[i] if isinstance(i, int) and 0 <= i < len(strings) else None

        def entry_dict(entry):
            values = dict(zip(("node", "target", "location", "module", "value_node"), map(text, entry)))
            values["value_node"] = values.get("value_node") or values["node"]
            return values

        return [[None if entry is None else entry_dict(entry) for entry in graph["ops"]]
                for graph in data["subgraphs"]]
    except (KeyError, TypeError, ValueError):
        return []


def io_json(signatures: dict[str, dict[str, Any]]) -> bytes:
    return encode({"version": FORMAT_VERSION, "signatures": signatures})


def read_json(model_metadata: dict[str, bytes], key: str) -> Any | None:
    raw = model_metadata.get(key)
    if raw is None:
        return None
    try:
        return decode(raw)
    except ValueError:
        return None


def encode(value: Any) -> bytes:
    """Compact JSON, zlib-compressed when that is smaller (the source map of a large model shrinks ~10x)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")
    packed = zlib.compress(text, 9)
    return packed if len(packed) < len(text) else text


def decode(raw: bytes) -> Any:
    """The value `encode` stored (plain JSON read as it is). Raises ModelFileError (a ValueError) for anything else."""
    try:
        if not raw.lstrip().startswith(b"{"):
            raw = zlib.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (zlib.error, UnicodeDecodeError) as exc:
        raise ModelFileError(f"not a litert_torch metadata entry: {exc}") from exc

