"""Fuse GELU written out in elementary ops (the tanh form of Hugging Face's `gelu_new`, GPT-2's `gelu`) into
TFLite's GELU builtin with `approximate=True`.

Guarantee afterwards: no value computed as 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) from a float
tensor x, in any operand order, is left as its nine MUL/ADD/TANH ops; a GELU(x, approximate) op computes it.
The runtime's approximate GELU evaluates that same formula, so the numbers do not change beyond rounding. Ops
of the written-out form that something else still reads stay (cleanup drops the rest).

    MUL(x, 0.5) ----------------------------------------------.
    MUL(MUL(x, x), x) -> MUL(0.044715) -> ADD(x) -> MUL(0.797885) -> TANH -> ADD(1) -> MUL -> y
                                                                        x -> GELU(approximate) -> y
"""

from __future__ import annotations

import math

from litert_torch import ir
from litert_torch.passes.cleanup import remove_dead_ops

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _scalar(t: ir.Tensor | None) -> float | None:
    if t is None or t.data is None or t.data.size != 1 or t.dtype.kind != "f":
        return None
    return float(t.data.reshape(-1)[0])


def _close(value: float | None, want: float) -> bool:
    # The constants come from float32 literals (0.044715, sqrt(2 / pi) rounded): a relative 1e-6 takes them and
    # nothing that would be a different function.
    return value is not None and abs(value - want) <= 1e-6 * abs(want)


class _Graph:
    def __init__(self, graph: ir.Graph):
        self.producers = graph.producers()

    def op(self, t: ir.Tensor | None, opcode: str) -> ir.Op | None:
        op = self.producers.get(t) if t is not None else None
        if op is None or op.opcode != opcode or op.options.get("fused_activation_function", "NONE") != "NONE":
            return None
        return op

    def scaled(self, t: ir.Tensor, opcode: str, constant: float) -> ir.Tensor | None:
        """x where t = x (opcode) constant, in either operand order."""
        op = self.op(t, opcode)
        if op is None or len(op.inputs) != 2:
            return None
        a, b = op.tensor_inputs()
        if _close(_scalar(b), constant) and not a.is_constant:
            return a
        if _close(_scalar(a), constant) and not b.is_constant:
            return b
        return None

    def is_cube_of(self, t: ir.Tensor, x: ir.Tensor) -> bool:
        """t = x * x * x (either grouping), x^3 as POW, or SQUARE(x) * x."""
        power = self.op(t, "POW")
        if power is not None:
            return power.inputs[0] is x and _close(_scalar(power.inputs[1]), 3.0)
        op = self.op(t, "MUL")
        if op is None:
            return False
        a, b = op.tensor_inputs()
        for square, other in ((a, b), (b, a)):
            if other is not x:
                continue
            sq = self.op(square, "MUL")
            if sq is not None and sq.inputs[0] is x and sq.inputs[1] is x:
                return True
            sq = self.op(square, "SQUARE")
            if sq is not None and sq.inputs[0] is x:
                return True
        return False

    def inner_argument(self, t: ir.Tensor) -> ir.Tensor | None:
        """x where t = x + 0.044715 * x^3."""
        op = self.op(t, "ADD")
        if op is None:
            return None
        a, b = op.tensor_inputs()
        for x, term in ((a, b), (b, a)):
            cube = self.scaled(term, "MUL", CUBIC)
            if cube is not None and self.is_cube_of(cube, x):
                return x
        return None

    def gelu_argument(self, y: ir.Op) -> ir.Tensor | None:
        """x when `y` (a MUL) computes 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        a, b = y.tensor_inputs()
        for half, one_plus in ((a, b), (b, a)):
            x = self.scaled(half, "MUL", 0.5)
            tanh_out = self.scaled(one_plus, "ADD", 1.0)
            tanh = self.op(tanh_out, "TANH")
            if x is None or tanh is None:
                continue
            inner = self.scaled(tanh.input(0), "MUL", SQRT_2_OVER_PI)
            if inner is not None and self.inner_argument(inner) is x:
                return x
        return None


def run(graph: ir.Graph) -> bool:
    view = _Graph(graph)
    changed = False
    for i, op in enumerate(graph.ops):
        if op.opcode != "MUL" or len(op.inputs) != 2 or op.options.get("fused_activation_function", "NONE") != "NONE":
            continue
        out = op.outputs[0]
        if out.dtype.kind != "f" or any(t is None for t in op.inputs):
            continue
        x = view.gelu_argument(op)
        if x is None or x.shape != out.shape or x.dtype != out.dtype or x.quantization is not None:
            continue
        graph.ops[i] = view.producers[out] = ir.Op("GELU", [x], [out], {"approximate": True}, op.source,
                                                   op.value_node)
        changed = True
    if changed:
        remove_dead_ops(graph)
    return changed
