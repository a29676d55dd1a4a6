"""The LLM graph built op by op from the config and the weights, without PyTorch.

`convert.lower_llm` traces our PyTorch decoder (`model.DecoderLM`) with torch.export and lowers the trace. For a
decoder read from a directory, this module writes the same graph directly: the ops that lowering emits for each
line of `model.py`, in the same order and with the same constants, then the same passes. Nothing here
imports PyTorch, so an export through it neither pays for importing PyTorch (about 2 s and 0.5 GB of resident
memory, most of a small model's conversion) nor for tracing. Every op records the line of this module that
wrote it and the decoder part it belongs to (`layers.3.attention`), as the source map.

What it builds is checked against the traced graph (tests/generative/test_direct.py): the same ops, and the same
outputs, for every architecture and RoPE type, routed experts included. Models in memory and checkpoints in
PyTorch's .bin format are built by tracing, as are configs `can_build` refuses.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from litert_torch import ir
from litert_torch.assemble import Part
from litert_torch.generative import direct_linear
from litert_torch.generative.config import PLE_GEMMA, LlmConfig, UnsupportedModelError
from litert_torch.generative.graph_builder import Builder as _Builder
from litert_torch.generative.layout import (DECODE, LlmLayout, conv_state_name, kv_names, layer_output_name,
                                            prefill_signature, recurrent_state_name, window_state_name)
from litert_torch.generative.rope import rope_tables  # noqa: F401 (re-exported)
from litert_torch.generative.routing import expert_tile_rows, first_tile_rows, overflow_tiles
from litert_torch.generative.signature import assemble_llm, finish_signature, state_names, state_shapes
from litert_torch.generative.weight_map import Weights, decoder_weights  # noqa: F401 (Weights re-exported)

# A large negative score for masked-out keys (as `model.MASKED`).
MASKED = -1e30
# Inputs known to be at least this large get RSQRT(x * 2**-8) * 2**-4 (`lower.exact.rsqrt`).
_RSQRT_SAFE_LOW = 2.0 ** -100


def can_build(cfg: LlmConfig) -> str | None:
    """None when this module builds `cfg`'s decoder, else why it is traced instead."""
    if cfg.rms_norm_eps < _RSQRT_SAFE_LOW:
        return f"rms_norm_eps {cfg.rms_norm_eps} below {_RSQRT_SAFE_LOW}"
    return None


def build_llm(weights: Weights, cfg: LlmConfig, rope_parameters: Any, cache_length: int,
              prefill_lengths: Sequence[int], *, start_token_id: int | None = None,
              stop_token_ids: Sequence[int] = (), progress: Callable[[str], None] | None = None,
              embeddings_input: bool = False) -> tuple[ir.Model, LlmLayout]:
    """The IR model of the decoder `cfg` over `weights` (a `prefill_<N>` signature per length and a
    `decode` signature, with its metadata) and its layout: what `convert.lower_llm` gives for the same model.

    With `embeddings_input`, the decoder of an image+text model: every signature takes `embeddings`
    float32[1, N, H] (the rows its input-embedding module gives, scaled as it scales them, with image features
    in place of the image tokens' rows) instead of `tokens`, and its attention mask `mask` float32[1, 1, N, C]
    (0 where a token attends, a large negative value elsewhere; sliding-window layers apply their window to
    it), as LiteRT-LM fills it, so that a model attending over an image's tokens in both directions (Gemma 3)
    gets its own mask."""
    if cfg.family in PLE_GEMMA:
        raise UnsupportedModelError(f"{cfg.model_type} decoders are built by direct_gemma.build_llm (per-layer "
                                    "embeddings, shared caches), not by direct.build_llm")
    report = progress or (lambda stage: None)
    tables = rope_tables(cfg, rope_parameters, cache_length)
    params = _Params(weights, cfg)
    keys = [*((prefill_signature(n), n) for n in prefill_lengths), (DECODE, 1)]
    parts, kept = [], {}
    for key, length in keys:
        report(f"build {key}")
        part, kept[key] = _signature(params, cfg, tables, cache_length, key, length, key == DECODE, report,
                                     embeddings_input)
        parts.append(part)
    report("assemble")
    return assemble_llm(parts, cfg, cache_length, prefill_lengths, kept, start_token_id, stop_token_ids,
                        embeddings_input=embeddings_input)


