"""The delegate plan: for each target (cpu = XNNPACK, gpu, npu), which ops the delegate takes and why not the
others, the partitions (the delegated op subsets LiteRT would form), and the share of ops and of multiply-
accumulates that would run on it. Stored as `litert_torch.delegate_plan` (JSON, docs/DELEGATES.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from litert_torch import ir, metadata
from litert_torch.delegates import cpu, gpu, npu
from litert_torch.errors import InvalidArgumentError
from litert_torch.symbolic import estimate

PLAN_KEY = "litert_torch.delegate_plan"
FORMAT_VERSION = 1
CHECKS: dict[str, tuple[str, Callable[[ir.Op], "str | None"]]] = {
    "cpu": (cpu.DELEGATE, cpu.check_op),
    "gpu": (gpu.DELEGATE, gpu.check_op),
    "npu": (npu.DELEGATE, npu.check_op),
}
TARGETS = tuple(CHECKS)
# Targets whose delegate takes only its first N largest partitions (TFLite's GraphPartitionHelper); the others
# take every partition.
PARTITION_LIMITS: dict[str, int] = {"gpu": gpu.MAX_PARTITIONS}


def macs(op: ir.Op) -> int:
    """Multiply-accumulates of one op (element count for ops that do no multiply-accumulate work); dynamic
    sizes count at the top of their range."""
    return estimate(_macs(op))


def _macs(op: ir.Op) -> Any:
    out = op.outputs[0] if op.outputs else None
    out_size = out.size if out is not None else 0
    if op.opcode == "CONV_2D":
        _, kh, kw, cin = op.input(1).shape
        return out_size * kh * kw * cin
    if op.opcode == "DEPTHWISE_CONV_2D":
        return out_size * op.input(1).shape[1] * op.input(1).shape[2]
    if op.opcode == "FULLY_CONNECTED":
        return out_size * op.input(1).shape[-1]
    if op.opcode == "BATCH_MATMUL":
        a = op.input(0)
        return out_size * (a.shape[-2] if op.options.get("adj_x") else a.shape[-1])
    if op.opcode == "TRANSPOSE_CONV":
        cout, kh, kw, _ = op.input(1).shape
        return op.input(2).size * kh * kw * cout
    if op.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        hidden, n_in = op.input(1).shape
        return out_size // hidden * 4 * hidden * (n_in + hidden) if hidden else 0
    return out_size


@dataclass
class Fallback:
    op: int
    opcode: str
    reason: str
    node: str | None = None
    location: str | None = None


@dataclass
class TargetPlan:
    target: str
    delegate: str
    ops: int
    delegated_ops: int
    macs: int
    delegated_macs: int
    partitions: list[list[int]] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)
    # Set when delegate-aware rewrites changed the graph for this target: the residency of the graph before
    # them (ops, delegated_ops, macs, delegated_macs, partition_count) and {rewrite name: sites rewritten}.
    before: dict[str, int] | None = None
    rewrites: dict[str, int] = field(default_factory=dict)

    @property
    def op_share(self) -> float:
        return self.delegated_ops / self.ops if self.ops else 1.0

    @property
    def mac_share(self) -> float:
        return self.delegated_macs / self.macs if self.macs else 1.0

    @property
    def fully_delegated(self) -> bool:
        return not self.fallbacks and len(self.partitions) <= 1

    def residency(self) -> dict[str, int]:
        return {"ops": self.ops, "delegated_ops": self.delegated_ops, "macs": self.macs,
                "delegated_macs": self.delegated_macs, "partition_count": len(self.partitions)}

    def summary(self) -> str:
        text = (f"{self.target} ({self.delegate}): {self.delegated_ops}/{self.ops} ops ({self.op_share:.0%}), "
                f"{self.mac_share:.1%} of MACs, {len(self.partitions)} partition"
                f"{'s' if len(self.partitions) != 1 else ''}")
        if self.before is not None:
            b = self.before
            share = b["delegated_macs"] / b["macs"] if b["macs"] else 1.0
            done = ", ".join(f"{name} x{n}" for name, n in self.rewrites.items())
            text += (f" (before delegate-aware lowering: {b['delegated_ops']}/{b['ops']} ops, {share:.1%} of MACs, "
                     f"{b['partition_count']} partition{'s' if b['partition_count'] != 1 else ''}; {done})")
        if self.fallbacks:
            reasons: dict[str, int] = {}
            for f in self.fallbacks:
                reasons[f"{f.opcode}: {f.reason}"] = reasons.get(f"{f.opcode}: {f.reason}", 0) + 1
            top = "; ".join(f"{r} (x{n})" if n > 1 else r for r, n in list(reasons.items())[:4])
            text += f"; on CPU: {top}" + (" ..." if len(reasons) > 4 else "")
        return text


@dataclass
class DelegatePlan:
    targets: dict[str, TargetPlan]

    def to_json(self) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "targets": {
            name: {**{k: v for k, v in asdict(p).items()
                      if k not in ("partitions", "fallbacks") and not (k == "before" and v is None)},
                   "partition_count": len(p.partitions), "partitions": p.partitions,
                   "fallbacks": [asdict(f) for f in p.fallbacks]}
            for name, p in self.targets.items()}}

    def to_bytes(self) -> bytes:
        return metadata.encode(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "DelegatePlan":
        targets = {}
        for name, p in data.get("targets", {}).items():
            targets[name] = TargetPlan(name, p["delegate"], p["ops"], p["delegated_ops"], p["macs"],
                                       p["delegated_macs"], [list(x) for x in p.get("partitions", [])],
                                       [Fallback(**f) for f in p.get("fallbacks", [])], p.get("before"),
                                       dict(p.get("rewrites", {})))
        return cls(targets)

    def render(self) -> str:
        return "\n".join(p.summary() for p in self.targets.values())


def _partitions(graph: ir.Graph, delegated: list[bool]) -> list[list[int]]:
    """The delegated partitions as LiteRT forms them: subsets of ops of one kind (delegated or not), each grown
    greedily in execution order from the ops whose inputs are ready, the kinds taking turns. Two delegated
    regions joined only through a fallback op stay two partitions, since the fallback runs between them."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.outputs}
    needs = [{producer[t] for t in op.inputs if t is not None and t in producer} for op in graph.ops]
    done = [False] * len(graph.ops)
    left = len(graph.ops)
    partitions: list[list[int]] = []
    while left:
        kind, subset, grew = None, [], True
        while grew:
            grew = False
            for i in range(len(graph.ops)):
                if done[i] or any(not done[j] for j in needs[i]):
                    continue
                if kind is None:
                    kind = delegated[i]
                if delegated[i] == kind:
                    done[i], grew = True, True
                    subset.append(i)
                    left -= 1
        if kind:
            partitions.append(subset)
    return partitions


