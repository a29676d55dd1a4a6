""".tflite bytes -> IR `Model`, for inspection, tests and rewriting existing files.

Reads any TFLite model, not only ours: builtin ops come back with their options as snake_case dicts (enum values
as names), custom ops as opcode "CUSTOM:<name>". Constant buffers become numpy arrays that share the file's memory
where possible. Our metadata entries come back as raw bytes in `Model.metadata`.
"""

from __future__ import annotations

import mmap
import re
import struct
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from litert_torch import ir
from litert_torch.errors import ModelFileError
from litert_torch.flatbuffer import schema as tables
from litert_torch.metadata import SOURCE_MAP_KEY, decode, decode_source_map

_ENUM_NAMES = {field: tables.enum_names(cls) for field, cls in tables.ENUM_FIELDS.items()}


def _check_header(data: bytes | mmap.mmap) -> None:
    if len(data) < 8:
        raise ModelFileError(f"not a TFLite model: {len(data)} bytes is too short for a flatbuffer")
    if data[4:8] != b"TFL3":
        raise ModelFileError("not a TFLite model: the file identifier is not 'TFL3'")


def _options_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    out = {}
    for attr, value in vars(obj).items():
        key = tables.snake(attr)
        if key in _ENUM_NAMES and isinstance(value, int):
            value = _ENUM_NAMES[key].get(value, value)
        elif isinstance(value, np.ndarray):
            value = value.tolist()
        out[key] = value
    return out


def _as_str(value: Any) -> str:
    """A name from the file; one that is not UTF-8 (the runtime would fail decoding it) is corrupt."""
    if not isinstance(value, bytes):
        return value or ""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFileError(f"corrupt TFLite model: the name {value[:40]!r} is not UTF-8") from None


def read_model(data: bytes | mmap.mmap) -> ir.Model:
    """Parse `data` into an IR model. Raises ModelFileError on anything that is not a readable, consistent
    model: every index (buffer, tensor, opcode, subgraph) in range and every constant buffer the size its
    tensor needs, so that a file that passes can be handed to the LiteRT runtime."""
    data = data if isinstance(data, (bytes, mmap.mmap)) else bytes(data)  # a mapped file is read in place
    _check_header(data)
    try:
        m = schema.ModelT.InitFromPackedBuf(data, 0)
        model = _build(m, data)
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - the generated parser raises whatever the corrupt offsets lead to
        raise ModelFileError(_parse_failure(exc, len(data))) from None
    _attach_sources(model)
    return model


# struct's words for a read past the end of the bytes it was given
_PAST_THE_END = re.compile(r"requires a buffer of at least (\d+) bytes")


def _parse_failure(exc: Exception, size: int) -> str:
    """What a parser failure says about the file: a read past its end is a truncated file."""
    past = _PAST_THE_END.search(str(exc)) if isinstance(exc, struct.error) else None
    if past and int(past.group(1)) > size:
        return f"truncated: {size} bytes, the file says at least {int(past.group(1))}"
    return f"corrupt TFLite model: {type(exc).__name__}: {exc}"


def _index(value: int, size: int, what: str, optional: bool = False) -> int:
    if (optional and value == -1) or 0 <= value < size:
        return value
    raise ModelFileError(f"corrupt TFLite model: {what} {value} out of range (0..{size - 1})")