class _Params:
    """Every weight the graph reads (`weight_map.decoder_weights`), widened and checked once and shared by all
    signatures (so that the writer stores each once); each routed-experts layer's projections stacked into one
    table each, as `model.MoE` holds them."""

    def __init__(self, w: Weights, cfg: LlmConfig):
        read = decoder_weights(w, cfg)
        self.embed, self.final_norm, self.final_norm_bias = read.embed, read.final_norm, read.final_norm_bias
        self.lm_head = self.embed if read.lm_head is None else read.lm_head
        self.lm_head_bias = read.lm_head_bias
        self.layers = read.layers
        for layer in self.layers:
            if "moe" in layer:
                layer["moe"] = _stacked_experts(layer["moe"], cfg)
            for key in ("q_norm", "k_norm"):
                if isinstance(layer.get(key), list):  # StableLM: one norm per head, as rows of one table [heads, D]
                    layer[key] = np.stack(layer[key]).astype(np.float32)


def _stacked_experts(moe: dict[str, Any], cfg: LlmConfig) -> dict[str, Any]:
    """A routed-experts layer's weights with each projection's experts' [out, in] weights stacked, float32 (gate
    and up [E, I, H], down [E, H, I])."""
    params = {k: np.ascontiguousarray(v, np.float32) if k.endswith("_bias") else v for k, v in moe.items()
              if k not in ("gate", "up", "down")}
    for name, role in zip(("gate_w", "up_w", "down_w"), ("gate", "up", "down")):
        matrices = moe[role]
        table = np.empty((cfg.num_experts, *matrices[0].shape), np.float32)  # one C-ordered copy
        for e, m in enumerate(matrices):
            table[e] = m
        params[name] = table
    return params


def _signature(params: _Params, cfg: LlmConfig, tables, cache_length: int, key: str, length: int, logits: bool,
               report: Callable[[str], None], embeddings_input: bool = False) -> tuple[Part, list[str | None]]:
    graph = ir.Graph(key)
    b = _Builder(graph)
    if embeddings_input:
        tokens = ir.Tensor("embeddings", [1, length, cfg.hidden_size], np.float32)
    else:
        tokens = ir.Tensor("tokens", [1, length], np.int32)
    input_pos = ir.Tensor("input_pos", [length], np.int32)
    graph.inputs = [tokens, input_pos]
    mask = None
    if embeddings_input:
        mask = ir.Tensor("mask", [1, 1, length, cache_length], np.float32)
        graph.inputs.append(mask)
    x, start, per_type = _prologue(b, params, cfg, tables, cache_length, tokens, input_pos, length, mask)
    conv_start = None
    if cfg.conv_kernel:  # LFM2: where its convolution layers write their inputs, [0, 0, p, 0] (as keys)
        conv_start = start
    names = state_names(cfg)
    shapes = state_shapes(cfg, cache_length)
    cache_outputs, layer_outputs = [], []
    for i in range(cfg.num_layers):
        b.module = f"layers.{i}"
        if cfg.layer_types[i] == "conv":
            if conv_start is None:
                raise UnsupportedModelError(f"layer {i} is a convolution layer, but the config gives no "
                                            f"convolution window (conv_L_cache)")
            state = ir.Tensor(conv_state_name(i), shapes[conv_state_name(i)], np.float32)
            graph.inputs.append(state)
            x, state = _conv_layer(b, params.layers[i], cfg, x, state, input_pos, conv_start)
            cache_outputs.append(state)
        elif cfg.layer_types[i] == "linear_attention":  # Qwen3-Next, Qwen 3.5: gated DeltaNet
            window_in, recurrent_in = (ir.Tensor(n, shapes[n], np.float32)
                                       for n in (window_state_name(i), recurrent_state_name(i)))
            graph.inputs += [window_in, recurrent_in]
            x, states = direct_linear.linear_attention_layer(b, params.layers[i], cfg, x, window_in, recurrent_in,
                                                             input_pos, _mlp)
            cache_outputs += states
        else:
            k_in, v_in = (ir.Tensor(n, shapes[n], np.float32) for n in kv_names(cfg.num_layers)[2 * i: 2 * i + 2])
            graph.inputs += [k_in, v_in]
            mask, cos, sin = per_type[cfg.layer_types[i]]
            x, k_out, v_out = _layer(b, params.layers[i], cfg, i, x, cos, sin, mask, k_in, v_in, start)
            cache_outputs += [k_out, v_out]
        x.name = layer_output_name(i)
        layer_outputs.append(x)
    graph.outputs = list(cache_outputs)
    output_names = list(names)
    if logits:
        b.module = "epilogue"
        graph.outputs.insert(0, _epilogue(b, params, cfg, x))
        output_names.insert(0, "logits")

    input_names = [t.name for t in graph.inputs] if embeddings_input else None
    return finish_signature(graph, key, output_names, layer_outputs, report, input_names=input_names)


