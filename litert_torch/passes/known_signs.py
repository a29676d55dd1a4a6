"""Sign fixes that cannot change a value, dropped where the value they fix is known not to be negative.

Lowerings handle every sign their inputs may have: an index wraps when negative (PyTorch counts it from the
end), and top-k turns floats into integer order keys, first making -0.0 into 0.0 and flipping the magnitude
bits of negative values. Where the input comes out of an op whose values are never negative (the indices of a
top-k, the probabilities of a softmax), those ops compute their input unchanged. A mixture-of-experts router
has both, once per layer and token:

    TOPK_V2 -> [1] -> i -> LESS(i, 0), ADD(i, n) -> SELECT_V2 -> GATHER       TOPK_V2 -> [1] -> i -> GATHER
    SOFTMAX -> p -> EQUAL(p, 0) -> SELECT_V2(., 0, p) -> BITCAST -> ...        SOFTMAX -> p -> BITCAST -> ...
    BITCAST -> b -> LESS(b, 0), XOR(b, 0x7FFFFFFF) -> SELECT_V2 -> k -> NaN select    BITCAST -> b -> NaN select

The last holds for NaN too only because every reader of the keys replaces NaN's key by its own (a NaN's sign bit
may be set, and then its bits are a negative integer), so it is made only where every reader does.
"""

from __future__ import annotations

import numpy as np

from litert_torch import ir

# Ops whose float outputs are never negative and never -0.0 (NaN in, NaN out, of either sign).
_NONNEGATIVE_FLOAT = {"SOFTMAX", "LOGISTIC", "EXP"}
# Ops whose int outputs are indices into an axis, never negative: (opcode, output position).
_INDEX_OUTPUTS = {("TOPK_V2", 1), ("ARG_MAX", 0), ("ARG_MIN", 0)}
# Ops whose output holds only values of their first input.
_MOVES = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "SLICE", "STRIDED_SLICE", "GATHER", "GATHER_ND",
          "BROADCAST_TO", "TILE", "REVERSE_V2"}


def _const_all(t: ir.Tensor | None, value: int | float) -> bool:
    return t is not None and t.data is not None and t.quantization is None and t.data.size > 0 \
        and bool(np.all(t.data == value)) and (value != 0 or not np.any(np.signbit(t.data)))


class _Facts:
    def __init__(self, graph: ir.Graph):
        self.producers = graph.producers()
        self._memo: dict[int, bool] = {}

    def nonnegative(self, t: ir.Tensor, want_float: bool) -> bool:
        """`t` holds no negative value (nor -0.0, nor, unless NaN, a set sign bit): the output of an op that
        makes none, moved about by ops that only rearrange it, or a constant."""
        key = id(t)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a cycle (none in a graph) proves nothing
        dtype = np.dtype(t.dtype)
        result = False
        if t.quantization is None and (dtype == np.float32 if want_float else dtype in (np.int32, np.int64)):
            if t.data is not None:
                result = bool(t.data.size == 0 or not np.any(np.signbit(t.data)))
            else:
                op = self.producers.get(t)
                if op is not None:
                    position = op.outputs.index(t)
                    if want_float:
                        result = op.opcode in _NONNEGATIVE_FLOAT and position == 0
                    else:
                        result = (op.opcode, position) in _INDEX_OUTPUTS
                    if not result and op.opcode in _MOVES and position == 0:
                        result = self.nonnegative(op.input(0), want_float)
                    if not result and op.opcode == "CONCATENATION":
                        result = all(self.nonnegative(x, want_float) for x in op.tensor_inputs())
                    if not result and op.opcode == "SELECT_V2" and len(op.inputs) == 3:
                        result = all(self.nonnegative(x, want_float) for x in op.tensor_inputs()[1:])
        self._memo[key] = result
        return result


def _produced(facts: _Facts, t: ir.Tensor | None, opcode: str) -> ir.Op | None:
    op = facts.producers.get(t) if t is not None else None
    return op if op is not None and op.opcode == opcode and op.options.get(
        "fused_activation_function", "NONE") == "NONE" else None


