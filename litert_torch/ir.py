"""The graph IR between the ATen graph and the flatbuffer.

A `Model` holds subgraphs of `Op`s over `Tensor`s, the signatures that name their inputs and outputs, and
metadata entries. It mirrors the TFLite schema closely (ops are TFLite builtins with their options), but stays
plain Python: tensors are compared by identity, constant data is a numpy array, and every op remembers the
PyTorch node and source line it came from (`SourceRef`), which becomes the model's source map.

Guarantees kept by the lowerings and passes:
- a graph's ops are in topological order; every op input is a graph input, a constant or an earlier op's output;
- a tensor's `shape` holds ints, and `symbolic.Sym`s for the dimensions known only at run time; constants are
  static; `shape_signature` is the TFLite form (-1 for a dynamic dimension);
- op options are a plain dict keyed by the schema's option field names in snake_case, enum values as strings
  (`{"padding": "SAME", "fused_activation_function": "RELU"}`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from litert_torch.errors import MalformedGraphError
from litert_torch.symbolic import Sym, all_static, dims_of, signature


def derived_name(name: str, role: str) -> str:
    """The name of a tensor a pass makes in place of (or next to) tensor `name`: `name/role`, or `name` itself when
    it already ends so, so that a tensor moved again and again by a pass keeps a name of bounded length (the
    writer makes names unique)."""
    return name if name.endswith("/" + role) else f"{name}/{role}"


@dataclass(frozen=True)
class SourceRef:
    """Where an op came from: the fx node, its ATen target, the PyTorch source line and the module path."""

    node: str
    target: str
    location: str | None = None
    module: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "target": self.target, "location": self.location, "module": self.module}


@dataclass(frozen=True)
class Quantization:
    """Affine quantization parameters of a tensor (per-tensor when `scale` has one entry). Blockwise weights
    (ai-edge-quantizer's int4 recipes: [out, in] weights, one scale per `block_size` inputs of each output)
    have no `scale`: their scales are the constant tensor `block_scales`, [out, in / block_size]."""

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0
    block_size: int = 0
    block_scales: "Tensor | None" = field(default=None, compare=False)


class Tensor:
    """A value in the graph: an activation, a graph input, or a constant (when `data` is set)."""

    __slots__ = ("name", "shape", "dtype", "data", "_signature", "quantization", "is_variable")

    def __init__(
        self,
        name: str,
        shape: Iterable[int],
        dtype: Any,
        data: np.ndarray | None = None,
        *,
        shape_signature: Iterable[int] | None = None,
        quantization: Quantization | None = None,
        is_variable: bool = False,
    ):
        self.name = name
        self.shape = dims_of(shape)
        self.dtype = np.dtype(dtype)
        if data is not None:
            data = np.ascontiguousarray(data, dtype=self.dtype).reshape(self.shape)
        self.data = data
        self._signature = tuple(shape_signature) if shape_signature is not None else None
        self.quantization = quantization
        self.is_variable = is_variable  # state the runtime keeps between invocations (e.g. LSTM state)

    @property
    def shape_signature(self) -> tuple[int, ...] | None:
        """The TFLite shape signature (-1 for a dynamic dimension), or None for a static tensor."""
        if self._signature is not None:
            return self._signature
        return None if all_static(self.shape) else signature(self.shape)

    @shape_signature.setter
    def shape_signature(self, value: Iterable[int] | None) -> None:
        self._signature = tuple(value) if value is not None else None

    @property
    def is_static(self) -> bool:
        return all_static(self.shape)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def values(self) -> np.ndarray:
        """The data of a constant tensor; MalformedGraphError for an activation (callers check `is_constant` or
        know the operand is constant)."""
        if self.data is None:
            raise MalformedGraphError(f"tensor {self.name!r} is read as a constant but holds no data")
        return self.data

    @property
    def size(self) -> "int | Sym":
        """The element count (a Sym when the shape is dynamic)."""
        if all_static(self.shape):
            return math.prod(int(d) for d in self.shape)
        n: Any = 1
        for d in self.shape:
            n = n * d
        return n

    def __repr__(self) -> str:
        kind = "const " if self.is_constant else ""
        return f"Tensor({kind}{self.name!r}, {list(self.shape)}, {self.dtype})"


@dataclass(eq=False)
class Op:
    """One TFLite builtin op. `inputs` may hold None for an omitted optional input; code that needs an input
    present reads it with `input(i)` (or `tensor_inputs()`), which names the op when it is omitted."""

    opcode: str
    inputs: list[Tensor | None]
    outputs: list[Tensor]
    options: dict[str, Any] = field(default_factory=dict)
    source: SourceRef | None = None
    # The fx node whose value the first output equals, when that is not `source.node`: a conv with a folded
    # batch norm or a fused activation computes the value of the batch-norm or activation node.
    value_node: str | None = None

    def input(self, index: int) -> Tensor:
        """Input `index`, which the caller needs present: MalformedGraphError when it is omitted (None)."""
        t = self.inputs[index]
        if t is None:
            raise MalformedGraphError(f"{self.opcode} op has no input {index}, which is read as a tensor: {self!r}")
        return t

    def tensor_inputs(self, count: int | None = None) -> list[Tensor]:
        """The first `count` inputs (all by default), each of which the caller reads: MalformedGraphError when one
        of them is omitted."""
        return [self.input(i) for i in range(len(self.inputs) if count is None else min(count, len(self.inputs)))]

    def __repr__(self) -> str:
        ins = ", ".join(t.name if t is not None else "-" for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"{self.opcode}({ins}) -> {outs}"


@dataclass(eq=False)
class Graph:
    """A subgraph: ordered ops from `inputs` to `outputs`."""

    name: str = "main"
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)

    def tensors(self) -> list[Tensor]:
        """Every tensor the graph uses, each once, in a deterministic order (inputs, then op order)."""
        seen: dict[int, Tensor] = {}
        for t in self.inputs:
            seen.setdefault(id(t), t)
        for op in self.ops:
            for used in (*op.inputs, *op.outputs):
                if used is not None:
                    seen.setdefault(id(used), used)
        for t in self.outputs:
            seen.setdefault(id(t), t)
        return list(seen.values())

    def producers(self) -> dict[Tensor, Op]:
        return {t: op for op in self.ops for t in op.outputs}

    def consumers(self) -> dict[Tensor, list[Op]]:
        uses: dict[Tensor, list[Op]] = {}
        for op in self.ops:
            for t in op.inputs:
                if t is not None:
                    uses.setdefault(t, []).append(op)
        return uses

    def replace_uses(self, old: Tensor, new: Tensor) -> None:
        """Make every reader of `old` (ops and graph outputs) read `new` instead."""
        for op in self.ops:
            op.inputs = [new if t is old else t for t in op.inputs]
        self.outputs = [new if t is old else t for t in self.outputs]

    @property
    def is_dynamic(self) -> bool:
        return any(not t.is_static for t in self.tensors())

    def snapshot(self) -> "Callable[[], None]":
        """A function that puts the graph back as it is now (its ops, their operands and options, and each
        tensor's shape, data and quantization): a rewrite that gives up half-way is undone with it."""
        ops = [(op, list(op.inputs), list(op.outputs), dict(op.options)) for op in self.ops]
        inputs, outputs = list(self.inputs), list(self.outputs)
        tensors = [(t, t.shape, t.dtype, t.data, t._signature, t.quantization) for t in self.tensors()]

        def restore() -> None:
            self.ops = [op for op, *_ in ops]
            for op, ins, outs, options in ops:
                op.inputs, op.outputs, op.options = ins, outs, options
            self.inputs, self.outputs = inputs, outputs
            for t, shape, dtype, data, sig, quant in tensors:
                t.shape, t.dtype, t.data, t._signature, t.quantization = shape, dtype, data, sig, quant

        return restore

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.opcode] = counts.get(op.opcode, 0) + 1
        return counts


@dataclass
class Signature:
    """A named entry point: names for a subgraph's inputs and outputs, position by position."""

    key: str
    subgraph: int
    input_names: list[str]
    output_names: list[str]


@dataclass
class Model:
    """A whole .tflite model: subgraphs, signatures and metadata entries (name -> bytes)."""

    subgraphs: list[Graph]
    signatures: list[Signature]
    metadata: dict[str, bytes] = field(default_factory=dict)
    description: str = "litert_torch"


def all_graphs(model: Model) -> list[Graph]:
    """The model's subgraphs, then the subgraphs its control-flow ops run (an op option holding a Graph), each
    once, in the order they are first named: the subgraphs of the file, in its order."""
    graphs: list[Graph] = []
    seen: set[int] = set()
    pending = list(model.subgraphs)
    while pending:
        graph = pending.pop(0)
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        graphs.append(graph)
        pending += [v for op in graph.ops for v in op.options.values() if isinstance(v, Graph)]
    return graphs