def _prologue(b: _Builder, params: _Params, cfg: LlmConfig, tables, cache_length: int, tokens: ir.Tensor,
              input_pos: ir.Tensor, length: int, mask: ir.Tensor | None = None):
    """`model.Prologue`: the embedded tokens, the cache write positions, and per layer type its mask and RoPE
    rows. `tokens` float32 [1, N, H] are the embeddings themselves; `mask` [1, 1, N, C], when given, is the
    global layers' mask, and the sliding-window layers' is it within the window (else both are computed:
    causal, and within the window)."""
    hidden = cfg.hidden_size
    if tokens.dtype == np.float32:
        x = tokens
    else:
        flat = b._reshape(tokens, [length], "embedding_lookup")
        rows = b.emit("EMBEDDING_LOOKUP", [flat, b.const(params.embed, "embed")], [length, hidden], np.float32,
                      "embedding_lookup")
        x = b._reshape(rows, [1, length, hidden], "embedding_lookup")
        if cfg.embed_scale is not None:
            x = b._mul(x, float(cfg.embed_scale))
    keys = b.const(np.arange(cache_length, dtype=np.int32)[None, :], "positions")
    pos = b._reshape(input_pos, [length, 1], "unsqueeze")
    if mask is None:
        masks = _masks(b, cfg, keys, pos, length, cache_length)
    else:
        masks = {"full_attention": b._reshape(mask, [length, cache_length], "mask")}
        if cfg.sliding_window:  # the given mask within the window: MASKED before it
            start = b.emit("SUB", [pos, b.scalar(cfg.sliding_window, np.int32)], [length, 1], np.int32, "sub")
            inside = b.emit("GREATER", [keys, start], [length, cache_length], np.bool_, "gt")
            masks["sliding_attention"] = b.emit("SELECT_V2", [inside, masks["full_attention"], b.scalar(MASKED)],
                                                [length, cache_length], np.float32, "where")
    zero = b.const(np.zeros(1, np.int32), "zeros_like")
    first = input_pos if length == 1 else b._slice(input_pos, 0, 0, 1)
    start = b._concat([zero, zero, first, zero], 0)
    per_type = {}
    for layer_type in sorted(tables):
        mask = masks[layer_type]
        if cfg.kv_groups > 1:
            mask = b._concat([mask] * cfg.kv_groups, 0)
        wrapped = b._wrapped(input_pos, cache_length)
        cos_half, sin_half = tables[layer_type]
        half = cos_half.shape[1]
        cos = b.emit("GATHER", [b.const(cos_half, f"cos_{layer_type}"), wrapped], [length, half], np.float32,
                     "index", axis=0, batch_dims=0)
        sin = b.emit("GATHER", [b.const(sin_half, f"sin_{layer_type}"), wrapped], [length, half], np.float32,
                     "index", axis=0, batch_dims=0)
        cos = b._concat([cos, cos], 1)
        sin = b._concat([b._like("NEG", sin), sin], 1)
        per_type[layer_type] = (mask, b._reshape(cos, [1, length, 1, 2 * half], "unsqueeze"),
                                b._reshape(sin, [1, length, 1, 2 * half], "unsqueeze"))
    return x, start, per_type


def _masks(b: _Builder, cfg: LlmConfig, keys: ir.Tensor, pos: ir.Tensor, length: int,
           cache_length: int) -> dict[str, ir.Tensor]:
    """Per layer type, the additive mask [N, C] of the input positions `pos` [N, 1] over the cache slots `keys`:
    causal, and within the sliding window."""
    causal = b.emit("LESS_EQUAL", [keys, pos], [length, cache_length], np.bool_, "le")
    masks = {"full_attention": _where(b, causal)}
    if cfg.sliding_window:
        start = b.emit("SUB", [pos, b.scalar(cfg.sliding_window, np.int32)], [length, 1], np.int32, "sub")
        inside = b.emit("GREATER", [keys, start], [length, cache_length], np.bool_, "gt")
        window = b.emit("LOGICAL_AND", [causal, inside], [length, cache_length], np.bool_, "and")
        masks["sliding_attention"] = _where(b, window)
    return masks


def _where(b: _Builder, condition: ir.Tensor) -> ir.Tensor:
    return b.emit("SELECT_V2", [condition, b.scalar(0.0), b.scalar(MASKED)], condition.shape, np.float32, "where")


