"""Sizes and values: what of a traced program depends on the values its inputs hold, before lowering.

- Sizes decided by values: a result whose size its input's values decide (nonzero, a boolean mask, unique,
  a size read with .item()) is accepted where a lowering computes that size when the model runs
  (`check_value_sizes`); those sizes are counts that may be 0 (`SymSpace.counts`), and later ops read them from
  the results that first hold them (`anchor_results`).
- Checks on values: LiteRT has no assertions, so the model's run-time checks on values (`torch._check`,
  torch.linalg's input checks) are dropped with a warning, and torch.export's own checks of what an op
  guarantees (a count is at least 0 and at most the number of elements counted) silently (`drop_value_checks`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from litert_torch import ir
from litert_torch.errors import ConversionError, LoweringError
from litert_torch.frontend.sources import source_ref
from litert_torch.lower.common.registry import LoweringContext, lowering_for
from litert_torch.symbolic import BOUND_FAILURES, EXHAUSTIVE_POINTS, SymSpace, evaluate

log = logging.getLogger("litert_torch")

VALUE_READS = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)

# Ops whose result has a size its input's values decide, and whose lowering computes that size when the model
# runs (TFLite's WHERE sizes its output by the count of true elements): the first tensor of each such size is
# where later ops read it (`LoweringContext.anchor`).
VALUE_SIZED = {
    torch.ops.aten.nonzero.default: "nonzero count",
    torch.ops.aten.masked_select.default: "masked_select count",
    torch.ops.aten.index.Tensor: "boolean-mask count",
    torch.ops.aten._unique2.default: "unique count",
    torch.ops.aten.unique_consecutive.default: "unique_consecutive count",
}


def check_value_sizes(program: torch.export.ExportedProgram, space: SymSpace) -> None:
    """Raise a LoweringError at the first node whose output size depends on the values of its inputs, unless an
    op of VALUE_SIZED decided that size (boolean masking, nonzero): those sizes are named after their op in
    `space` for messages. Any other size decided by values (a size read with .item()) has no lowering."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    decided: set = set()
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if node.target in VALUE_READS and isinstance(val, torch.SymInt) and val.node.expr in space.ranges \
                and val.node.expr.is_Symbol and free_unbacked_symbols(val):
            # a size read from a tensor's value (.item(), .tolist()): the lowering reads it from that tensor
            decided.add(val.node.expr)
            space.counts.add(val.node.expr)
            space.names[val.node.expr] = f"the value read by {node.name}"
            continue
        if node.op != "call_function" or not (isinstance(val, torch.Tensor) or isinstance(val, (tuple, list))
                                              and any(isinstance(v, torch.Tensor) for v in val)):
            continue
        new = free_unbacked_symbols(val) - decided
        if not new:
            continue
        if node.target in VALUE_SIZED and len(new) == 1:
            (symbol,) = new
            if symbol in space.ranges:
                decided.add(symbol)
                space.counts.add(symbol)
                space.names[symbol] = f"{VALUE_SIZED[node.target]} of {node.name}"
                continue
        if lowering_for(node.target) is not None and new <= space.ranges.keys():
            # a size torch.export could not name in terms of others (a slice to a bound read from a value): the
            # lowering computes it as the op defines it, and later ops read it from the result's shape
            # (`anchor_results`); a lowering that needs it as a number is refused there
            decided |= new
            space.counts |= new
            for symbol in new:
                space.names[symbol] = f"the size of {node.name}"
            continue
        ref = source_ref(node)
        shape = list(val.shape) if isinstance(val, torch.Tensor) else \
            [list(v.shape) for v in val if isinstance(v, torch.Tensor)]
        raise LoweringError(f"the output shape {shape} of node {node.name} depends on the input's values "
                            "(a data-dependent size, as from a size read with .item()); a LiteRT "
                            "model's shapes cannot: compute on the whole tensor instead (torch.where with a mask)",
                            target=ref.target, location=ref.location)


def drop_value_checks(program: torch.export.ExportedProgram) -> None:
    """Remove the model's run-time checks on values (`torch._check(n == k)` of a count read from a tensor, as
    vision-language models check their image tokens against their image features), with the ops that only feed
    them: LiteRT has no assertions. Each is logged with its source line. Checks on input sizes stay (they are
    the signature's own). torch.export's checks of what a value-sized op guarantees are dropped silently."""
    graph, warned = program.graph, set()
    counts = _count_bounds(program)
    for node in list(graph.nodes):
        if (node.target is torch.ops.higher_order.with_effects and len(node.args) > 2
                and node.args[1] is torch.ops.aten._linalg_check_errors.default):
            _drop_effect(graph, node)
            if "linalg" not in warned:
                warned.add("linalg")
                log.warning("torch.linalg's check of its input (singular or not positive-definite, at %s) is not "
                            "in the converted model: such an input gives inf or NaN instead of an error",
                            source_ref(node).location or "unknown source")
            continue
        if node.target is not torch.ops.aten._assert_scalar.default or not node.args:
            continue
        cond = node.args[0]
        if not isinstance(cond, torch.fx.Node) or not _reads_values(cond):
            continue
        location = source_ref(node).location or "unknown source"
        if _op_range_check(cond, counts, program.range_constraints):
            pass  # what the op guarantees (a count of true elements is at least 0 and at most their number)
        elif location not in warned:
            warned.add(location)
            log.warning("the run-time check on tensor values at %s (torch._check) is not in the converted "
                        "model: LiteRT has no assertions", location)
        graph.erase_node(node)
        stack = [cond]
        while stack:
            n = stack.pop()
            if n.op != "call_function" or n.users or n.is_impure():
                continue
            inputs = n.all_input_nodes
            graph.erase_node(n)
            stack.extend(inputs)


