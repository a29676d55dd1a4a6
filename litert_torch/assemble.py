"""The end of every conversion, for every front end (torch.export, ONNX, the LLM builders): each signature's
lowered graph finished by `finish_signature` (channel-last I/O, the pass pipeline, the signature's own edge
rewrites, the delegate-aware rewrites and the delegate plan), and the finished signatures assembled into one IR
model with its metadata (source map, delegate plans, I/O) by `assemble`. Nothing here needs PyTorch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from litert_torch import ir, metadata
from litert_torch.delegates.plan import PLAN_KEY, DelegatePlan, plan_for, plans_json, with_before
from litert_torch.passes import channel_last_io as channel_last_io_pass
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


def finish_signature(key: str, graph: ir.Graph, input_names: list[str], output_names: list[str], io: dict[str, Any],
                     targets: tuple[str, ...], *, channel_last_io: bool = False,
                     after_passes: Callable[[ir.Graph], None] | None = None) -> Part:
    """One signature's lowered graph, finished: its rank-4 inputs and outputs made NHWC when `channel_last_io`
    (named in the I/O entry's `channel_last_inputs` / `channel_last_outputs`), the pass pipeline, then
    `after_passes` (the signature's own rewrites of the optimised graph: int64 or bfloat16 edges, an LLM's
    prefix branches), then the rewrites serving `targets` and the delegate plan. `io` is the signature's
    `litert_torch.io` entry (`litert_torch.metadata`)."""
    nhwc_inputs, nhwc_outputs = channel_last_io_pass.apply(graph) if channel_last_io else ([], [])
    run_pipeline(graph)
    if after_passes is not None:
        after_passes(graph)
    plan = delegate_aware(graph, targets)
    io = {**io, "channel_last_inputs": [input_names[i] for i in nhwc_inputs],
          "channel_last_outputs": [output_names[i] for i in nhwc_outputs]}
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


def delegate_aware(graph: ir.Graph, targets: tuple[str, ...]) -> DelegatePlan:
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