def _layer(b: _Builder, w: dict[str, Any], cfg: LlmConfig, index: int, x, cos, sin, mask, k_cache, v_cache,
           start):
    """`model.Layer`: attention and MLP with their norms and residual additions (Gemma's sandwich norms, Phi and
    StableLM's parallel attention and MLP, OLMo 2's norms on the outputs)."""
    module = b.module
    attention = f"{module}/attention"
    if cfg.post_norms:  # OLMo 2: x + norm(attention(x)), then x + norm(mlp(x))
        b.module = attention
        h, k_cache, v_cache = _attention(b, w, cfg, index, x, cos, sin, mask, k_cache, v_cache, start)
        b.module = module
        x = b._add(x, b._named_norm(h, w, "post_attention", cfg))
        b.module = f"{module}/mlp"
        out = _mlp(b, w, cfg, x)
        b.module = module
        return b._add(x, b._named_norm(out, w, "post_mlp", cfg)), k_cache, v_cache
    if cfg.parallel_residual:  # attention and MLP of the same normed input, added in Hugging Face's order
        normed = b._named_norm(x, w, "input", cfg)
        b.module = attention
        h, k_cache, v_cache = _attention(b, w, cfg, index, normed, cos, sin, mask, k_cache, v_cache, start)
        b.module = f"{module}/mlp"
        out = _mlp(b, w, cfg, normed)
        b.module = module
        if cfg.family == "phi":  # attention + mlp + residual
            return b._add(b._add(h, out), x), k_cache, v_cache
        return b._add(b._add(x, h), out), k_cache, v_cache  # residual + attention + mlp
    b.module = attention
    h, k_cache, v_cache = _attention(b, w, cfg, index, b._named_norm(x, w, "input", cfg), cos, sin, mask, k_cache,
                                     v_cache, start)
    b.module = module
    if cfg.sandwich_norms:
        x = b._add(x, b._named_norm(h, w, "post_attention", cfg))
        b.module = f"{module}/mlp"
        out = _mlp(b, w, cfg, b._named_norm(x, w, "pre_mlp", cfg))
        b.module = module
        return b._add(x, b._named_norm(out, w, "post_mlp", cfg)), k_cache, v_cache
    x = b._add(x, _scaled(b, cfg, h))
    normed = b._named_norm(x, w, "post_attention", cfg)
    b.module = f"{module}/mlp"
    out = _mlp(b, w, cfg, normed)
    b.module = module
    return b._add(x, _scaled(b, cfg, out)), k_cache, v_cache


def _conv_layer(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor, state: ir.Tensor,
                input_pos: ir.Tensor, start: ir.Tensor) -> tuple[ir.Tensor, ir.Tensor]:
    """LFM2's gated short convolution layer and its MLP: B, C, h = in_proj(norm(x)); the convolution of B * h
    over the last `conv_kernel` positions, times C, through out_proj. Each position's B * h is written into the
    state at its position, as a key into a key cache, and the convolution reads the window before it from there
    (positions before 0 count as 0): a padded prefill chunk writes past the real tokens, as it does in a cache."""
    module = b.module
    b.module = f"{module}/conv"
    _, length, hidden = x.shape
    taps = cfg.conv_kernel
    bcx = b._linear(b._named_norm(x, w, "input", cfg), w["conv_in"], w["conv_in_bias"], "in_proj")
    gate_b, gate_c, h = (b._slice(bcx, 2, i * hidden, hidden, "chunk") for i in range(3))
    state = b.emit("DYNAMIC_UPDATE_SLICE", [state, b._reshape(b._mul(gate_b, h), [1, 1, length, hidden]), start],
                   state.shape, np.float32, "update_state")
    window = b._add(b._reshape(input_pos, [length, 1], "unsqueeze"),
                    b.const(np.arange(1 - taps, 1, dtype=np.int32)[None, :], "taps"))  # [T, K]
    inside = b.emit("GREATER_EQUAL", [window, b.scalar(0, np.int32)], window.shape, np.bool_, "ge")
    rows = b.emit("GATHER", [b._reshape(state, [state.shape[2], hidden]),
                             b._reshape(b._binary("MAXIMUM", window, 0), [length * taps])],
                  [length * taps, hidden], np.float32, "index", axis=0, batch_dims=0)
    rows = b.emit("SELECT_V2", [b._reshape(inside, [length, taps, 1], "unsqueeze"),
                                b._reshape(rows, [length, taps, hidden]), b.scalar(0.0)],
                  [length, taps, hidden], np.float32, "where")
    conv = b._sum(b._mul(rows, b.const(np.ascontiguousarray(w["conv_w"], np.float32), "conv_weight")), 1)  # [T, H]
    if w["conv_bias"] is not None:
        conv = b._add(conv, b.const(w["conv_bias"], "conv_bias"))
    y = b._mul(gate_c, b._reshape(conv, [1, length, hidden]))
    x = b._add(x, b._linear(y, w["conv_out"], w["conv_out_bias"], "out_proj"))
    b.module = f"{module}/mlp"
    out = _mlp(b, w, cfg, b._named_norm(x, w, "post_attention", cfg))
    b.module = module
    return b._add(x, out), state


