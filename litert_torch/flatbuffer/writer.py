"""IR `Model` -> .tflite bytes, through the schema's object API and `flatbuffers.Builder`.

Guarantees: the output is deterministic (same IR, same bytes); buffer 0 is the empty sentinel; constants with
identical bytes share one buffer; tensor names are unique in the file; every op carries the lowest version
that supports what it uses (see `schema.op_version`); our metadata entries are stored as `Model.metadata`.
"""

from __future__ import annotations

from typing import Any, Callable

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from litert_torch import ir
from litert_torch.files import atomic_file
from litert_torch.flatbuffer import schema as tables
from litert_torch.symbolic import concrete

FILE_IDENTIFIER = b"TFL3"
WRITE_CHUNK = 1 << 24
SCHEMA_VERSION = 3


class _Buffers:
    """Collects buffer contents, sharing one buffer between identical byte strings. With `external`, the
    contents are not put in the flatbuffer: each buffer gets offset/size fields (filled in by `write_model`)
    and its array is kept, uncopied, in `payloads`.

    Identical contents are found by a fingerprint (size and a sample of the bytes) and confirmed by comparing
    the whole arrays, so that the weights are read once more only where two of them may be the same."""

    def __init__(self, external: bool = False, release: Callable[[np.ndarray], None] | None = None):
        self.buffers: list[schema.BufferT] = [schema.BufferT()]
        self._index: dict[tuple, list[tuple[np.ndarray, int]]] = {}
        self.external = external
        self.payloads: list[tuple[int, np.ndarray]] = []
        self.release = release or (lambda flat: None)

    @staticmethod
    def _fingerprint(flat: np.ndarray, width: int = 4096) -> tuple:
        # The size, the first and the last bytes: reading bytes spread over the array would make most of a
        # weight mapped from a file resident (each read maps the pages around it, up to a large folio).
        return flat.size, hash(flat[:width].tobytes()), hash(flat[-width:].tobytes())

    def _same(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the byte arrays `a` and `b` are equal, compared a piece at a time (no temporary of their
        size) and handed to `release` as they are read."""
        if a.nbytes != b.nbytes:
            return False
        if a.ctypes.data == b.ctypes.data:  # one array seen twice (a tied weight)
            return True
        for start in range(0, a.nbytes, WRITE_CHUNK):
            pa, pb = a[start:start + WRITE_CHUNK], b[start:start + WRITE_CHUNK]
            same = np.array_equal(pa, pb)
            self.release(pa)
            self.release(pb)
            if not same:
                return False
        return True

    def add(self, value: np.ndarray) -> int:
        if value.dtype.name in tables.SUB_BYTE_BITS:
            value = tables.pack_sub_byte(value)
        flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)  # no copy for contiguous data
        candidates = self._index.setdefault(self._fingerprint(flat), [])
        for other, index in candidates:
            if self._same(other, flat):
                self.release(flat)
                return index
        self.release(flat)
        buf = schema.BufferT()
        if self.external and flat.nbytes:
            buf.offset, buf.size = 1, flat.nbytes  # placeholders of the final width, set by write_model
            self.payloads.append((len(self.buffers), flat))
        else:
            buf.data = flat
        candidates.append((flat, len(self.buffers)))
        self.buffers.append(buf)
        return len(self.buffers) - 1

    def add_unshared(self, raw: bytes) -> int:
        buf = schema.BufferT()
        buf.data = np.frombuffer(raw, dtype=np.uint8)
        self.buffers.append(buf)
        return len(self.buffers) - 1


def _options_object(op: ir.Op, graph_index: dict[int, int] | None = None):
    table = tables.OPTIONS_TABLE.get(op.opcode)
    if table is None:
        if op.options:
            raise ValueError(f"{op.opcode} takes no options, got {sorted(op.options)}")
        return 0, None
    obj = getattr(schema, table + "T")()
    for key, value in op.options.items():
        attr = tables.camel(key)
        if not hasattr(obj, attr):
            raise ValueError(f"{op.opcode} options have no field {key!r}")
        if isinstance(value, ir.Graph):  # a control-flow op's subgraph: its index in the file
            value = (graph_index or {})[id(value)]
        elif key in tables.ENUM_FIELDS and isinstance(value, str):
            value = getattr(tables.ENUM_FIELDS[key], value)
        elif isinstance(value, (list, tuple)):
            value = [int(v) for v in value]
        setattr(obj, attr, value)
    return tables.OPTIONS_TYPE_CODES[table], obj


def _quantization(q: ir.Quantization | None, index: dict[ir.Tensor, int]):
    if q is None:
        return None
    qp = schema.QuantizationParametersT()
    if q.block_scales is not None:
        details = schema.BlockwiseQuantizationT()
        details.scales, details.zeroPoints, details.blockSize = index[q.block_scales], -1, q.block_size
        qp.detailsType, qp.details = schema.QuantizationDetails.BlockwiseQuantization, details
        return qp
    qp.scale = [float(s) for s in q.scale]
    qp.zeroPoint = [int(z) for z in q.zero_point]
    qp.quantizedDimension = q.axis
    return qp


def _unique_names(tensors: list[ir.Tensor], prefix: str = "") -> dict[ir.Tensor, str]:
    """Tensor names unique within the subgraph, each after `prefix`."""
    names: dict[ir.Tensor, str] = {}
    used: set[str] = set()
    next_suffix: dict[str, int] = {}  # per name met more than once: the suffix to try next (linear in all)
    for t in tensors:
        base = name = prefix + t.name
        if name in used:
            n = next_suffix.get(base, 1)
            while f"{base}_{n}" in used:
                n += 1
            name, next_suffix[base] = f"{base}_{n}", n + 1
        used.add(name)
        names[t] = name
    return names


def build_model(model: ir.Model, buffers: "_Buffers | None" = None) -> schema.ModelT:
    """The schema object tree of `model` (ready to pack)."""
    buffers = buffers if buffers is not None else _Buffers()
    opcode_index: dict[tuple[str, int], int] = {}
    opcodes: list[schema.OperatorCodeT] = []
    subgraphs = []
    graphs = ir.all_graphs(model)
    graph_index = {id(g): i for i, g in enumerate(graphs)}
    tensor_index: dict[int, dict[ir.Tensor, int]] = {}  # per graph, each tensor's index in the file
    for graph in graphs:
        tensors = graph.tensors()
        index = tensor_index[id(graph)] = {t: i for i, t in enumerate(tensors)}
        for t in list(tensors):  # blockwise scales: tensors that only a quantization names
            scales = t.quantization.block_scales if t.quantization is not None else None
            if scales is not None and scales not in index:
                index[scales] = len(tensors)
                tensors.append(scales)
        # With several subgraphs, names carry their subgraph's name, so that they are unique in the whole file
        # (tools such as ai-edge-quantizer key tensors by name across subgraphs).
        names = _unique_names(tensors, f"{graph.name}/" if len(graphs) > 1 else "")
        sg = schema.SubGraphT()
        sg.name = graph.name
        sg.tensors = []
        for t in tensors:
            tt = schema.TensorT()
            tt.name = names[t]
            tt.shape = list(concrete(t.shape))
            if t.shape_signature is not None and any(d < 0 for d in t.shape_signature):
                tt.shapeSignature = list(t.shape_signature)
            tt.type = tables.tensor_type(t.dtype)
            tt.hasRank = True
            tt.quantization = _quantization(t.quantization, index)
            tt.isVariable = t.is_variable
            if t.is_constant:
                tt.buffer = buffers.add(t.values)
            sg.tensors.append(tt)
        sg.inputs = [index[t] for t in graph.inputs]
        sg.outputs = [index[t] for t in graph.outputs]
        sg.operators = []
        for op in graph.ops:
            key = (op.opcode, tables.op_version(op))
            if key not in opcode_index:
                code = schema.OperatorCodeT()
                code.builtinCode = tables.BUILTIN_CODES[op.opcode]
                code.deprecatedBuiltinCode = min(code.builtinCode, 127)
                code.version = key[1]
                opcode_index[key] = len(opcodes)
                opcodes.append(code)
            o = schema.OperatorT()
            o.opcodeIndex = opcode_index[key]
            o.inputs = [index[t] if t is not None else -1 for t in op.inputs]
            o.outputs = [index[t] for t in op.outputs]
            o.builtinOptionsType, o.builtinOptions = _options_object(op, graph_index)
            sg.operators.append(o)
        subgraphs.append(sg)

    signature_defs = []
    for sig in model.signatures:
        graph = model.subgraphs[sig.subgraph]
        index = tensor_index[id(graph)]
        sd = schema.SignatureDefT()
        sd.signatureKey = sig.key
        sd.subgraphIndex = sig.subgraph
        sd.inputs = [_tensor_map(name, index[t]) for name, t in zip(sig.input_names, graph.inputs)]
        sd.outputs = [_tensor_map(name, index[t]) for name, t in zip(sig.output_names, graph.outputs)]
        signature_defs.append(sd)

    metadata = []
    for name in sorted(model.metadata):
        md = schema.MetadataT()
        md.name = name
        md.buffer = buffers.add_unshared(model.metadata[name])
        metadata.append(md)

    m = schema.ModelT()
    m.version = SCHEMA_VERSION
    m.description = model.description
    m.operatorCodes = opcodes
    m.subgraphs = subgraphs
    m.buffers = buffers.buffers
    m.signatureDefs = signature_defs
    m.metadata = metadata
    return m


def _tensor_map(name: str, index: int) -> schema.TensorMapT:
    tm = schema.TensorMapT()
    tm.name = name
    tm.tensorIndex = index
    return tm


# A flatbuffer addresses at most 2 GB; past this many bytes of constants, models keep their constants after the
# flatbuffer (TFLite's Buffer.offset/size, from the start of the file).
EXTERNAL_THRESHOLD = 2**31 - 2**27
ALIGNMENT = 64


def constant_bytes(model: ir.Model) -> int:
    seen, total = set(), 0
    for graph in model.subgraphs:
        for t in graph.tensors():
            if t.is_constant and id(t.data) not in seen:
                seen.add(id(t.data))
                total += np.asarray(t.data).nbytes
    return total


def needs_external(model: ir.Model) -> bool:
    return constant_bytes(model) > EXTERNAL_THRESHOLD


class _Builder(flatbuffers.Builder):
    """flatbuffers' Builder with byte vectors (every buffer's data) copied straight in: its own path makes a
    byte-swapped copy and a bytes copy of each array first, for byte order that single bytes do not have."""

    def CreateNumpyVector(self, x):
        if x.dtype != np.uint8 or x.ndim != 1 or not x.flags.c_contiguous:
            return super().CreateNumpyVector(x)
        self.StartVector(1, x.size, 1)
        self.head -= x.size
        self.Bytes[self.head:self.head + x.size] = memoryview(x)
        self.vectorNumElems = x.size
        return self.EndVector()


def _pack(obj: schema.ModelT) -> bytes:
    # Sized for the buffers up front: the builder grows by doubling, copying everything each time.
    data = sum(b.data.nbytes for b in obj.buffers or [] if b.data is not None)
    builder = _Builder(data + 64 * len(obj.buffers or []) + (1 << 20))
    builder.Finish(obj.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(memoryview(builder.Bytes)[builder.Head():])  # one copy (Output() would add another)


def serialize(model: ir.Model) -> bytes:
    """The .tflite bytes of `model`, constants inside the flatbuffer (see `write_model` for models past 2 GB)."""
    return _pack(build_model(model))


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def write_model(model: ir.Model, path: str, *, release: Callable[[np.ndarray], None] | None = None) -> int:
    """Write `model` to `path` atomically with every constant after the flatbuffer, streamed from its array
    (no copy of the weights is made). Returns the file size. Works at any size; `convert` uses it past 2 GB.
    `release` (e.g. `memory.FilePages().release`) is given each constant once the writer has read it."""
    buffers = _Buffers(external=True, release=release)
    obj = build_model(model, buffers)
    head = _pack(obj)
    for _ in range(3):  # offsets are fixed-width fields: the second packing has the first one's length
        position = _align(len(head))
        for index, flat in buffers.payloads:
            obj.buffers[index].offset, obj.buffers[index].size = position, flat.nbytes
            position = _align(position + flat.nbytes)
        packed = _pack(obj)
        if len(packed) == len(head):
            head = packed
            break
        head = packed
    else:
        raise RuntimeError("the flatbuffer's length did not settle while placing the external buffers")
    with atomic_file(path) as f:
        f.write(head)
        for index, flat in buffers.payloads:
            f.write(b"\0" * (obj.buffers[index].offset - f.tell()))
            for start in range(0, flat.nbytes, WRITE_CHUNK):  # read, written and handed back a piece at a time
                piece = flat[start:start + WRITE_CHUNK]
                f.write(piece.data)
                buffers.release(piece)
        size = f.tell()
    return size


def _unpacked(data: bytes) -> Any:
    """The schema object tree of `data` with every buffer inline (buffers stored after the flatbuffer are
    addressed from the start of the file, and packing anew moves everything)."""
    m = schema.ModelT.InitFromPackedBuf(data, 0)
    for buf in m.buffers or []:
        if (buf.data is None or not len(buf.data)) and buf.offset > 1 and buf.size:
            buf.data = np.frombuffer(data[buf.offset: buf.offset + buf.size], dtype=np.uint8)
            buf.offset = buf.size = 0
    return m


def _packed(m: Any) -> bytes:
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def _set_metadata(m: Any, entries: dict[str, bytes]) -> None:
    m.metadata = [md for md in (m.metadata or []) if (md.name.decode() if isinstance(md.name, bytes) else md.name)
                  not in entries]
    m.buffers = m.buffers or [schema.BufferT()]
    for name in sorted(entries):
        buf = schema.BufferT()
        buf.data = np.frombuffer(entries[name], dtype=np.uint8)
        m.buffers.append(buf)
        md = schema.MetadataT()
        md.name = name
        md.buffer = len(m.buffers) - 1
        m.metadata.append(md)


def replace_metadata(data: bytes, entries: dict[str, bytes]) -> bytes:
    """`data` (a .tflite from any writer) with the metadata `entries` set, everything else as it was."""
    return rewrite_model(data, entries)


def rewrite_model(data: bytes, entries: dict[str, bytes], *, share_buffers: bool = False,
                  sized_entries: Any = None) -> bytes:
    """`data` (a .tflite from any writer) with the metadata `entries` set, unpacked once: with `share_buffers`,
    tensors whose constant bytes are identical point at one buffer and the copies are emptied (ai-edge-quantizer,
    say, gives each subgraph its own copy of a shared weight); `sized_entries(size)`, when given, returns more
    entries computed from the size of the model with `entries` set (a report of the model's size)."""
    m = _unpacked(bytes(data))
    if share_buffers:
        _share_identical(m)
    _set_metadata(m, entries)
    body = _packed(m)
    if sized_entries is None:
        return body
    _set_metadata(m, sized_entries(len(body)))
    return _packed(m)


def _share_identical(m: Any) -> None:
    first: dict[tuple[int, bytes], int] = {}
    remap: dict[int, int] = {}
    for i, buf in enumerate(m.buffers or []):
        if i == 0 or buf.data is None or not len(buf.data):
            continue
        raw = np.asarray(buf.data, dtype=np.uint8).tobytes()
        remap[i] = first.setdefault((len(raw), raw), i)
    if all(i == j for i, j in remap.items()):
        return
    for sg in m.subgraphs or []:
        for t in sg.tensors or []:
            if t.buffer in remap:
                t.buffer = remap[t.buffer]
    used = {md.buffer for md in (m.metadata or [])}
    for i, j in remap.items():
        if i != j and i not in used:
            m.buffers[i] = schema.BufferT()