def _unchanged_input(facts: _Facts, op: ir.Op, readers: dict) -> ir.Tensor | None:
    """What the SELECT_V2 `op` returns unchanged, when its fix cannot apply; else None."""
    if len(op.inputs) != 3:
        return None
    cond, when_true, when_false = op.tensor_inputs()
    test = facts.producers.get(cond)
    if test is None or len(test.inputs) != 2 or test.inputs[0] is not when_false:
        return None
    x = when_false
    if test.opcode == "LESS" and _const_all(test.inputs[1], 0):
        # an index wrap: x < 0 ? x + n : x
        add = _produced(facts, when_true, "ADD")
        if add is not None and x in add.inputs and facts.nonnegative(x, want_float=False):
            return x
        # the order key of a float's bits: b < 0 ? b ^ 0x7FFFFFFF : b, read only where NaN's key replaces it
        xor = _produced(facts, when_true, "BITWISE_XOR")
        cast = _produced(facts, x, "BITCAST")
        if (xor is not None and xor.inputs[0] is x
                and _const_all(xor.inputs[1], 0x7FFFFFFF) and cast is not None
                and facts.nonnegative(cast.input(0), want_float=True)
                and _nan_replaced_by_every_reader(facts, op.outputs[0], cast.input(0), readers)):
            return x
    if test.opcode == "EQUAL" and _const_all(test.inputs[1], 0.0) and _const_all(when_true, 0.0) \
            and facts.nonnegative(x, want_float=True):
        return x  # -0.0 made 0.0, where there is none
    return None


def _nan_replaced_by_every_reader(facts: _Facts, keys: ir.Tensor, f: ir.Tensor, readers: dict) -> bool:
    """Every reader of `keys` is SELECT_V2(NOT_EQUAL(g, g), constant, keys) with g the float `f` the keys are made
    of (or the same values: a -0.0 fix of it)."""
    uses = readers.get(keys, [])
    if not uses:
        return False
    for use in uses:
        if use.opcode != "SELECT_V2" or len(use.inputs) != 3 or use.inputs[2] is not keys \
                or use.inputs[0] is keys or use.inputs[1] is keys or not use.input(1).is_constant:
            return False
        nan = _produced(facts, use.inputs[0], "NOT_EQUAL")
        if nan is None or nan.inputs[0] is not nan.inputs[1] or not _same_values(facts, nan.input(0), f):
            return False
    return True


def _same_values(facts: _Facts, g: ir.Tensor, f: ir.Tensor) -> bool:
    """`g` is `f`, or a -0.0 fix of `f` (which NOT_EQUAL(g, g) cannot tell from it), either way."""
    for a, b in ((g, f), (f, g)):
        if a is b:
            return True
        fix = _produced(facts, a, "SELECT_V2")
        if fix is not None and fix.inputs[2] is b and _const_all(fix.inputs[1], 0.0):
            test = _produced(facts, fix.inputs[0], "EQUAL")
            if test is not None and test.inputs[0] is b:
                return True
    return False


def run(graph: ir.Graph) -> bool:
    facts = _Facts(graph)
    readers = graph.consumers()
    outputs = set(graph.outputs)
    subst: dict[ir.Tensor, ir.Tensor] = {}
    for op in graph.ops:
        if op.opcode != "SELECT_V2" or op.outputs[0] in outputs:
            continue
        kept = _unchanged_input(facts, op, readers)
        if kept is not None and kept.shape == op.outputs[0].shape and kept.dtype == op.outputs[0].dtype:
            subst[op.outputs[0]] = kept
    if not subst:
        return False

    def resolve(t: ir.Tensor | None) -> ir.Tensor | None:
        while t in subst:
            t = subst[t]
        return t

    for op in graph.ops:
        op.inputs = [resolve(t) if t is not None else None for t in op.inputs]
    return True