def _count_bounds(program: torch.export.ExportedProgram) -> dict[Any, Any]:
    """Each size a VALUE_SIZED op decides (its unbacked symbol) -> the number of elements it counts among (a
    sympy expression over the input sizes); any other size decided by values that first appears as the size of
    an op's result (repeat_interleave's length) -> infinity: at least 0, as every size is. A value read with
    .item() is none of these (it may be negative)."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    bounds: dict[sympy.Symbol, sympy.Expr] = {}
    read: set[sympy.Symbol] = set()
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if node.target in VALUE_READS and isinstance(val, torch.SymInt):
            read |= free_unbacked_symbols(val)
        elif node.op == "call_function" and node.target not in VALUE_SIZED and isinstance(val, torch.Tensor):
            for d in val.shape:
                expr = getattr(getattr(d, "node", None), "expr", None)
                if expr is not None and expr.is_Symbol and expr not in read and expr not in bounds \
                        and free_unbacked_symbols(d):
                    bounds[expr] = sympy.oo
        if node.target not in VALUE_SIZED or val is None:
            continue
        symbols = free_unbacked_symbols(val)
        counted = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
        if node.target is torch.ops.aten.index.Tensor:
            counted = [a for a in counted[1:] if a.meta["val"].dtype == torch.bool]
        if len(symbols) != 1 or not counted:
            continue
        shapes = [tuple(a.meta["val"].shape) for a in counted]
        try:
            full = torch.broadcast_shapes(*shapes) if node.target is torch.ops.aten.masked_select.default \
                else shapes[-1]
        except RuntimeError:  # shapes torch cannot broadcast symbolically (a data-dependent guard): no bound known
            continue
        total = sympy.Integer(1)
        for d in full:
            total = total * (d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(int(d)))
        bounds[next(iter(symbols))] = total
    return bounds


def _op_range_check(cond: torch.fx.Node, counts: dict[Any, Any], ranges: dict[Any, Any]) -> bool:
    """Whether the check `cond` is `u >= 0` or `u <= n` for a count u of n elements (`_count_bounds`): what
    torch.export asserts after nonzero or a boolean mask, not a check of the model's."""
    import sympy

    val = cond.meta.get("val")
    expr = getattr(getattr(val, "node", None), "expr", None)
    if not isinstance(expr, sympy.Rel):
        return False
    if _holds_for_every_count(expr, counts, ranges):
        return True
    low, high = (expr.lhs, expr.rhs) if isinstance(expr, (sympy.LessThan, sympy.StrictLessThan)) else \
        (expr.rhs, expr.lhs)
    if not isinstance(expr, (sympy.LessThan, sympy.GreaterThan)):
        return False
    if low == 0 and high in counts:
        return True
    if low not in counts:
        return False
    if sympy.simplify(high - counts[low]) == 0:
        return True
    # with dynamic input sizes torch.export checks against the most elements the inputs can have
    from torch.utils._sympy.value_ranges import bound_sympy

    try:
        most = bound_sympy(counts[low], ranges).upper
        return bool(high.is_number and most.is_number and high >= most)
    except BOUND_FAILURES:  # a bound sympy cannot compute: not known to be the op's own check
        return False


def _holds_for_every_count(expr: Any, counts: dict[Any, Any], ranges: dict[Any, Any]) -> bool:
    """Whether the relation `expr` over one count (and nothing else) holds at every count from 0 to the most
    elements it counts among (`Min(3, u) <= u`, which torch.export asserts after `topk(min(3, count))`)."""
    import operator as op

    import sympy
    from torch.utils._sympy.value_ranges import bound_sympy

    compare = {sympy.LessThan: op.le, sympy.StrictLessThan: op.lt, sympy.GreaterThan: op.ge,
               sympy.StrictGreaterThan: op.gt, sympy.Eq: op.eq, sympy.Ne: op.ne}.get(type(expr))
    symbols = expr.free_symbols
    if compare is None or len(symbols) != 1 or not symbols <= counts.keys():
        return False
    (u,) = symbols
    try:
        most = bound_sympy(counts[u], ranges).upper
        if not most.is_number or int(most) > EXHAUSTIVE_POINTS:
            return False
        values = {u: np.arange(int(most) + 1, dtype=np.int64)}
        return bool(np.all(compare(evaluate(expr.lhs, values), evaluate(expr.rhs, values))))
    except (ConversionError, TypeError, ValueError):
        return False


def _drop_effect(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Remove a `with_effects` call whose only result is its effect token: what read the token it passed on reads
    the token it was given."""
    token = node.args[0]
    if not isinstance(token, torch.fx.Node):
        raise TypeError(f"{node.name} passes on no effect token")
    for user in list(node.users):
        user.replace_all_uses_with(token)
        graph.erase_node(user)
    graph.erase_node(node)


def _reads_values(node: torch.fx.Node) -> bool:
    """Whether the scalar `node` is computed from a value read out of a tensor (not from sizes alone)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        value = n.meta.get("val")
        if n.target in VALUE_READS or (value is not None and not isinstance(value, torch.Tensor)
                                        and free_unbacked_symbols(value)):
            return True
        if n.target is torch.ops.aten.sym_size.int and getattr(n.args[0], "target", None) in VALUE_SIZED:
            return True  # a count of true elements that torch.export fixed (x[mask] += rows of a given count)
        if not isinstance(value, torch.Tensor):
            stack.extend(n.all_input_nodes)
    return False


def anchor_results(ctx: LoweringContext, result: Any) -> None:
    """Make the sizes decided by values that first appear in a node's results readable by later ops."""
    if not ctx.space.unbacked:
        return
    for t in result if isinstance(result, (list, tuple)) else [result]:
        if isinstance(t, ir.Tensor):
            ctx.anchor(t)