def taken_partitions(partitions: list[list[int]], limit: int | None) -> list[list[int]]:
    """The partitions a delegate that takes at most `limit` of them keeps: the largest by op count (between equal
    sizes the earlier one), returned in execution order."""
    if limit is None or len(partitions) <= limit:
        return partitions
    ranked = sorted(range(len(partitions)), key=lambda k: -len(partitions[k]))  # stable: ties keep their order
    return [partitions[k] for k in sorted(ranked[:limit])]


def _with_static_weights(graph: ir.Graph) -> list[ir.Op]:
    """The ops as the delegates see them: a DEQUANTIZE of a constant (float16 or int8 weights) is folded at
    load time, so its output counts as a constant for the op reading it."""
    static = {op.outputs[0]: op.inputs[0] for op in graph.ops
              if op.opcode == "DEQUANTIZE" and op.inputs[0] is not None and op.input(0).is_constant}
    if not static:
        return graph.ops
    seen = []
    for op in graph.ops:
        if any(t in static for t in op.inputs if t is not None):
            inputs = [ir.Tensor(t.name, t.shape, t.dtype, static[t].data, quantization=t.quantization)
                      if t in static else t for t in op.inputs]
            op = replace(op, inputs=inputs)
        seen.append(op)
    return seen


def plan_target(graph: ir.Graph, target: str) -> TargetPlan:
    delegate, check_op = CHECKS[target]
    reasons = [check_op(op) for op in _with_static_weights(graph)]
    partitions = _partitions(graph, [r is None for r in reasons])
    kept = taken_partitions(partitions, PARTITION_LIMITS.get(target))
    if kept is not partitions:
        largest = max(len(p) for p in kept)
        for p in partitions:
            if p not in kept:
                for i in p:
                    reasons[i] = (f"outside the {delegate} delegate's partition: it takes only its largest "
                                  f"({largest} ops), and this op's has {len(p)}")
        partitions = kept
    delegated = [r is None for r in reasons]
    op_macs = [macs(op) for op in graph.ops]
    fallbacks = [Fallback(i, op.opcode, reason, op.source.node if op.source else None,
                          op.source.location if op.source else None)
                 for i, (op, reason) in enumerate(zip(graph.ops, reasons)) if reason is not None]
    return TargetPlan(target, delegate, len(graph.ops), sum(delegated), sum(op_macs),
                      sum(m for m, d in zip(op_macs, delegated) if d), partitions, fallbacks)


def check_targets(targets: tuple[str, ...]) -> None:
    unknown = [t for t in targets if t not in CHECKS]
    if unknown:
        raise InvalidArgumentError(f"unknown target(s) {unknown}; choose from {list(CHECKS)}")


def plan_for(graph: ir.Graph, targets: tuple[str, ...] = TARGETS) -> DelegatePlan:
    check_targets(targets)
    return DelegatePlan({t: plan_target(graph, t) for t in targets})


def with_before(after: DelegatePlan, before: DelegatePlan, rewrites: dict[str, dict[str, int]]) -> DelegatePlan:
    """`after`, with each target's residency before the delegate-aware rewrites that fired for it."""
    for name, plan in after.targets.items():
        done = rewrites.get(name)
        if done:
            plan.before = before.targets[name].residency()
            plan.rewrites = dict(done)
    return after


def plans_json(default: DelegatePlan, per_signature: dict[str, DelegatePlan] | None = None,
               buckets: dict | None = None) -> bytes:
    """The metadata entry: the default signature's plan at the top level and, for a model with several
    signatures, every signature's targets under "signatures"; for bucketed signatures, "buckets" names the
    dimension, its sizes and their signatures (each static, as NPUs want)."""
    data = default.to_json()
    if per_signature:
        data["signatures"] = {key: plan.to_json()["targets"] for key, plan in per_signature.items()}
    if buckets:
        data["buckets"] = buckets
    return metadata.encode(data)
