"""The ONNX op registry: one `OnnxOp` per ONNX op type, holding everything the driver knows of it — its lowering
`fn(ctx, node, inputs, attrs)`, which constant inputs reach the lowering as parameters (and which of those it
also takes computed at run time), how it treats unsigned values, its shape rule over dynamic sizes
(`shapes.py`), its lowering when shape parameters are computed at run time (`dynamic.py`), and its evaluation on
constants where onnx's reference evaluator is unreliable. Each fact is given where the op is registered
(`@onnx_op(...)`, `@shape_rule(...)` in shapes.py, `@runtime_shaped(...)` in dynamic.py), and a fact given twice
for one op is refused, as the ATen registry refuses a second lowering.

A lowering's docstring (or the `doc` given with it) starts with a line naming the ops it lowers and the ONNX opsets
whose version of each it implements, "Relu (opsets 13-28).": from 13, the oldest opset the driver reads (older
models are upgraded to it), or the op's first version if later, to the newest opset of the onnx package
(`stated_opsets`; docs/COVERAGE.md shows it). "ArgMax, ArgMin (opsets 13-28)." names ops of one range,
"Cast (opsets 13-28); CastLike (opsets 15-28)." ops of different ones."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal

import numpy as np

from litert_torch import ir
from litert_torch.lower.common.registry import LoweringContext, LoweringFn, lowering_for
from litert_torch.node import Node
from litert_torch.symbolic import Sym

OnnxFn = Callable[[LoweringContext, Any, list, dict], Any]


@dataclass
class OnnxOp:
    """Everything about one ONNX op type."""

    name: str
    # the lowering, or None for ops only evaluated at conversion time (`fold_only`)
    lower: OnnxFn | None = None
    doc: str | None = None  # its docstring when the lowering's own does not say it (a lowering made in a loop)
    fold_only: bool = False
    # Constant inputs that are parameters in disguise (shapes, axes, bounds): they reach the lowering as numpy
    # arrays; every other constant input is data and becomes a constant tensor.
    parameters: frozenset[int] = frozenset()
    # Parameter inputs the lowering also takes when they are computed at run time (any other parameter input
    # must be a constant: the driver refuses the node otherwise).
    runtime_parameters: frozenset[int] = frozenset()
    same_shape: bool = False  # its output has its first input's shape and type (shape inference's fallback)
    # uint16 is computed in int32: True where the op cannot leave the uint16 range (else its result is wrapped
    # back into it). uint32 is held as its int32 bit pattern: "bits" where the op reads the pattern as uint32
    # (addition, multiplication, equality, data movement), "ordered" where it compares the patterns with the top
    # bit flipped; None refuses uint32 values.
    uint16_in_range: bool = False
    uint32: Literal["bits", "ordered"] | None = None
    shape_rule: Callable | None = None  # output shapes over symbolic sizes (shapes.py)
    size_fold: Callable | None = None  # evaluation on sizes known only at run time (shapes.py)
    runtime_shaped: Any = None  # dynamic.RuntimeShaped: the lowering when shape parameters come at run time
    constant_fold: Callable | None = None  # evaluation on constants, instead of onnx's reference evaluator


OPS: dict[str, OnnxOp] = {}


def op_entry(name: str) -> OnnxOp:
    """The registration of ONNX op `name`, made empty on first use."""
    entry = OPS.get(name)
    if entry is None:
        entry = OPS[name] = OnnxOp(name)
    return entry


def set_fact(name: str, fact: str, value: Any, by: str) -> None:
    """Give op `name` its `fact` (a field of OnnxOp); a fact given twice is a bug in the registrations."""
    entry = op_entry(name)
    if getattr(entry, fact) not in (None, False, frozenset()):
        raise RuntimeError(f"onnx::{name} already has its {fact} ({getattr(entry, fact)!r}); {by} gives it again")
    setattr(entry, fact, value)


def onnx_op(*names: str, doc: str | None = None, parameters: Iterable[int] = (),
            runtime_parameters: Iterable[int] = (), same_shape: bool = False, uint16_in_range: bool = False,
            uint32: Literal["bits", "ordered"] | None = None, constant_fold: Callable | None = None
            ) -> Callable[[OnnxFn], OnnxFn]:
    """Register `fn` as the lowering of each ONNX op in `names`, with the facts about them (OnnxOp's fields)."""

    def register(fn: OnnxFn) -> OnnxFn:
        by = getattr(fn, "__qualname__", repr(fn))
        for name in names:
            set_fact(name, "lower", fn, by)
            facts = {"doc": doc, "parameters": frozenset(parameters),
                     "runtime_parameters": frozenset(runtime_parameters), "same_shape": same_shape,
                     "uint16_in_range": uint16_in_range, "uint32": uint32, "constant_fold": constant_fold}
            for fact, value in facts.items():
                if value not in (None, False, frozenset()):
                    set_fact(name, fact, value, by)
        return fn

    return register


def fold_only(*names: str) -> None:
    """Ops evaluated at conversion time when every input is a constant, with no run-time lowering."""
    for name in names:
        set_fact(name, "fold_only", True, "fold_only")


def lowered_ops() -> dict[str, OnnxFn]:
    """The ops with a run-time lowering, by name."""
    return {name: entry.lower for name, entry in OPS.items() if entry.lower is not None}


def known(name: str) -> bool:
    """Whether the driver can take op `name`: lowered, or evaluated at conversion time."""
    entry = OPS.get(name)
    return entry is not None and (entry.lower is not None or entry.fold_only)


def facts(name: str) -> OnnxOp:
    """The registration of `name`, or an empty one for an op never registered."""
    return OPS.get(name) or OnnxOp(name)


fold_only("Constant", "ConstantOfShape", "Shape", "Size", "Range")


# "Relu (opsets 13-28)": the ops of one opset range and the range, in a lowering's first line
OPSETS_GROUP = re.compile(r"((?:[A-Za-z0-9]+, )*[A-Za-z0-9]+) \((opsets? [^)]*)\)")


def docstring(op: OnnxOp) -> str:
    """The text documenting the lowering of `op`: its `doc`, else the lowering's docstring."""
    return inspect.cleandoc(op.doc) if op.doc else (inspect.getdoc(op.lower) or "")


def stated_opsets(op: OnnxOp) -> str | None:
    """The opsets whose version of `op` its lowering implements, as the first line of its docstring states them
    for this op: "opsets 13-28" from "Relu (opsets 13-28).", "opset 9, deprecated since opset 10" from
    Upsample's; None where the line does not name the op."""
    first = docstring(op).split("\n", 1)[0]
    for group in OPSETS_GROUP.finditer(first):
        if op.name in group.group(1).split(", "):
            return group.group(2)
    return None


def tensor(ctx: LoweringContext, value: Any) -> ir.Tensor | None:
    """An input as a tensor: a constant one for a numpy array (a parameter input given as data), None for none."""
    if value is None or isinstance(value, ir.Tensor):
        return value
    return ctx.const(np.asarray(value))


def operand(ctx: LoweringContext, value: Any) -> ir.Tensor:
    """An input the op reads, as `tensor` gives it; an omitted one (an empty input name) fails the node."""
    t = tensor(ctx, value)
    if t is None:
        raise ctx.fail("an input the op reads is omitted (an empty input name)")
    return t


def aten_fn(target) -> LoweringFn:
    """The ATen lowering of `target`, which most ONNX lowerings call."""
    found = lowering_for(target)
    if found is None:
        raise KeyError(f"no ATen lowering registered for {target}")
    return found.fn


def sub(node: Node, shape, dtype=np.float32) -> Node:
    """`node` with one result of `shape` (for the intermediate steps of one ONNX node)."""
    return node.with_value(shape, dtype)


def out_shape(node: Node) -> tuple[int, ...]:
    return tuple(node.output(0).shape)


def const_list(value, what: str, ctx) -> list:
    if isinstance(value, ir.Tensor):
        if not value.is_constant:
            raise ctx.fail(f"{what} computed at run time has no lowering (it must be a constant)")
        value = value.data
    arr = np.asarray(value)
    if arr.dtype == object:  # sizes known only at run time (Syms) among ints
        return [v if isinstance(v, Sym) else int(v) for v in arr.reshape(-1)]
    return [int(v) if np.issubdtype(arr.dtype, np.integer) else float(v) for v in arr.reshape(-1)]


def scalar(value, ctx, what: str) -> int | float | Sym:
    values = const_list(value, what, ctx)
    if len(values) != 1:
        raise ctx.fail(f"{what} must be a single value")
    return values[0]