def _build(m: Any, data: bytes | mmap.mmap) -> ir.Model:
    buffers = m.buffers or []
    if not m.subgraphs:
        raise ModelFileError("corrupt TFLite model: it has no subgraph")
    if not buffers:
        raise ModelFileError("corrupt TFLite model: it has no buffer table")

    view = memoryview(data)
    seen: dict[int, memoryview | None] = {}

    def buffer_bytes(index: int) -> memoryview | None:
        """A buffer's bytes, as a view of the file (tensors sharing a buffer share the view: no copies)."""
        _index(index, max(len(buffers), 1), "buffer index")
        if index in seen:
            return seen[index]
        found = None
        buf = buffers[index]
        if index == 0:
            pass
        elif buf.data is not None and len(buf.data):
            found = np.ascontiguousarray(buf.data, dtype=np.uint8).data
        elif buf.offset > 1 and buf.size:
            if buf.offset + buf.size > len(data):
                raise ModelFileError(f"corrupt TFLite model: buffer {index} lies past the end of the file")
            found = view[buf.offset: buf.offset + buf.size]
        seen[index] = found
        return found

    opcodes = []
    for code in m.operatorCodes or []:
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        name = tables.BUILTIN_NAMES.get(builtin, f"BUILTIN_{builtin}")
        if name == "CUSTOM":
            name = f"CUSTOM:{_as_str(code.customCode)}"
        opcodes.append(name)

    subgraphs = []
    for sg in m.subgraphs or []:
        tensors, blockwise = [], []
        for i, t in enumerate(sg.tensors or []):
            dtype = tables.numpy_dtype(t.type)
            shape = [int(d) for d in (t.shape if t.shape is not None else [])]
            if any(d < -1 for d in shape):
                raise ModelFileError(f"corrupt TFLite model: tensor {i} has shape {shape}")
            raw = buffer_bytes(t.buffer)
            value = None
            if raw is not None and dtype is not None and t.type != schema.TensorType.STRING:
                count = int(np.prod(shape, dtype=np.int64))
                if any(d < 0 for d in shape) or tables.packed_size(dtype, count) != len(raw):
                    raise ModelFileError(f"corrupt TFLite model: tensor {i} {_as_str(t.name)!r} of shape {shape} "
                                         f"has a {len(raw)}-byte buffer")
                if dtype.name in tables.SUB_BYTE_BITS:  # packed in the file: a copy, one value per element
                    value = tables.unpack_sub_byte(raw, dtype, count).reshape(shape)
                    value.flags.writeable = False
                else:
                    value = np.frombuffer(raw, dtype=dtype).reshape(shape)  # read-only: passes never edit constants
            quant = None
            q = t.quantization
            if q is not None and q.scale is not None and len(q.scale):
                quant = ir.Quantization(tuple(float(s) for s in q.scale),
                                        tuple(int(z) for z in (q.zeroPoint if q.zeroPoint is not None else [])),
                                        int(q.quantizedDimension))
            elif q is not None and q.detailsType == schema.QuantizationDetails.BlockwiseQuantization:
                blockwise.append((i, q.details))
            signature = [int(d) for d in t.shapeSignature] if t.shapeSignature is not None else None
            tensors.append(ir.Tensor(_as_str(t.name) or f"t{i}", [max(d, 0) for d in shape],
                                     dtype if dtype is not None else np.uint8, value, shape_signature=signature,
                                     quantization=quant, is_variable=bool(t.isVariable)))
        count = len(tensors)
        for i, details in blockwise:  # the scales are a tensor of the subgraph: set once all are read
            scales = tensors[_index(details.scales, count, "blockwise scales tensor")]
            tensors[i].quantization = ir.Quantization((), (), 0, int(details.blockSize), scales)
        ops = []
        for o in sg.operators or []:
            ins = [tensors[_index(i, count, "tensor index", optional=True)] if i >= 0 else None
                   for i in (o.inputs if o.inputs is not None else [])]
            outs = [tensors[_index(i, count, "tensor index")] for i in (o.outputs if o.outputs is not None else [])]
            opcode = opcodes[_index(o.opcodeIndex, len(opcodes), "opcode index")]
            ops.append(ir.Op(opcode, ins, outs, _options_dict(o.builtinOptions)))
        graph = ir.Graph(_as_str(sg.name) or "main",
                         [tensors[_index(i, count, "input tensor")] for i in (sg.inputs if sg.inputs is not None else [])],
                         [tensors[_index(i, count, "output tensor")]
                          for i in (sg.outputs if sg.outputs is not None else [])], ops)
        subgraphs.append(graph)

    signatures: list[ir.Signature] = []
    for sd in m.signatureDefs or []:
        index = _index(sd.subgraphIndex, len(subgraphs), "signature subgraph")
        graph, sg = subgraphs[index], m.subgraphs[index]
        key = _as_str(sd.signatureKey)
        if not key or any(key == s.key for s in signatures):
            raise ModelFileError(f"corrupt TFLite model: signature key {key!r} is empty or repeated")
        count = len(sg.tensors or [])
        for t in [*(sd.inputs or []), *(sd.outputs or [])]:
            _index(t.tensorIndex, count, "signature tensor index")
            if not _as_str(t.name):
                raise ModelFileError(f"corrupt TFLite model: signature {key!r} has an unnamed tensor")
        if sorted(t.tensorIndex for t in sd.inputs or []) != sorted(sg.inputs if sg.inputs is not None else []) or \
                sorted(t.tensorIndex for t in sd.outputs or []) != sorted(sg.outputs if sg.outputs is not None else []):
            raise ModelFileError(f"corrupt TFLite model: signature {key!r} does not name its subgraph's inputs and "
                                 "outputs")
        by_index_in = {t.tensorIndex: _as_str(t.name) for t in sd.inputs or []}
        by_index_out = {t.tensorIndex: _as_str(t.name) for t in sd.outputs or []}
        signatures.append(ir.Signature(
            key, index,
            [by_index_in.get(i, graph.inputs[k].name) for k, i in enumerate(sg.inputs if sg.inputs is not None else [])],
            [by_index_out.get(i, graph.outputs[k].name)
             for k, i in enumerate(sg.outputs if sg.outputs is not None else [])],
        ))

    metadata = {}
    for md in m.metadata or []:
        raw = buffer_bytes(md.buffer)
        if raw is not None:
            metadata[_as_str(md.name)] = bytes(raw)
    return ir.Model(subgraphs, signatures, metadata, _as_str(m.description))


def _attach_sources(model: ir.Model) -> None:
    """Give ops back the SourceRef our source map recorded for them."""
    raw = model.metadata.get(SOURCE_MAP_KEY)
    if raw is None:
        return
    try:
        graphs = decode_source_map(decode(raw))
    except ValueError:
        return
    for graph, entries in zip(model.subgraphs, graphs):
        for op, entry in zip(graph.ops, entries):
            if entry is not None and entry["node"] is not None and entry["target"] is not None:
                op.source = ir.SourceRef(entry["node"], entry["target"], entry["location"], entry["module"])
                if entry["value_node"] != entry["node"]:
                    op.value_node = entry["value_node"]


def read_metadata(data: bytes | mmap.mmap) -> dict[str, bytes]:
    """Only the `Model.metadata` entries (name -> bytes), without unpacking tensors or buffers."""
    _check_header(data)
    try:
        m = schema.Model.GetRootAs(data, 0)
        entries = {}
        for i in range(m.MetadataLength()):
            md = m.Metadata(i)
            buf = m.Buffers(md.Buffer())
            if buf is None:
                continue
            if buf.DataLength():
                entries[_as_str(md.Name())] = buf.DataAsNumpy().tobytes()
            elif buf.Offset() > 1 and buf.Size():
                entries[_as_str(md.Name())] = bytes(data[buf.Offset(): buf.Offset() + buf.Size()])
        return entries
    except ModelFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - corrupt offsets surface as arbitrary errors from the generated code
        raise ModelFileError(_parse_failure(exc, len(data))) from None
