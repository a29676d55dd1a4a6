"""Checking a .tflite file before the LiteRT runtime sees it.

The runtime trusts the file: a shape, an index or an option changed by one integer can make a kernel read past
a buffer and take the process down. `verify(data)` runs our reader's structural checks (every index in range,
every constant the size its shape needs), then the file's own: each tensor written once and before it is read,
variable tensors only as state, subgraphs that never run each other in a cycle, IF branches that fit their ops.
Then it checks each op of the kinds this toolkit writes against what its kernel requires (`op_checks`: operand
counts, dtypes, and the output shape the op computes from its input shapes and options). A file that fails raises
ModelFileError naming the subgraph, the op and the problem. Ops of other kinds are listed in the result:
EdgeModel then runs the file once in a child process before loading it (`isolate`), so that a crash there is a
typed ModelLoadError instead of the end of the caller's process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from litert_torch import ir
from litert_torch.errors import ModelFileError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.runtime.op_checks import ARITY, CHECKS, KernelGap, OpProblem, any_dynamic, check_op, dims

__all__ = ["ARITY", "CHECKS", "Verdict", "verify"]


@dataclass
class Verdict:
    model: ir.Model
    unchecked: set[str] = field(default_factory=set)  # op kinds present that have no check here


def verify(data: bytes) -> Verdict:
    model = read_model(data)
    verdict = Verdict(model)
    for g_index, graph in enumerate(model.subgraphs):
        _check_graph(graph, g_index, len(model.subgraphs))
    _check_calls(model)
    for g_index, graph in enumerate(model.subgraphs):
        for i, op in enumerate(graph.ops):
            if op.opcode != "IF" and op.opcode not in CHECKS:
                verdict.unchecked.add(op.opcode)
                continue
            try:
                _check_if(op, model) if op.opcode == "IF" else check_op(op)
            except KernelGap as exc:
                raise ModelFileError(f"LiteRT's CPU kernels do not run this model correctly: subgraph {g_index} op {i} "
                                     f"({op.opcode}): {exc}") from None
            except OpProblem as exc:
                raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} op {i} ({op.opcode}): {exc}") from None
            except (IndexError, KeyError, TypeError, ValueError, ArithmeticError) as exc:
                # a check tripping over values no kernel could take (an axis of a scalar, say): refused the same
                raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} op {i} ({op.opcode}) cannot be "
                                     f"checked: {type(exc).__name__}: {exc}") from None
    return verdict


def _check_graph(graph: ir.Graph, g_index: int, subgraphs: int) -> None:
    """Each tensor written once, by an op before its readers; graph inputs and constants never written.
    Variable tensors are state the runtime keeps and stateful ops update in place: never a graph's input or
    output, nor an op's output (the runtime resets them before a call, and has no memory for one it did not
    plan as state)."""
    for what, tensors in (("input", graph.inputs), ("output", graph.outputs)):
        for t in tensors:
            if t.is_variable:
                raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} {what} {t.name!r} is marked "
                                     "variable (runtime state)")
    defined = {id(t) for t in graph.inputs}
    written = set()
    for t in graph.tensors():
        if t.is_constant or t.is_variable:
            defined.add(id(t))
    for i, op in enumerate(graph.ops):
        for read in op.inputs:
            if read is not None and id(read) not in defined:
                raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} op {i} ({op.opcode}) reads "
                                     f"{read.name!r} before any op writes it")
        for t in op.outputs:
            if id(t) in written or t.is_constant or t.is_variable or any(t is x for x in graph.inputs):
                raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} op {i} ({op.opcode}) writes "
                                     f"{t.name!r}, which is a constant, a variable, an input or written twice")
            written.add(id(t))
            defined.add(id(t))
        for key in _SUBGRAPH_OPTIONS:
            if key in op.options and not 0 <= int(op.options[key]) < subgraphs:
                raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} op {i} ({op.opcode}) names "
                                     f"subgraph {op.options[key]}")
    for t in graph.outputs:
        if id(t) not in defined:
            raise ModelFileError(f"corrupt TFLite model: subgraph {g_index} output {t.name!r} is never written")


_SUBGRAPH_OPTIONS = ("subgraph_index", "then_subgraph_index", "else_subgraph_index", "cond_subgraph_index",
                     "body_subgraph_index", "init_subgraph_index")


def _check_calls(model: ir.Model) -> None:
    """No subgraph runs itself, directly or through others: the runtime would recurse until its stack ends."""
    calls = {g: sorted({int(op.options[k]) for op in graph.ops for k in _SUBGRAPH_OPTIONS if k in op.options})
             for g, graph in enumerate(model.subgraphs)}
    done: set[int] = set()
    for root in calls:  # depth first, without recursion (a file may chain any number of subgraphs)
        if root in done:
            continue
        path, on_path, stack = [root], {root}, [iter(calls[root])]
        while stack:
            callee = next(stack[-1], None)
            if callee is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                stack.pop()
            elif callee in on_path:
                cycle = " -> ".join(str(x) for x in [*path[path.index(callee):], callee])
                raise ModelFileError(f"corrupt TFLite model: subgraphs run each other in a cycle ({cycle})")
            elif callee not in done:
                path.append(callee)
                on_path.add(callee)
                stack.append(iter(calls[callee]))


def _check_if(op: ir.Op, model: ir.Model) -> None:
    """IF: a one-element bool condition, and each branch subgraph taking the op's other inputs and giving its
    outputs, dtype for dtype and shape for shape."""
    condition = op.inputs[0] if op.inputs else None
    if condition is None or condition.dtype != np.bool_ or dims(condition) not in ((), (1,)):
        raise OpProblem("the condition must be a one-element bool tensor")
    if None in op.inputs:
        raise OpProblem("a required input is missing")
    for key in ("then_subgraph_index", "else_subgraph_index"):
        if key not in op.options:
            raise OpProblem(f"no {key}")
        branch = model.subgraphs[int(op.options[key])]
        pairs = (("inputs", op.tensor_inputs()[1:], branch.inputs), ("outputs", op.outputs, branch.outputs))
        for what, ours, theirs in pairs:
            if len(ours) != len(theirs):
                raise OpProblem(f"{len(ours)} {what}, where its {key.split('_')[0]} subgraph has {len(theirs)}")
            for a, b in zip(ours, theirs):
                if a.dtype != b.dtype or (not any_dynamic(a, b) and dims(a) != dims(b)):
                    raise OpProblem(f"{what} {a.dtype} {list(a.shape)}, where its {key.split('_')[0]} subgraph "
                                    f"has {b.dtype} {list(b.shape)}")