def _scaled(b: _Builder, cfg: LlmConfig, h: ir.Tensor) -> ir.Tensor:
    return h if cfg.residual_scale is None else b._mul(h, float(cfg.residual_scale))


def _mlp(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor) -> ir.Tensor:
    """`model.MLP`, or the layer's routed experts (`_moe`)."""
    if "moe" in w:
        return _moe(b, w["moe"], cfg, x)
    if w["gate"] is None:  # Phi: fc2(act(fc1(x)))
        return b._linear(b._act(b._linear(x, w["up"], w["up_bias"], "up"), cfg.activation), w["down"],
                         w["down_bias"], "down")
    gate = b._act(b._linear(x, w["gate"], w["gate_bias"], "gate"), cfg.activation)
    return b._linear(b._mul(gate, b._linear(x, w["up"], w["up_bias"], "up")), w["down"], w["down_bias"], "down")


def _moe(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor) -> ir.Tensor:
    """`model.MoE`: each token's top-k experts by router softmax (renormalised when the config says so; LFM2-MoE's
    sigmoid router, `direct_linear.sigmoid_route`), a token
    alone gathering its experts' tables, a chunk sorted into tiles (`_tiles`); then Qwen2-MoE's shared expert
    (`model.SharedExpert`) where the layer has one."""
    _, length, hidden = x.shape
    k, experts = cfg.num_experts_per_tok, cfg.num_experts
    flat = b._reshape(x, [length, hidden])
    if cfg.swiglu_limit is not None:
        return _gpt_oss_moe(b, w, cfg, flat, length)
    if cfg.router_sigmoid:  # LFM2-MoE
        weights, chosen = direct_linear.sigmoid_route(b, w, cfg, flat)
    else:
        probs = b._like("SOFTMAX", b._linear(flat, w["router"], None, "router"), what="softmax", beta=1.0)
        weights, chosen = b._topk(probs, k)
        if cfg.norm_topk_prob:
            weights = b._binary("DIV", weights, b._sum(weights, 1, keep_dims=True), "div")
    tables = [b.const(w[n], n) for n in ("gate_w", "up_w", "down_w")]
    pairs = length * k
    if expert_tile_rows(pairs, experts) > 1:
        out = _tiles(b, cfg, flat, weights, chosen, tables, first_tile_rows(pairs, experts))
    else:
        # each pair's gathered gate and up tables times its token summed over H, then its down table times its
        # inner row summed over I
        index = b._reshape(chosen, [pairs])
        inter = tables[0].shape[1]
        rows = _pair_rows(b, flat, length, k)
        gate = b._sum(b._mul(b._gather(tables[0], index), rows), 2)
        up = b._sum(b._mul(b._gather(tables[1], index), rows), 2)
        inner = b._reshape(b._mul(b._act(gate, cfg.activation), up), [pairs, 1, inter], "unsqueeze")
        out = b._reshape(b._sum(b._mul(b._gather(tables[2], index), inner), 2), [length, k, hidden])
        out = b._sum(b._mul(out, b._reshape(weights, [length, k, 1], "unsqueeze")), 1)
    out = b._reshape(out, [1, length, hidden])
    if "shared" not in w:
        return out
    scale = b._like("LOGISTIC", b._linear(x, w["shared_gate"], None, "shared_expert_gate"), what="sigmoid")
    return b._add(out, b._mul(scale, _mlp(b, w["shared"], cfg, x)))


def _pair_rows(b: _Builder, flat: ir.Tensor, length: int, k: int) -> ir.Tensor:
    """Each token's row once per chosen expert, [length * k, 1, H]; one token's row stays [1, 1, H], broadcast
    against its k tables by the products."""
    hidden = flat.shape[1]
    if length == 1:
        return b._reshape(flat, [1, 1, hidden])
    rows = b._reshape(flat, [length, 1, hidden], "unsqueeze")
    rows = b.emit("BROADCAST_TO", [rows, b.const(np.array([length, k, hidden], np.int32), "shape")],
                  [length, k, hidden], np.float32, "expand")
    return b._reshape(rows, [length * k, 1, hidden])


