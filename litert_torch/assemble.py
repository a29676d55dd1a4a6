"""Signatures' subgraphs -> one IR model with its metadata (source map, delegate plans, I/O), for every front end
(torch.export, ONNX, the direct LLM builder). Nothing here needs PyTorch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from litert_torch import ir, metadata
from litert_torch.delegates.plan import PLAN_KEY, plan_for, plans_json, with_before
from litert_torch.passes import cleanup, delegate_rewrites, run_pipeline


@dataclass
class Part:
    """One signature's subgraph with its plan and I/O metadata."""

    key: str
    graph: ir.Graph
    input_names: list[str]
    output_names: list[str]
    io: dict[str, Any]
    plan: Any


def finish_part(graph: ir.Graph, key: str, input_names: list[str], output_names: list[str], io: dict[str, Any],
                targets: tuple[str, ...], before_plan: Callable[[ir.Graph], None] | None = None) -> Part:
    """The ending every front end gives a signature's lowered graph: the pass pipeline, then `before_plan` (a
    front end's own rewrites of the optimised graph, such as its I/O casts), then the delegate-aware rewrites
    for `targets` and the delegate plan; returned as the Part `assemble` takes, with `io` as its I/O metadata
    (`metadata.io_json`'s entry for the signature)."""
    run_pipeline(graph)
    if before_plan is not None:
        before_plan(graph)
    plan = delegate_aware(graph, targets)
    return Part(key, graph, input_names, output_names, io, plan)


def assemble(parts: list[Part], bucket_info: dict | None = None) -> ir.Model:
    """One model: a subgraph and a SignatureDef per part (identical constants stored once), the source map,
    the delegate plans and the I/O metadata."""
    for i, part in enumerate(parts):
        part.graph.name = part.key if len(parts) > 1 else part.graph.name
    model = ir.Model([p.graph for p in parts],
                     [ir.Signature(p.key, i, p.input_names, p.output_names) for i, p in enumerate(parts)])
    model.metadata[metadata.SOURCE_MAP_KEY] = metadata.source_map_json(model)
    model.metadata[PLAN_KEY] = plans_json(parts[0].plan, {p.key: p.plan for p in parts}
                                          if len(parts) > 1 else None, bucket_info)
    model.metadata[metadata.IO_KEY] = metadata.io_json({p.key: p.io for p in parts})
    return model


def delegate_aware(graph: ir.Graph, targets: tuple[str, ...]):
    """Run the delegate-aware rewrites serving `targets` and return the delegate plan, with the residency
    before the rewrites for each target they changed."""
    before = plan_for(graph, targets)
    done = delegate_rewrites.run(graph, targets)
    if not done:
        return before
    cleanup.run(graph)
    per_target = {t: {name: n for name, n in done.items()
                      if t in next(r for r in delegate_rewrites.REWRITES if r.name == name).targets}
                  for t in targets}
    return with_before(plan_for(graph, targets), before, per_target)
