"""The lowering registry and the context lowerings emit into.

A lowering is one function registered for one or more ATen overloads:

    @lowers(aten.relu.default)
    def lower_relu(ctx, node, x) -> ir.Tensor:
        "relu(Tensor self) -> Tensor"
        return ctx.emit("RELU", [x], like=x)

It receives the node (`litert_torch.node.Node`: result shapes and dtypes, operand dtypes, source) and the
node's arguments with every tensor replaced by its IR tensor, emits IR ops through `ctx`, and returns the IR tensor(s) of the node's value. It never edits ops it did not emit. When a
lowering cannot express a call exactly it raises `LoweringError` with the reason; it never approximates.

Its docstring's first line is the ATen schema of the overload it lowers (of one of them when it is registered for
several; `schema_of` gives it for a lowering made in a loop): `Lowering.schema`, shown in docs/COVERAGE.md. Its
return type says what it returns: `ir.Tensor`, or a tuple (a list for a split) with one `ir.Tensor | None` per
result, None where nothing reads that result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import LoweringError
from litert_torch.node import Node
from litert_torch.symbolic import DynamicSizeError, Sym, SymSpace, all_static, dims_of

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


# Lowerings of ops other libraries define (torch.library custom ops), by their qualified name
# ("transformers::grouped_mm_fallback"): the op exists only once that library is imported.
_BY_NAME: dict[str, Lowering] = {}


def lowers_library_op(*names: str) -> Callable[[LoweringFn], LoweringFn]:
    """Register `fn` as the lowering of each custom op named "namespace::name" (its default overload)."""

    def register(fn: LoweringFn) -> LoweringFn:
        doc = (fn.__doc__ or "").strip().splitlines()
        for name in names:
            _BY_NAME[name] = Lowering(fn, fn.__module__, doc[0] if doc else None)
        return fn

    return register


def _library_name(target: Any) -> str | None:
    if not isinstance(target, torch._ops.OpOverload) or target._overloadname != "default":
        return None
    return target.name()


def schema_of(target: Any) -> str:
    """The schema of an ATen overload as a lowering's docstring starts with it: "relu(Tensor self) -> Tensor",
    the namespace left out for aten ops."""
    return str(target._schema).removeprefix("aten::")


def lowering_for(target: Any) -> Lowering | None:
    found = _REGISTRY.get(target)
    if found is None and _BY_NAME:
        qualified = _library_name(target)
        found = _BY_NAME.get(qualified) if qualified else None
    return found


def lowered_as_is(target: Any) -> bool:
    """Whether `target` has a lowering of its own (with the lowering modules imported: `litert_torch.lower`)."""
    return lowering_for(target) is not None


def registered() -> dict[Any, Lowering]:
    """All registered lowerings, keyed by ATen overload."""
    return dict(_REGISTRY)


# int64 becomes int32: TFLite kernels take int32 indices and shapes, and most have no int64 variant. Constants
# are range-checked when narrowed; EdgeModel range-checks int64 inputs and widens int64 outputs back.
TORCH_TO_NUMPY = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.float64: np.float64,
    torch.bfloat16: np.float32,  # computed in float32; bfloat16 model inputs and outputs are cast at the edges
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


# Kernels that fail (XNNPACK's batch matmul, convolutions and resizes: "failed to reshape runtime"), give
# garbage output shapes (XNNPACK's pooling over a batch of none) or crash the process (the built-in SOFTMAX over
# an axis of no elements) on tensors with no elements, or refuse them (UNPACK).
EMPTY_UNSAFE = frozenset({"SOFTMAX", "LOG_SOFTMAX", "BATCH_MATMUL", "UNPACK", "CONV_2D", "DEPTHWISE_CONV_2D",
                          "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "MAX_POOL_2D", "AVERAGE_POOL_2D",
                          "L2_POOL_2D", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE"})


class LoweringContext:
    """Emits IR ops for the node being lowered, naming tensors after it and tagging ops with its source."""

    def __init__(self, graph: ir.Graph, space: SymSpace | None = None):
        self.graph = graph
        self.space = space if space is not None else SymSpace()
        self.node: Node | None = None
        self.source: ir.SourceRef | None = None
        self._count = 0
        self._inputs: list[ir.Tensor] = []  # graph inputs, where run-time sizes are read
        self._anchors: list[ir.Tensor] = []  # tensors whose shapes hold sizes decided by values (`anchor`)
        self._sizes: dict[Any, ir.Tensor] = {}  # size expression -> its [1] int32 tensor
        self._shape_of: dict[int, ir.Tensor] = {}  # id(tensor) -> its SHAPE
        self._bound: dict[Any, ir.Tensor] = {}  # size symbol read from a tensor's value (`bind`) -> [1] int32
        self.reported: set[str] = set()  # warnings already logged for this graph (`warn_once`)
        self._folded: dict[int, tuple[ir.Tensor, ir.Tensor]] = {}  # id(t) -> (t, the constant t transposes)

    def begin(self, node: Node, source: ir.SourceRef | None) -> None:
        self.node, self.source, self._count = node, source, 0

    def warn_once(self, key: str, message: str, *args: Any) -> None:
        """Log a warning about the model the first time `key` comes up while lowering this graph."""
        if key not in self.reported:
            self.reported.add(key)
            logging.getLogger("litert_torch").warning(message, *args)

    def checkpoint(self) -> Any:
        """The context's state now, for `rollback`: a lowering tried and then redone another way."""
        return len(self.graph.ops), dict(self._sizes), dict(self._shape_of), self._count, len(self._anchors)

    def rollback(self, state: Any) -> None:
        """Drop every op emitted since `checkpoint` returned `state`, and the size tensors they made."""
        ops, self._sizes, self._shape_of, self._count, anchors = state
        del self.graph.ops[ops:]
        del self._anchors[anchors:]

    def emitted_since(self, state: Any) -> list[ir.Op]:
        return self.graph.ops[state[0]:]

    def add_input(self, t: ir.Tensor) -> None:
        self._inputs.append(t)

    def anchor(self, t: ir.Tensor) -> None:
        """Make the sizes decided by values (`SymSpace.fresh`) that first appear in `t`'s shape readable when
        the model runs, from `t`'s SHAPE."""
        new = {s for d in t.shape if isinstance(d, Sym) for s in d.symbols} & self.space.unbacked
        known = {s for a in self._anchors for d in a.shape if isinstance(d, Sym) for s in d.symbols}
        if new - known:
            self._anchors.append(t)

    def bind(self, symbol: Any, value: ir.Tensor) -> None:
        """Make the size `symbol` (decided by values: a count read with .item() or .tolist()) readable when the
        model runs, from the one-element integer tensor `value` it was read from."""
        self._bound[symbol] = self.reshape(self.cast(value, np.int32), [1])

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
        elif arr.dtype in (np.uint16, np.uint32) and dtype is None:
            arr = arr.astype(np.uint32).view(np.int32)  # computed in int32 (uint32 as its bit pattern)
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
        if shape is None:
            raise TypeError(f"emit({opcode!r}) needs the output's shape or a tensor `like` it")
        if opcode in EMPTY_UNSAFE and any(self.counted(t) for t in inputs):
            return self._emit_padded(opcode, inputs, [(shape, dtype)], options)[0]
        out = self.tensor(shape, dtype)
        self.graph.ops.append(ir.Op(opcode, inputs, [out], options, self.source))
        return out

    def emit_multi(
        self, opcode: str, inputs: Iterable[ir.Tensor | None], outputs: Sequence[tuple[Sequence[int], Any]],
        **options: Any,
    ) -> list[ir.Tensor]:
        inputs = list(inputs)
        if opcode in EMPTY_UNSAFE and any(self.counted(t) for t in inputs):
            return self._emit_padded(opcode, inputs, outputs, options)
        outs = [self.tensor(shape, dtype) for shape, dtype in outputs]
        self.graph.ops.append(ir.Op(opcode, inputs, outs, options, self.source))
        return outs

    # ---- sizes that may be 0 when the model runs ---------------------------------------------------------------
    def counted(self, t: ir.Tensor | None) -> bool:
        """Whether some size of `t` is decided by the program's values (`SymSpace.counts`) and may be 0."""
        return t is not None and bool(self.space.counts) and any(
            isinstance(d, Sym) and d.symbols & self.space.counts for d in t.shape)

    def _counted_axes(self, t: ir.Tensor) -> list[int]:
        return [a for a, d in enumerate(t.shape) if isinstance(d, Sym) and d.symbols & self.space.counts]

    def _grow(self, t: ir.Tensor, axes: Sequence[int], value: float = 0.0) -> ir.Tensor:
        """`t` with one more element of `value` at the end of each of `axes`."""
        if not axes:
            return t
        pads = np.array([[0, 1 if a in axes else 0] for a in range(t.rank)], np.int32)
        shape = [d + 1 if a in axes else d for a, d in enumerate(t.shape)]
        paddings = self.const(pads, name="paddings")
        if value == 0:
            return self.emit("PAD", [t, paddings], shape, t.dtype)
        return self.emit("PADV2", [t, paddings, self.scalar_like(value, t)], shape, t.dtype)

    def _emit_padded(self, opcode: str, inputs: list, outputs: Sequence[tuple[Sequence[Any], Any]],
                     options: dict[str, Any]) -> list[ir.Tensor]:
        """`opcode` on operands that may have no elements when the model runs, for a kernel that fails or
        crashes on them (EMPTY_UNSAFE): each counted size gets one more element, made so that it changes no
        result the op keeps (zeros; -inf where a softmax normalises over it), and the results are sliced back.
        Never empty, the kernel runs the same way for every count."""
        inputs = list(inputs)
        if opcode in ("SOFTMAX", "LOG_SOFTMAX"):
            x = inputs[0]
            axes = self._counted_axes(x)
            inputs[0] = self._grow(x, axes, float("-inf") if x.rank - 1 in axes else 0.0)
        elif opcode == "BATCH_MATMUL":
            inputs = [self._grow(t, self._counted_axes(t)) for t in inputs]
        elif opcode == "UNPACK":
            axis = int(options.get("axis", 0)) % max(inputs[0].rank, 1)
            inputs[0] = self._grow(inputs[0], [a for a in self._counted_axes(inputs[0]) if a != axis])
        else:  # convolutions and resizes over a batch of counted size
            x = inputs[0]
            if self._counted_axes(x) != [0]:
                raise self.fail(f"{opcode} over a spatial or channel size decided by values (a count of true "
                                "elements) has no lowering")
            inputs[0] = self._grow(x, [0])
        wide = [[d + 1 if isinstance(d, Sym) and d.symbols & self.space.counts else d for d in shape]
                for shape, _ in outputs]
        outs = [self.tensor(w, dtype) for w, (_, dtype) in zip(wide, outputs)]
        self.graph.ops.append(ir.Op(opcode, inputs, outs, options, self.source))
        return [o if list(o.shape) == list(shape) else self.slice(o, [0] * len(shape), shape)
                for o, (shape, _) in zip(outs, outputs)]

    # ---- sizes known at run time ----------------------------------------------------------------------------
    def shape_of(self, x: ir.Tensor) -> ir.Tensor:
        """SHAPE of `x` (int32), emitted once per tensor."""
        if id(x) not in self._shape_of:
            self._shape_of[id(x)] = self.emit("SHAPE", [x], (x.rank,), np.int32, out_type="INT32")
        return self._shape_of[id(x)]

    def size_tensor(self, d: Any) -> ir.Tensor:
        """A [1] int32 tensor holding the size `d` (an int or a Sym) when the model runs: the static value as a
        constant, a dynamic one read from the SHAPE of a graph input and computed with integer ops."""
        if not isinstance(d, Sym):
            return self.const(np.array([int(d)], np.int32), name="size")
        return self._size_expr(d.expr)

    def _size_expr(self, expr: Any) -> ir.Tensor:
        import sympy

        if expr in self._sizes:
            return self._sizes[expr]
        if expr.is_Integer:
            return self.const(np.array([int(expr)], np.int32), name="size")
        name = type(expr).__name__
        if expr.is_Symbol and expr in self._bound:
            out = self._bound[expr]
        elif expr.is_Symbol:
            found = next(((t, axis) for t in (*self._inputs, *self._anchors) for axis, d in enumerate(t.shape)
                          if isinstance(d, Sym) and d.expr == expr), None)
            if found is None:
                raise DynamicSizeError(f"the dynamic size {self.space.text(expr)} is no dimension of the model's "
                                       "inputs, so the model cannot read it when it runs")
            t, axis = found
            out = self.emit("SLICE", [self.shape_of(t), self.const(np.array([axis], np.int32), name="begin"),
                                      self.const(np.array([1], np.int32), name="size")], (1,), np.int32)
        else:
            binary = {"Add": "ADD", "Mul": "MUL", "FloorDiv": "FLOOR_DIV", "CleanDiv": "FLOOR_DIV",
                      "PythonMod": "FLOOR_MOD", "Mod": "FLOOR_MOD", "Max": "MAXIMUM", "Min": "MINIMUM"}
            if name not in binary or (isinstance(expr, sympy.Mul) and not all(a.is_Integer or not a.is_number
                                                                                 for a in expr.args)):
                raise DynamicSizeError(f"the size {self.space.text(expr)} cannot be computed at run time here")
            parts = [self._size_expr(a) for a in expr.args]
            out = parts[0]
            for part in parts[1:]:
                opts: dict[str, Any] = {"fused_activation_function": "NONE"} if binary[name] in ("ADD", "MUL") else {}
                out = self.emit(binary[name], [out, part], (1,), np.int32, **opts)
        self._sizes[expr] = out
        return out

    def dims_tensor(self, shape: Sequence[Any]) -> ir.Tensor:
        """A 1-D int32 tensor holding `shape` at run time (a constant when it is static)."""
        shape = dims_of(shape)
        if all_static(shape):
            return self.const(np.array(shape, np.int32), name="shape")
        pieces: list[ir.Tensor] = []
        run: list[int] = []
        for d in shape:
            if isinstance(d, Sym):
                if run:
                    pieces.append(self.const(np.array(run, np.int32), name="dims"))
                    run = []
                pieces.append(self.size_tensor(d))
            else:
                run.append(int(d))
        if run:
            pieces.append(self.const(np.array(run, np.int32), name="dims"))
        return self.emit("CONCATENATION", pieces, (len(shape),), np.int32, axis=0, fused_activation_function="NONE")

    def reshape_operand(self, shape: Sequence[Any]) -> ir.Tensor:
        """RESHAPE's shape operand for `shape`: a constant, with -1 for its one dynamic entry where there is
        one; else the shape computed at run time."""
        shape = dims_of(shape)
        dynamic = [i for i, d in enumerate(shape) if isinstance(d, Sym)]
        if len(dynamic) <= 1:
            return self.const(np.array([-1 if isinstance(d, Sym) else d for d in shape], np.int32), name="shape")
        return self.dims_tensor(shape)

    def slice(self, x: ir.Tensor, begins: Sequence[Any], sizes: Sequence[Any]) -> ir.Tensor:
        """SLICE of `x`; a dynamic size that runs to the end of its axis is written -1, other dynamic begins
        and sizes are computed at run time."""
        begins, sizes = dims_of(begins), dims_of(sizes)
        operand_sizes = [-1 if isinstance(n, Sym) and n == x.shape[a] - begins[a] else n
                         for a, n in enumerate(sizes)]
        return self.emit("SLICE", [x, self.dims_tensor(begins), self.dims_tensor(operand_sizes)], sizes, x.dtype)

    def empty(self, shape: Sequence[int], dtype: Any) -> ir.Tensor:
        """A tensor with no elements made when the model runs (a constant without data has no buffer LiteRT can
        hand out as an output): a SLICE of size 0 from a graph input, reshaped and cast."""
        if not self._inputs:
            raise LoweringError("a result with no elements needs a model input to be made from")
        source = self._inputs[0]
        if source.rank == 0:
            source = self.reshape(source, (1,))
        piece = self.slice(source, [0] * source.rank, [0] * source.rank)
        return self.cast(self.reshape(piece, tuple(shape)), dtype)

    # ---- helpers shared by many lowerings ------------------------------------------------------------------
    def reshape(self, x: ir.Tensor, shape: Sequence[Any]) -> ir.Tensor:
        shape = list(dims_of(shape))
        if list(x.shape) == shape:
            return x
        if x.is_constant:
            return self.const(x.values.reshape(shape), x.dtype, "reshaped")
        if self._value_sized(x, shape):
            kept = self._reshape_on_cpu(x, shape)
            if kept is not None:
                return kept
        if sum(isinstance(d, Sym) for d in shape) > 1:
            # Several dynamic sizes: a unit axis added or removed needs no shape operand at all.
            old = list(x.shape)
            for axis in range(len(shape)):
                if len(shape) == len(old) + 1 and shape[axis] == 1 and shape[:axis] + shape[axis + 1:] == old:
                    return self.emit("EXPAND_DIMS", [x, self.const(np.array(axis, np.int32), name="axis")], shape,
                                     x.dtype)
            for axis in range(len(old)):
                if len(old) == len(shape) + 1 and old[axis] == 1 and old[:axis] + old[axis + 1:] == shape:
                    return self.emit("SQUEEZE", [x], shape, x.dtype, squeeze_dims=[axis])
        if not shape:
            # to a scalar: the option alone (a shape tensor of no elements has no data a file can hold)
            return self.emit("RESHAPE", [x], shape, x.dtype, new_shape=[])
        operand = self.reshape_operand(shape)
        options: dict[str, Any] = {"new_shape": [int(v) for v in operand.values]} if operand.is_constant else {}
        return self.emit("RESHAPE", [x, operand], shape, x.dtype, **options)

    def _value_sized(self, x: ir.Tensor, shape: Sequence[Any]) -> bool:
        """Whether a reshape of `x` to `shape` moves a tensor whose sizes are decided by values as the model runs
        (`SymSpace.fresh`), in a dtype the XNNPACK delegate would take it in."""
        if np.dtype(x.dtype) not in (np.float32, np.int8, np.uint8):
            return False
        return any(isinstance(d, Sym) and d.symbols & self.space.unbacked for d in (*x.shape, *shape))

    def _reshape_on_cpu(self, x: ir.Tensor, shape: Sequence[Any]) -> ir.Tensor | None:
        """RESHAPE with its target computed at run time, so that the XNNPACK delegate leaves it to the built-in
        kernel (it takes only a constant target). XNNPACK's own reshape of a tensor whose sizes change during an
        invocation hands the next partition stale memory now and then (a wrong answer that depends on the heap's
        history); the built-in RESHAPE aliases its input and is as cheap. None where the target cannot be read at
        run time."""
        state = self.checkpoint()
        self.anchor(x)
        try:
            operand = self.dims_tensor(shape)
        except DynamicSizeError:
            self.rollback(state)
            return None
        if operand.is_constant:  # every size static after all: nothing to keep off the delegate
            self.rollback(state)
            return None
        return self.emit("RESHAPE", [x, operand], shape, x.dtype)

    def transpose(self, x: ir.Tensor, perm: Sequence[int]) -> ir.Tensor:
        perm = [int(p) for p in perm]
        if perm == list(range(x.rank)):
            return x
        if x.is_constant:
            out = self.const(np.transpose(x.values, perm), x.dtype, "transposed")
            if perm == [*range(x.rank - 2), x.rank - 1, x.rank - 2]:
                self._folded[id(out)] = (out, x)
            return out
        shape = [x.shape[p] for p in perm]
        return self.emit("TRANSPOSE", [x, self.const(np.array(perm, np.int32), name="perm")], shape, x.dtype)

    def untransposed(self, t: ir.Tensor) -> ir.Tensor | None:
        """The constant whose last two axes `t` swaps, where `t` is such a constant folded by `transpose`: a
        product reads that one with its adjoint flag set, rather than a transposed copy of the weights."""
        folded = self._folded.get(id(t))
        return folded[1] if folded is not None and folded[0] is t else None

    def cast(self, x: ir.Tensor, dtype: Any) -> ir.Tensor:
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        if x.is_constant:
            return self.const(x.values.astype(dtype), dtype)
        return self.emit("CAST", [x], x.shape, dtype)

    def scalar_like(self, value: Any, x: ir.Tensor) -> ir.Tensor:
        """A rank-0 constant of `x`'s dtype: TFLite binary ops need both operands of one element type."""
        return self.const(np.array(value, dtype=x.dtype), x.dtype, "scalar")

    def fail(self, message: str) -> LoweringError:
        return LoweringError(message, target=self.source.target if self.source else None,
                             location=self.source.location if self.source else None)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def narrow_int64(arr: np.ndarray, what: str) -> np.ndarray:
    """int64 data as int32. The int64 extremes, which code uses as sentinels (+-infinity for a min or argmax,
    "to the end" for a slice), become the int32 extremes, keeping that meaning; any other value that does not fit
    is an error (never a silent wrap-around)."""
    if arr.size:
        sentinel = (arr == INT64_MAX) | (arr == INT64_MIN)
        rest = arr[~sentinel]
        if rest.size and (rest.min() < INT32_MIN or rest.max() > INT32_MAX):
            raise LoweringError(f"{what} holds int64 values outside the int32 range the model computes in "
                                f"(min {rest.min()}, max {rest.max()})")
        if sentinel.any():
            arr = np.where(arr == INT64_MAX, INT32_MAX, np.where(arr == INT64_MIN, INT32_MIN, arr))
    return arr.astype(np.int32)


def out_meta(node: Node) -> tuple[tuple[Any, ...], np.dtype]:
    """Shape (ints, and Syms for dynamic sizes) and numpy dtype of a node's (single) result."""
    value = node.value
    return value.shape, numpy_dtype(value.dtype)


def normalize_dim(dim: int, rank: int) -> int:
    return dim + rank if dim < 0 else dim