def _gpt_oss_moe(b: _Builder, w: dict[str, Any], cfg: LlmConfig, flat: ir.Tensor, length: int) -> ir.Tensor:
    """gpt-oss's experts: each token's top-k router logits (the router with its bias), softmaxed; each (token,
    expert) pair's tables and biases, gate and up clamped, (up + 1) * gate * sigmoid(alpha * gate) (`_glu`)
    through the down table and its bias; the pairs weighted and summed per token. A token alone gathers its
    experts' tables, a chunk is sorted into tiles (`_tiles`), as for the other routed experts."""
    hidden, k = flat.shape[1], cfg.num_experts_per_tok
    if cfg.swiglu_limit is None:
        raise UnsupportedModelError("gpt-oss's experts clamp their gate and up projections: config.swiglu_limit "
                                    "is missing")
    pairs = length * k
    values, chosen = b._topk(b._linear(flat, w["router"], w["router_bias"], "router"), k)
    weights = b._like("SOFTMAX", values, what="softmax", beta=1.0)
    tables = {n: b.const(w[n], n) for n in ("gate_w", "up_w", "down_w", "gate_bias", "up_bias", "down_bias")}
    if expert_tile_rows(pairs, cfg.num_experts) > 1:
        out = _tiles(b, cfg, flat, weights, chosen, [tables[n] for n in ("gate_w", "up_w", "down_w")],
                     first_tile_rows(pairs, cfg.num_experts), [tables[n] for n in ("gate_bias", "up_bias", "down_bias")])
        return b._reshape(out, [1, length, hidden])
    index = b._reshape(chosen, [pairs])
    rows = _pair_rows(b, flat, length, k)
    gate = b._add(b._sum(b._mul(b._gather(tables["gate_w"], index), rows), 2), b._gather(tables["gate_bias"], index))
    up = b._add(b._sum(b._mul(b._gather(tables["up_w"], index), rows), 2), b._gather(tables["up_bias"], index))
    inner = b._reshape(_glu(b, cfg, gate, up), [pairs, 1, gate.shape[1]], "unsqueeze")
    out = b._add(b._sum(b._mul(b._gather(tables["down_w"], index), inner), 2), b._gather(tables["down_bias"], index))
    out = b._sum(b._mul(b._reshape(out, [length, k, hidden]), b._reshape(weights, [length, k, 1], "unsqueeze")), 1)
    return b._reshape(out, [1, length, hidden])


def _glu(b: _Builder, cfg: LlmConfig, gate: ir.Tensor, up: ir.Tensor) -> ir.Tensor:
    """The experts' gated unit: act(gate) * up, or gpt-oss's clamped (up + 1) * gate * sigmoid(alpha * gate)."""
    if cfg.swiglu_limit is None:
        return b._mul(b._act(gate, cfg.activation), up)
    limit = float(cfg.swiglu_limit)
    gate = b._binary("MINIMUM", gate, limit)
    up = b._binary("MAXIMUM", b._binary("MINIMUM", up, limit), -limit)
    glu = b._mul(gate, b._like("LOGISTIC", b._mul(gate, float(cfg.swiglu_alpha)), what="sigmoid"))
    return b._mul(b._add(up, 1.0), glu)


