"""Shared machinery of the rule tables: a rule is a function (op) -> None (supported) or a short reason."""

from __future__ import annotations

from typing import Callable

import numpy as np

from litert_torch import ir

Rule = Callable[[ir.Op], "str | None"]

FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16))


def tensors_of(op: ir.Op) -> list[ir.Tensor]:
    return [t for t in (*op.inputs, *op.outputs) if t is not None]


def activations_of(op: ir.Op) -> list[ir.Tensor]:
    """The non-constant tensors an op reads and writes."""
    return [t for t in tensors_of(op) if not t.is_constant]


def max_rank(limit: int) -> Rule:
    def rule(op: ir.Op) -> str | None:
        worst = max((t.rank for t in activations_of(op)), default=0)
        return f"a rank-{worst} tensor (at most rank {limit})" if worst > limit else None
    return rule


def fused_activation_in(allowed: set[str]) -> Rule:
    def rule(op: ir.Op) -> str | None:
        act = op.options.get("fused_activation_function", "NONE")
        return f"fused activation {act}" if act not in allowed else None
    return rule


def constant_input(index: int, what: str) -> Rule:
    def rule(op: ir.Op) -> str | None:
        t = op.inputs[index] if index < len(op.inputs) else None
        return f"{what} computed at run time (must be a constant)" if t is not None and not t.is_constant else None
    return rule


def all_of(*rules: Rule) -> Rule:
    def rule(op: ir.Op) -> str | None:
        for r in rules:
            reason = r(op)
            if reason:
                return reason
        return None
    return rule


def supported(op: ir.Op) -> str | None:
    return None


def check(table: dict[str, Rule], general: list[Rule], op: ir.Op, target: str) -> str | None:
    """None when `target` takes `op`, else the reason it does not."""
    rule = table.get(op.opcode)
    if rule is None:
        return f"{op.opcode} is not supported by the {target} delegate"
    for g in general:
        reason = g(op)
        if reason:
            return reason
    return rule(op)
