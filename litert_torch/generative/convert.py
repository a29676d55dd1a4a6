"""A Hugging Face causal LM -> one .tflite model with `prefill_<N>` signatures and a `decode` signature.

Each signature is the same `DecoderLM` traced at its own token count: `prefill_<N>` takes N tokens and returns the
updated caches, `decode` takes one token and returns its logits and the updated caches. As in LiteRT-LM, a
runner prefills all prompt tokens but the last and decodes the last one for the first logits, so prefill never
computes logits (and a padded last chunk needs none). The weights are shared between signatures (stored once). The caches are named `kv_cache_k_<i>` /
`kv_cache_v_<i>` on both sides of every signature, so a runtime can keep one buffer per cache between calls.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import torch
from torch import nn

from litert_torch import ir
from litert_torch.lower.aten.program import export_lowerable
from litert_torch.generative.layout import (  # noqa: F401 (re-exported)
    DECODE, LAYOUT_KEY, LlmLayout, kv_names, layer_output_name, prefill_signature)
from litert_torch.generative.model import DecoderLM
from litert_torch.generative.signature import assemble_llm, finish_signature
from litert_torch.lower import lower_program

class _LayerStep(nn.Module):
    """One decoder layer as a module of its own, so that one trace of it serves every layer."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x, cos, sin, mask, k_cache, v_cache, start):
        return self.layer(x, cos, sin, mask, k_cache, v_cache, start)


def sample_inputs(lm: DecoderLM, length: int) -> tuple:
    tokens = torch.zeros((1, length), dtype=torch.int32)
    positions = torch.arange(length, dtype=torch.int32)
    caches = tuple(torch.zeros(shape) for shape in lm.cache_shapes().values())
    return (tokens, positions, *caches)


def lower_llm(lm: DecoderLM, prefill_lengths: Sequence[int], *, start_token_id: int | None = None,
              stop_token_ids: Sequence[int] = (), progress: Callable[[str], None] | None = None
              ) -> tuple[ir.Model, LlmLayout]:
    """The IR model of `lm` (one prefill signature per length and a decode signature, with its metadata) and its
    layout. Its constants are the module's own tensors: writing it with `write_model` streams them to disk."""
    report = progress or (lambda stage: None)
    keys = [*((prefill_signature(n), n) for n in prefill_lengths), (DECODE, 1)]
    lowered = [_lower_signature(lm, key, length, key == DECODE, report) for key, length in keys]
    parts = [part for part, _ in lowered]
    report("assemble")
    return assemble_llm(parts, lm.cfg, lm.cache_length, prefill_lengths,
                        {key: kept for (key, _), (_, kept) in zip(keys, lowered)}, start_token_id, stop_token_ids)


def _lower_signature(lm: DecoderLM, key: str, length: int, logits: bool, report: Callable[[str], None]):
    """One signature's subgraph. The prologue, each distinct layer structure and the epilogue are traced once
    (torch.export's cost grows with the graph it traces, and every layer has the same graph); each layer is
    lowered from its structure's trace with its own weights, and the pieces are joined tensor to tensor."""
    cfg = lm.cfg
    tokens, positions, *caches = sample_inputs(lm, length)
    steps = [_LayerStep(layer).eval() for layer in lm.layers]
    report(f"export {key}")
    prologue_program = export_lowerable(lm.prologue, (tokens, positions))
    with torch.no_grad():
        x, start, *per_type = lm.prologue(tokens, positions)
    samples = {t: per_type[3 * i: 3 * i + 3] for i, t in enumerate(lm.prologue.layer_types)}
    templates: dict[Any, torch.export.ExportedProgram] = {}
    for i, step in enumerate(steps):
        structure = _structure(cfg, i)
        if structure not in templates:
            mask, cos, sin = samples[cfg.layer_types[i]]
            templates[structure] = export_lowerable(step, (x, cos, sin, mask, caches[2 * i], caches[2 * i + 1],
                                                        start))
    epilogue_program = export_lowerable(lm.epilogue, (x,)) if logits else None

    report(f"lower {key}")
    graph = ir.Graph(key)
    prologue = lower_program(prologue_program)
    by_name = dict(zip(prologue.parameters, prologue.graph.inputs))
    graph.inputs = [by_name["tokens"], by_name["input_pos"]]
    graph.ops += prologue.graph.ops
    x_t, start_t, *rest = prologue.graph.outputs
    tables = {t: rest[3 * i: 3 * i + 3] for i, t in enumerate(lm.prologue.layer_types)}
    cache_outputs: list[ir.Tensor] = []
    layer_outputs: list[ir.Tensor] = []
    names = kv_names(cfg.num_layers)
    for i, step in enumerate(steps):
        lowered = lower_program(templates[_structure(cfg, i)], weights=step.state_dict())
        mask, cos, sin = tables[cfg.layer_types[i]]
        feeds = {"x": x_t, "cos": cos, "sin": sin, "mask": mask, "start": start_t}
        own = dict(zip(lowered.parameters, lowered.graph.inputs))
        k_in, v_in = own["k_cache"], own["v_cache"]
        k_in.name, v_in.name = names[2 * i], names[2 * i + 1]
        graph.inputs += [k_in, v_in]
        x_t, k_out, v_out = _splice(graph, lowered.graph, {own[n]: t for n, t in feeds.items() if n in own},
                                    f"layers.{i}")
        x_t.name = layer_output_name(i)
        layer_outputs.append(x_t)
        cache_outputs += [k_out, v_out]
    graph.outputs = list(cache_outputs)
    output_names = list(names)
    if epilogue_program is not None:
        epilogue = lower_program(epilogue_program)
        (logits_t,) = _splice(graph, epilogue.graph, {epilogue.graph.inputs[0]: x_t}, "epilogue")
        graph.outputs.insert(0, logits_t)
        output_names.insert(0, "logits")

    return finish_signature(graph, key, output_names, layer_outputs, report)


def _structure(cfg, layer: int) -> tuple:
    """Layers with equal keys have the same traced graph (only their weights differ)."""
    return cfg.moe_layers[layer], cfg.has_rope(layer)


def _splice(graph: ir.Graph, part: ir.Graph, feeds: dict[ir.Tensor, ir.Tensor], prefix: str) -> list[ir.Tensor]:
    """Append `part`'s ops to `graph`, its inputs in `feeds` read from the tensors they map to; its tensors and
    sources renamed under `prefix`. Returns `part`'s outputs."""
    for t in part.tensors():
        if t not in feeds and t not in part.inputs:
            t.name = f"{prefix}/{t.name}"
    for op in part.ops:
        op.inputs = [feeds.get(t, t) if t is not None else None for t in op.inputs]
        if op.source is not None:
            module = f"{prefix}.{op.source.module.split('.', 1)[-1]}" if op.source.module else prefix
            op.source = replace(op.source, node=f"{prefix}.{op.source.node}", module=module)
            op.value_node = f"{prefix}.{op.value_node}" if op.value_node else None
        graph.ops.append(op)
    return [feeds.get(t, t) for t in part.outputs]