def _tiles(b: _Builder, cfg: LlmConfig, flat: ir.Tensor, weights: ir.Tensor, chosen: ir.Tensor,
           tables: list[ir.Tensor], rows: int, biases: list[ir.Tensor] | None = None) -> ir.Tensor:
    """`model.MoE._tiled` (in place): the chunk's (token, expert) pairs sorted by expert into each expert's first
    tile of `rows` rows, multiplied by the tables in place, and overflow tiles of `rows`, each one expert's,
    multiplied by its gathered tables; each pair's result read back and weighted. `biases`: the gate, up and
    down projections' [E, N] biases (gpt-oss), added per tile."""
    tokens, hidden = flat.shape
    experts, k = cfg.num_experts, cfg.num_experts_per_tok
    pairs, first_slots = tokens * k, experts * rows
    extra = overflow_tiles(pairs, rows)
    slots = first_slots + extra * rows
    expert = b._reshape(chosen, [pairs])
    onehot = b.emit("EQUAL", [b._reshape(expert, [pairs, 1], "unsqueeze"),
                              b.const(np.arange(experts, dtype=np.int32), "arange")], [pairs, experts], np.bool_, "eq")
    onehot = b.emit("CAST", [onehot], onehot.shape, np.int32, "to")
    rank = b._sum(b._mul(b._binary("SUB", b._cumsum(onehot), onehot), onehot), 1)  # earlier pairs of its expert
    past = b._binary("MAXIMUM", b._binary("SUB", b._sum(onehot, 0), rows), 0)  # each expert's overflow...
    past = b._mul(b._binary("FLOOR_DIV", b._add(past, rows - 1), rows), rows)  # ... in whole tiles
    ends = b._cumsum(past)
    # each pair's slot: in its expert's first tile, or in that expert's overflow tiles
    inside = b.emit("LESS", [rank, b.scalar(rows, np.int32)], rank.shape, np.bool_, "lt")
    in_first = b._add(b._mul(expert, rows), rank)
    over = b._binary("SUB", b._add(b._gather(ends, expert), first_slots), b._gather(past, expert))
    over = b._binary("SUB", b._add(over, rank), rows)
    slot = b.emit("SELECT_V2", [inside, in_first, over], [pairs], np.int32, "where")
    # the token each slot holds (token 0 in spare slots, never read back): a scatter of the pairs' tokens
    negative = b.emit("LESS", [slot, b.scalar(0, np.int32)], [pairs], np.bool_, "scatter_add")
    added = b.emit("ADD", [slot, b.scalar(slots, np.int32)], [pairs], np.int32, "scatter_add",
                   fused_activation_function="NONE")
    index = b.emit("SELECT_V2", [negative, added, slot], [pairs], np.int32, "scatter_add")
    index = b._concat([b._reshape(index, [pairs, 1], "scatter_add")], 1, "scatter_add")
    scattered = b.emit("SCATTER_ND", [index, b.const(np.arange(pairs, dtype=np.int32) // k, "pair_tokens"),
                                      b.const(np.array([slots], np.int32), "shape")], [slots], np.int32, "scatter_add")
    slot_token = b.emit("ADD", [b.const(np.zeros(slots, np.int32), "zeros"), scattered], [slots], np.int32,
                        "scatter_add", fused_activation_function="NONE")
    xs = b._gather(flat, slot_token)  # [S, H]
    first = b._slice(xs, 0, 0, first_slots) if extra else xs
    tiles = [_expert_tiles(b, cfg, b._reshape(first, [experts, rows, hidden]), tables,
                           biases and [b._reshape(t, [experts, 1, t.shape[1]], "unsqueeze") for t in biases])]
    if extra:
        starts = b.const((np.arange(extra, dtype=np.int32) * rows)[:, None], "starts")
        before = b.emit("LESS_EQUAL", [b._reshape(ends, [1, experts], "unsqueeze"), starts], [extra, experts],
                        np.bool_, "le")
        tile_expert = b._sum(b.emit("CAST", [before], before.shape, np.int32, "to"), 1)
        tile_expert = b._binary("MINIMUM", tile_expert, experts - 1)
        overflow = b._reshape(b._slice(xs, 0, first_slots, extra * rows), [extra, rows, hidden])
        tiles.append(_expert_tiles(b, cfg, overflow, [b._gather(t, tile_expert) for t in tables], biases and [
            b._reshape(b._gather(t, tile_expert), [extra, 1, t.shape[1]], "unsqueeze") for t in biases]))
    rows_out = [b._reshape(o, [o.shape[0] * rows, hidden]) for o in tiles]
    joined = (rows_out[0] if len(rows_out) == 1
              else b.emit("CONCATENATION", rows_out, [slots, hidden], np.float32, "cat", axis=0))
    out = b._reshape(b._gather(joined, slot), [tokens, k, hidden])
    return b._sum(b._mul(out, b._reshape(weights, [tokens, k, 1], "unsqueeze")), 1)


def _expert_tiles(b: _Builder, cfg: LlmConfig, x: ir.Tensor, tables: list[ir.Tensor],
                  biases: list[ir.Tensor] | None = None) -> ir.Tensor:
    """`model.MoE._experts`: tiles x [T, B, H] through the tables [T, ...] of their experts (and their [T, 1, N]
    biases, gpt-oss's)."""
    def bmm(a: ir.Tensor, i: int) -> ir.Tensor:  # a @ table^T, the [out, in] table read as stored, + its bias
        table = tables[i]
        out = b.emit("BATCH_MATMUL", [a, table], [*a.shape[:-1], table.shape[-2]], np.float32, "bmm", adj_x=False,
                     adj_y=True, asymmetric_quantize_inputs=False)
        return b._add(out, biases[i]) if biases else out

    gate = bmm(x, 0)
    if cfg.swiglu_limit is None:  # act(gate) before the up product, in the traced builder's order
        return bmm(b._mul(b._act(gate, cfg.activation), bmm(x, 1)), 2)
    return bmm(_glu(b, cfg, gate, bmm(x, 1)), 2)


def _attention(b: _Builder, w: dict[str, Any], cfg: LlmConfig, index: int, x, cos, sin, mask, k_cache, v_cache,
               start):
    """`model.Attention`: grouped-query attention over the whole cache, the new keys and values written at
    the input positions first."""
    _, length, _ = x.shape
    heads, kv_heads, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    groups = heads // kv_heads
    if cfg.qk_norm_whole:  # OLMo 2: RMSNorm over each whole projection, before the heads are split
        q = b._rms_norm(b._linear(x, w["q"], w["q_bias"], "q"), w["q_norm"], cfg, "q_norm")
        k = b._rms_norm(b._linear(x, w["k"], w["k_bias"], "k"), w["k_norm"], cfg, "k_norm")
        q, k = b._reshape(q, [1, length, heads, d], "view"), b._reshape(k, [1, length, kv_heads, d], "view")
    else:
        q = b._reshape(b._linear(x, w["q"], w["q_bias"], "q"), [1, length, heads, d], "view")
        k = b._reshape(b._linear(x, w["k"], w["k_bias"], "k"), [1, length, kv_heads, d], "view")
    v = b._reshape(b._linear(x, w["v"], w["v_bias"], "v"), [1, length, kv_heads, d], "view")
    if w["q_norm"] is not None and not cfg.qk_norm_whole:
        q, k = b._named_norm(q, w, "q", cfg), b._named_norm(k, w, "k", cfg)
    if cfg.has_rope(index):
        q, k = _rope(b, q, cos, sin), _rope(b, k, cos, sin)
    k_cache = b.emit("DYNAMIC_UPDATE_SLICE", [k_cache, b._transpose(k, [0, 2, 1, 3]), start], k_cache.shape,
                     np.float32, "update_cache")
    v_cache = b.emit("DYNAMIC_UPDATE_SLICE", [v_cache, b._transpose(v, [0, 2, 1, 3]), start],
                     v_cache.shape, np.float32, "update_cache")
    q = b._transpose(b._mul(q, float(cfg.attention_scale)), [0, 2, 1, 3])
    q = b._reshape(q, [1, kv_heads, groups * length, d])
    cache = k_cache.shape[2]
    scores = b.emit("BATCH_MATMUL", [q, k_cache], [1, kv_heads, groups * length, cache], np.float32, "matmul",
                    adj_x=False, adj_y=True, asymmetric_quantize_inputs=False)
    if cfg.attn_softcap is not None:
        scores = b._softcap(scores, cfg.attn_softcap)
    if cfg.attention_sinks:  # gpt-oss: each head's sink logit as one more column of the softmax, then dropped
        logits = b._add(scores, mask)
        rows = np.repeat(np.asarray(w["sinks"], np.float32).reshape(kv_heads, groups), length, axis=1)
        sinks = b.const(rows.reshape(1, kv_heads, groups * length, 1), "sinks")
        probs = b._like("SOFTMAX", b._concat([logits, sinks], 3), what="softmax", beta=1.0)
        probs = b._slice(probs, 3, 0, cache)
    else:
        probs = b._like("SOFTMAX", b._add(scores, mask), what="softmax", beta=1.0)
    out = b.emit("BATCH_MATMUL", [probs, v_cache], [1, kv_heads, groups * length, d], np.float32, "matmul",
                 adj_x=False, adj_y=False, asymmetric_quantize_inputs=False)
    out = b._transpose(b._reshape(out, [1, heads, length, d]), [0, 2, 1, 3])
    out = b._reshape(out, [1, length, heads * d])
    if cfg.attn_output_gate:  # Qwen3-Next, Qwen 3.5: times sigmoid of the query projection's gate half
        out = b._mul(out, b._like("LOGISTIC", b._linear(x, w["q_gate"], None, "q_gate"), what="sigmoid"))
    return b._linear(out, w["o"], w["o_bias"], "o"), k_cache, v_cache


def _rope(b: _Builder, x: ir.Tensor, cos: ir.Tensor, sin: ir.Tensor) -> ir.Tensor:
    """`model._rope`: rotate-half RoPE on the first R features of each head (sin's first half negated)."""
    rot, d = cos.shape[-1], x.shape[-1]
    xr = b._slice(x, 3, 0, rot) if rot < d else x
    half = rot // 2
    rotated = b._concat([b._slice(xr, 3, half, rot - half), b._slice(xr, 3, 0, half)], 3)
    out = b._add(b._mul(xr, cos), b._mul(rotated, sin))
    return b._concat([out, b._slice(x, 3, rot, d - rot)], 3) if rot < d else out


def _epilogue(b: _Builder, params: _Params, cfg: LlmConfig, x: ir.Tensor) -> ir.Tensor:
    """`model.Epilogue`: the last token's hidden state, normed, times the output embedding."""
    if x.shape[1] > 1:
        x = b._slice(x, 1, x.shape[1] - 1, 1)
    scores = b._linear(b._norm(x, params.final_norm, params.final_norm_bias, cfg), params.lm_head,
                       params.lm_head_bias, "lm_head")
    if cfg.logit_divisor is not None:
        scores = b._div(scores, cfg.logit_divisor)
    if cfg.final_logit_softcap:
        scores = b._softcap(scores, float(cfg.final_logit_softcap))
    return scores
