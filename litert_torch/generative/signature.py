"""The ending both LLM builders (`direct.build_llm`, `convert.lower_llm`) give their signatures and their model:
each signature's graph goes through `assemble.finish_signature`, the ending of every front end, with the LLM's own
step between the passes and the delegate plan (attention over the filled prefix of the cache); its I/O metadata
is written here once; the model is assembled with its `litert_torch.llm` layout. Nothing here needs PyTorch.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import numpy as np

from litert_torch import ir, metadata
from litert_torch.assemble import Part, assemble
from litert_torch.assemble import finish_signature as finish
from litert_torch.generative.config import LlmConfig
from litert_torch.generative.layout import (LAYOUT_KEY, LlmLayout, conv_state_name, kv_names,
                                            layer_output_name, recurrent_state_name, sequence_axis, window_state_name)
from litert_torch.generative.prefix import PREFILL_MIN_SKIPPED_FLOPS, attend_filled_prefix

# The LLM runs on the CPU runtimes (LiteRT-LM, our runner): the delegate plan is the CPU's.
TARGETS = ("cpu",)


def finish_signature(graph: ir.Graph, key: str, output_names: list[str], layer_outputs: list[ir.Tensor],
                     report: Callable[[str], None], input_names: list[str] | None = None
                     ) -> tuple[Part, list[str | None]]:
    """A signature's graph (inputs tokens, input_pos and the caches, or `input_names` when given; outputs named
    `output_names`) through `assemble.finish_signature`, as a Part; with the names of the layer outputs the passes
    kept (None where they merged one away)."""
    report(f"optimize {key}")
    input_dtypes = None
    if input_names is None:
        input_names = ["tokens", "input_pos", *(t.name for t in graph.inputs[2:])]  # then the caches
    else:
        input_dtypes = [np.dtype(t.dtype).name for t in graph.inputs]
    input_pos = graph.inputs[1]

    def filled_prefix(g: ir.Graph) -> None:
        attend_filled_prefix(g, input_pos, PREFILL_MIN_SKIPPED_FLOPS if input_pos.size > 1 else 0)

    part = finish(graph=graph, key=key, input_names=input_names, output_names=output_names,
                  io=io_entry(input_names, output_names, input_dtypes), targets=TARGETS,
                  after_passes=filled_prefix)
    produced = {id(t) for op in graph.ops for t in op.outputs}
    kept = [t.name if id(t) in produced and t.name == layer_output_name(i) else None
            for i, t in enumerate(layer_outputs)]
    return part, kept


def io_entry(input_names: list[str], output_names: list[str], input_dtypes: list[str] | None = None
             ) -> dict[str, Any]:
    """A signature's `litert_torch.io` entry: positional tensor inputs (int32 tokens and positions, float32
    caches, unless `input_dtypes` says otherwise), outputs by name, with the pytree specs PyTorch would record for
    such a call written out."""
    leaf: dict[str, Any] = {"type": None, "context": None, "children_spec": []}
    in_spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [
        {"type": "builtins.tuple", "context": "null", "children_spec": [leaf] * len(input_names)},
        {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]
    out_spec = [1, {"type": "builtins.dict", "context": json.dumps(output_names),
                    "children_spec": [leaf] * len(output_names)}]
    return {"inputs": input_names, "parameters": [], "outputs": output_names,
            "in_spec": json.dumps(in_spec), "out_spec": json.dumps(out_spec),
            "tensor_input_positions": list(range(len(input_names))),
            "input_dtypes": input_dtypes or ["int32", "int32", *["float32"] * (len(input_names) - 2)],
            "output_dtypes": ["float32"] * len(output_names), "channel_last_inputs": [], "channel_last_outputs": []}


def state_names(cfg: LlmConfig) -> list[str]:
    """The state tensors of every signature, layer by layer: an attention layer's key and value caches, an LFM2
    convolution layer's state (`kv_cache_conv_<i>`), a gated DeltaNet layer's convolution window and recurrent
    state (`kv_cache_win_<i>`, `kv_cache_rec_<i>`); none for a layer that attends over another's caches (Gemma 4
    and 3n's last layers)."""
    names = []
    for i, (k, v) in enumerate(zip(*[iter(kv_names(cfg.num_layers))] * 2)):
        if cfg.layer_types[i] == "conv":
            names.append(conv_state_name(i))
        elif cfg.layer_types[i] == "linear_attention":
            names += [window_state_name(i), recurrent_state_name(i)]
        elif cfg.kv_owner(i) == i:
            names += [k, v]
    return names


def state_shapes(cfg: LlmConfig, cache_length: int) -> dict[str, tuple[int, ...]]:
    """Each state's shape: keys and values [1, KV, C, D], an LFM2 convolution's inputs by
    position [1, 1, C, hidden] (laid out as a key cache of one head), a gated DeltaNet's convolution window
    [1, K - 1, its q, k and v channels] and recurrent state [1, value heads, key dim, value dim]."""
    shapes: dict[str, tuple[int, ...]] = {}
    conv_channels = 2 * cfg.linear_key_heads * cfg.linear_key_dim + cfg.linear_value_heads * cfg.linear_value_dim
    names = kv_names(cfg.num_layers)
    for i, t in enumerate(cfg.layer_types):
        if t == "conv":
            shapes[conv_state_name(i)] = (1, 1, cache_length, cfg.hidden_size)
        elif t == "linear_attention":
            shapes[window_state_name(i)] = (1, cfg.linear_conv_kernel - 1, conv_channels)
            shapes[recurrent_state_name(i)] = (1, cfg.linear_value_heads, cfg.linear_key_dim, cfg.linear_value_dim)
        else:  # a layer's own head size and key/value heads (Gemma 4's differ by type)
            kv, d = cfg.layer_kv_head_count(i), cfg.layer_head_dim(i)
            shapes[names[2 * i]] = shapes[names[2 * i + 1]] = (1, kv, cache_length, d)
    return {n: shapes[n] for n in state_names(cfg)}


def assemble_llm(parts: list[Part], cfg: LlmConfig, cache_length: int, prefill_lengths: Sequence[int],
                 layer_outputs: dict[str, list[str | None]], start_token_id: int | None,
                 stop_token_ids: Sequence[int], embeddings_input: bool = False) -> tuple[ir.Model, LlmLayout]:
    """The model of the signatures `parts`, with its layout in the `litert_torch.llm` metadata (`embeddings_input`:
    the signatures take embeddings, see `direct.build_llm`)."""
    names = state_names(cfg)
    shapes = state_shapes(cfg, cache_length)
    layout = LlmLayout(sorted(prefill_lengths), cache_length, cfg.num_layers, {n: list(s) for n, s in shapes.items()},
                       cfg.vocab_size, names, {n: sequence_axis(n) for n in names}, start_token_id=start_token_id,
                       stop_token_ids=[int(t) for t in stop_token_ids], layer_outputs=layer_outputs,
                       embeddings_input=embeddings_input,
                       hidden_size=int(cfg.hidden_size) if embeddings_input else None)
    model = assemble(parts)
    model.metadata[LAYOUT_KEY] = metadata.encode(layout.to_json())
    return model, layout
