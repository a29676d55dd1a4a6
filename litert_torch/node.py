"""The node contract: what a frontend hands a lowering for one op.

Both frontends produce it, and lowerings read nothing else about the op they lower:

- the PyTorch frontend (`lower.program`) makes one `Node` per call in the torch.export graph: `op` is the ATen
  overload, `inputs` its positional arguments, `outputs` torch.export's result shapes (dynamic sizes as
  `symbolic.Sym`s);
- the ONNX frontend (`lower.onnx.driver`, from a model `frontend.onnx_model` read) makes one per ONNX node: `op` is `"onnx::<OpType>"`, `inputs`
  its inputs in order, `outputs` from ONNX shape inference.

A lowering is called as `fn(ctx, node, *operands)` (ATen) or `fn(ctx, node, operands, attributes)` (ONNX), the
operands being IR tensors, numpy constants or Python values; `node` answers everything else: the result's
shape and dtype (`node.value`, `node.outputs`), the operands' dtypes before any lowering touched them (for type
promotion: `node.inputs`), which results something reads (`node.used`), and where it came from
(`node.source`: the PyTorch line or the ONNX node).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from litert_torch.ir import SourceRef

_NUMPY_TO_TORCH = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                   np.dtype(np.float64): torch.float64, np.dtype(np.int64): torch.int64,
                   np.dtype(np.int32): torch.int32, np.dtype(np.int16): torch.int16, np.dtype(np.int8): torch.int8,
                   np.dtype(np.uint8): torch.uint8, np.dtype(np.bool_): torch.bool}


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a numpy dtype (or a torch dtype, as it is)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _NUMPY_TO_TORCH[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"dtype {dtype} has no torch equivalent") from None


@dataclass(frozen=True)
class Value:
    """A tensor an op reads or produces: its shape (ints, `Sym`s for sizes known only at run time) and dtype."""

    shape: tuple[Any, ...]
    dtype: torch.dtype
    contiguous: bool = True  # its elements in storage order (as_strided reads the storage)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def promotion_operand(self) -> torch.Tensor:
        """A tensor that takes part in torch's type promotion as this value does (a 0-d tensor promotes like a
        Python scalar of its kind)."""
        return torch.empty((1,) * min(self.rank, 1), dtype=self.dtype)


@dataclass(frozen=True)
class Node:
    """One op as a frontend describes it to the lowerings (see the module docstring)."""

    name: str  # unique in the graph; the IR tensors the lowering makes are named after it
    op: Any  # the ATen overload, or "onnx::<OpType>"
    inputs: tuple[Any, ...] = ()  # positional operands: a Value per tensor, the plain value otherwise
    outputs: tuple[Value | None, ...] = ()  # one per result; None for a result that is not a tensor
    source: SourceRef | None = None
    used: frozenset[int] = field(default_factory=frozenset)  # indices of the results something reads
    single: bool = True  # the op returns one value (not a tuple of them)

    @property
    def value(self) -> Value:
        """The result of a single-result op."""
        if not self.single or len(self.outputs) != 1 or self.outputs[0] is None:
            raise TypeError(f"node {self.name} ({self.op}) does not have a single tensor result")
        return self.outputs[0]

    def output(self, index: int) -> Value:
        """Result `index`, which the caller reads as a tensor."""
        value = self.outputs[index]
        if value is None:
            raise TypeError(f"node {self.name} ({self.op}) result {index} is not a tensor")
        return value

    @property
    def op_type(self) -> str:
        """An ONNX node's op type ("Conv"); the overload's name for an ATen node."""
        op = self.op if isinstance(self.op, str) else str(self.op)
        return op.removeprefix("onnx::")

    def with_value(self, shape: tuple[Any, ...], dtype: Any) -> "Node":
        """This node with one result of `shape` and `dtype`: for a lowering that reaches its result through
        intermediate steps, each lowered by another lowering."""
        return replace(self, outputs=(Value(tuple(shape), torch_dtype(dtype)),), single=True, used=frozenset({0}))
