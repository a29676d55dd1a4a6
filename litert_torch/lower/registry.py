"""The lowering registry and the context lowerings emit into.

A lowering is one function registered for one or more ATen overloads:

    @lowers(aten.relu.default)
    def lower_relu(ctx, node, x):
        "relu(Tensor self) -> Tensor"
        return ctx.emit("RELU", [x], like=node)

It receives the fx node and the node's arguments with every fx node replaced by its IR tensor, emits IR ops
through `ctx`, and returns the IR tensor(s) of the node's value. It never edits ops it did not emit. When a
lowering cannot express a call exactly it raises `LoweringError` with the reason; it never approximates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import LoweringError

LoweringFn = Callable[..., Any]


@dataclass(frozen=True)
class Lowering:
    fn: LoweringFn
    module: str
    schema: str | None  # the docstring's first line: the ATen schema of the lowered op


_REGISTRY: dict[Any, Lowering] = {}


def lowers(*targets: Any) -> Callable[[LoweringFn], LoweringFn]:
    """Register `fn` as the lowering of each ATen overload in `targets`."""

    def register(fn: LoweringFn) -> LoweringFn:
        doc = (fn.__doc__ or "").strip().splitlines()
        for target in targets:
            if target in _REGISTRY:
                raise RuntimeError(f"{target} already has a lowering ({_REGISTRY[target].fn.__qualname__})")
            _REGISTRY[target] = Lowering(fn, fn.__module__, doc[0] if doc else None)
        return fn

    return register


def lowering_for(target: Any) -> Lowering | None:
    return _REGISTRY.get(target)


def registered() -> dict[Any, Lowering]:
    """All registered lowerings, keyed by ATen overload."""
    return dict(_REGISTRY)


# int64 becomes int32: TFLite kernels take int32 indices and shapes, and most have no int64 variant. Constants
# are range-checked when narrowed; EdgeModel range-checks int64 inputs and widens int64 outputs back.
TORCH_TO_NUMPY = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.float64: np.float64,
    torch.int64: np.int32,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return np.dtype(TORCH_TO_NUMPY[dtype])
    except KeyError:
        raise LoweringError(f"dtype {dtype} has no TFLite equivalent here") from None


class LoweringContext:
    """Emits IR ops for the node being lowered, naming tensors after it and tagging ops with its source."""

    def __init__(self, graph: ir.Graph):
        self.graph = graph
        self.node: torch.fx.Node | None = None
        self.source: ir.SourceRef | None = None
        self._count = 0

    def begin(self, node: torch.fx.Node, source: ir.SourceRef) -> None:
        self.node, self.source, self._count = node, source, 0

    def _name(self, hint: str | None = None) -> str:
        base = self.node.name if self.node is not None else "t"
        self._count += 1
        return f"{base}/{hint}" if hint else (base if self._count == 1 else f"{base}_{self._count - 1}")

    # ---- tensors ------------------------------------------------------------------------------------------
    def const(self, value: Any, dtype: Any = None, name: str | None = None) -> ir.Tensor:
        """A constant tensor holding `value` (numpy array, torch tensor or Python number/list)."""
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        arr = np.asarray(value, dtype=dtype)
        if dtype is None and arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        if arr.dtype == np.int64:
            arr = narrow_int64(arr, self.node.name if self.node is not None else "constant")
        return ir.Tensor(self._name(name or "const"), arr.shape, arr.dtype, arr)

    def tensor(self, shape: Sequence[int], dtype: Any, name: str | None = None, *, variable: bool = False) -> ir.Tensor:
        """A new activation tensor named after the node (`variable`: state the runtime keeps between calls)."""
        return ir.Tensor(self._name(name), shape, dtype, is_variable=variable)

    # ---- ops ----------------------------------------------------------------------------------------------
    def emit(
        self,
        opcode: str,
        inputs: Iterable[ir.Tensor | None],
        shape: Sequence[int] | None = None,
        dtype: Any = None,
        *,
        like: ir.Tensor | None = None,
        **options: Any,
    ) -> ir.Tensor:
        """Append one op with a single output of `shape`/`dtype` (or those of `like`) and return the output."""
        inputs = list(inputs)
        if like is not None:
            shape = like.shape if shape is None else shape
            dtype = like.dtype if dtype is None else dtype
        out = self.tensor(shape, dtype)
        self.graph.ops.append(ir.Op(opcode, inputs, [out], options, self.source))
        return out

    def emit_multi(
        self, opcode: str, inputs: Iterable[ir.Tensor | None], outputs: Sequence[tuple[Sequence[int], Any]],
        **options: Any,
    ) -> list[ir.Tensor]:
        outs = [self.tensor(shape, dtype) for shape, dtype in outputs]
        self.graph.ops.append(ir.Op(opcode, list(inputs), outs, options, self.source))
        return outs

    # ---- helpers shared by many lowerings ------------------------------------------------------------------
    def reshape(self, x: ir.Tensor, shape: Sequence[int]) -> ir.Tensor:
        shape = [int(d) for d in shape]
        if list(x.shape) == shape:
            return x
        if x.is_constant:
            return self.const(x.data.reshape(shape), x.dtype, "reshaped")
        return self.emit("RESHAPE", [x, self.const(np.array(shape, np.int32), name="shape")], shape, x.dtype,
                         new_shape=shape)

    def transpose(self, x: ir.Tensor, perm: Sequence[int]) -> ir.Tensor:
        perm = [int(p) for p in perm]
        if perm == list(range(x.rank)):
            return x
        if x.is_constant:
            return self.const(np.transpose(x.data, perm), x.dtype, "transposed")
        shape = [x.shape[p] for p in perm]
        return self.emit("TRANSPOSE", [x, self.const(np.array(perm, np.int32), name="perm")], shape, x.dtype)

    def cast(self, x: ir.Tensor, dtype: Any) -> ir.Tensor:
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        if x.is_constant:
            return self.const(x.data.astype(dtype), dtype)
        return self.emit("CAST", [x], x.shape, dtype)

    def scalar_like(self, value: Any, x: ir.Tensor) -> ir.Tensor:
        """A rank-0 constant of `x`'s dtype: TFLite binary ops need both operands of one element type."""
        return self.const(np.array(value, dtype=x.dtype), x.dtype, "scalar")

    def fail(self, message: str) -> LoweringError:
        return LoweringError(message, target=self.source.target if self.source else None,
                             location=self.source.location if self.source else None)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def narrow_int64(arr: np.ndarray, what: str) -> np.ndarray:
    """int64 data as int32, or an error when a value does not fit (never a silent wrap-around)."""
    if arr.size and (arr.min() < INT32_MIN or arr.max() > INT32_MAX):
        raise LoweringError(f"{what} holds int64 values outside the int32 range the model computes in "
                            f"(min {arr.min()}, max {arr.max()})")
    return arr.astype(np.int32)


def out_meta(node: torch.fx.Node) -> tuple[tuple[int, ...], np.dtype]:
    """Static shape and numpy dtype of a node's (single) value, from its FakeTensor."""
    val = node.meta["val"]
    return tuple(int(d) for d in val.shape), numpy_dtype(val.dtype)


def normalize_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim
