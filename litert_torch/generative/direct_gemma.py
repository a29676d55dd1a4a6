"""Gemma 4 and Gemma 3n text decoders built op by op (`direct.py`'s builder, without PyTorch).

What the two add over Gemma 3, as transformers 5.25 computes it (`Gemma4TextModel`, `Gemma3nTextModel`):

- RMSNorm scales by its weight (not 1 + weight) and normalises each value head too (no scale); the scores are not
  scaled (`scaling = 1.0`).
- Per-layer embeddings: a second table [V', L * P] looked up by the tokens (times sqrt(P)), added to a projection
  of the embedded tokens ([H] -> [L * P], times H^-0.5, RMSNorm over each layer's P) and scaled by 2^-0.5; after
  its MLP each layer adds norm(proj(act(gate(x)) * its P-wide slice)).
- Key/value caches shared: each of the last `num_kv_shared_layers` layers computes no keys or values and attends
  over the caches of the last earlier layer of its type (as updated by that layer in the same call), so it has
  no state of its own.
- Gemma 4: full-attention layers with their own head size (`global_head_dim`) and key/value heads, proportional
  RoPE, values taken from the key projection (`attention_k_eq_v`), double-wide MLPs on the sharing layers, a
  `layer_scalar` per layer, and routed experts beside every MLP (`enable_moe_block`).
- Gemma 3n: AltUp (the hidden state carried as N streams: each layer predicts all N from a router over the active
  stream, runs on the active one, and corrects all N from its output), LAuReL (a low-rank residual beside
  attention), and activation sparsity (the first layers' MLP gate keeps what lies above mean + std * the
  standard normal quantile of the layer's sparsity).

Every op records the line of this module that wrote it and its decoder part, as in `direct.py`. This module
imports `direct.py` and not the other way round: the exporter picks the builder by family.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from litert_torch import ir
from litert_torch.assemble import Part
from litert_torch.generative import direct
from litert_torch.generative.config import LlmConfig
from litert_torch.generative.layout import DECODE, LlmLayout, kv_names, layer_output_name, prefill_signature
from litert_torch.generative.rope import rope_tables
from litert_torch.generative.routing import expert_tile_rows, first_tile_rows
from litert_torch.generative.signature import assemble_llm, finish_signature, state_names, state_shapes
from litert_torch.generative.weight_map import Weights, decoder_weights

_Builder = direct._Builder
# Gemma 3n's AltUp: a stream's root-mean-square is clamped below at this before it divides (`clamp(min=1e-5)`)
_ALTUP_MIN_MAGNITUDE = 1e-5


def build_llm(weights: Weights, cfg: LlmConfig, rope_parameters: Any, cache_length: int,
              prefill_lengths: Sequence[int], *, start_token_id: int | None = None,
              stop_token_ids: Sequence[int] = (), progress: Callable[[str], None] | None = None
              ) -> tuple[ir.Model, LlmLayout]:
    """`direct.build_llm` for a Gemma 4 or Gemma 3n decoder (the exporter calls this one for those families;
    `direct.build_llm` refuses them)."""
    report = progress or (lambda stage: None)
    tables = typed_rope_tables(cfg, rope_parameters, cache_length)
    params = _Params(weights, cfg)
    keys = [*((prefill_signature(n), n) for n in prefill_lengths), (DECODE, 1)]
    parts, kept = [], {}
    for key, length in keys:
        report(f"build {key}")
        part, kept[key] = _signature(params, cfg, tables, cache_length, key, length, key == DECODE, report)
        parts.append(part)
    report("assemble")
    return assemble_llm(parts, cfg, cache_length, prefill_lengths, kept, start_token_id, stop_token_ids)


def typed_rope_tables(cfg: LlmConfig, rope_parameters: Any, length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`rope.rope_tables` with each layer type's RoPE over that type's own head size (Gemma 4's global layers
    have theirs)."""
    tables = {}
    for layer_type in cfg.attention_types:
        head_dim = cfg.layer_head_dim(cfg.layer_types.index(layer_type))
        typed = dataclasses.replace(cfg, head_dim=head_dim, layer_types=[layer_type])
        tables.update(rope_tables(typed, rope_parameters, length))
    return tables


class _Params(direct._Params):
    """The weights by role (`weight_map.decoder_weights`), read once and shared by every signature; with the
    per-layer embeddings' and AltUp's (`extra`)."""

    def __init__(self, w: Weights, cfg: LlmConfig):  # the base's reading, with `extra` kept
        read = decoder_weights(w, cfg)
        self.embed, self.final_norm, self.final_norm_bias = read.embed, read.final_norm, None
        self.lm_head = self.embed if read.lm_head is None else read.lm_head
        self.lm_head_bias = None
        self.layers = read.layers
        for layer in self.layers:
            if "moe" in layer:
                layer["moe"] = direct._stacked_experts(layer["moe"], cfg)
        self.extra = read.extra or {}


def _signature(params: _Params, cfg: LlmConfig, tables, cache_length: int, key: str, length: int, logits: bool,
               report: Callable[[str], None]) -> tuple[Part, list[str | None]]:
    """One signature: `direct._prologue` (embedding, masks, RoPE rows), the per-layer embeddings and AltUp's
    streams, the layers (each sharing layer reading its owner's updated caches), the epilogue when it gives
    logits."""
    graph = ir.Graph(key)
    b = _Builder(graph)
    tokens = ir.Tensor("tokens", [1, length], np.int32)
    input_pos = ir.Tensor("input_pos", [length], np.int32)
    graph.inputs = [tokens, input_pos]
    # the masks come ungrouped (one row per token); each layer repeats them for its query heads per key head
    ungrouped = dataclasses.replace(cfg, num_kv_heads=cfg.num_heads, layer_kv_heads=[])
    x, start, per_type = direct._prologue(b, params, ungrouped, tables, cache_length, tokens, input_pos, length)
    per_layer = _per_layer_inputs(b, params, cfg, tokens, x) if cfg.per_layer_input_size else None
    if cfg.altup_inputs:
        b.module = "altup"
        x = _altup_streams(b, params.extra["altup_in"], x)
    shapes = state_shapes(cfg, cache_length)
    names = kv_names(cfg.num_layers)
    caches: dict[int, tuple[ir.Tensor, ir.Tensor]] = {}
    grouped: dict[tuple[str, int], ir.Tensor] = {}
    layer_outputs = []
    for i in range(cfg.num_layers):
        b.module = f"layers.{i}"
        layer_type = cfg.layer_types[i]
        mask, cos, sin = per_type[layer_type]
        groups = cfg.num_heads // cfg.layer_kv_head_count(i)
        if (layer_type, groups) not in grouped:
            grouped[layer_type, groups] = mask if groups == 1 else b._concat([mask] * groups, 0)
        owner = cfg.kv_owner(i)
        if owner == i:
            k_in, v_in = (ir.Tensor(n, shapes[n], np.float32) for n in names[2 * i: 2 * i + 2])
            graph.inputs += [k_in, v_in]
            caches[i] = (k_in, v_in)
        ple = None
        if per_layer is not None:
            ple = b._reshape(b._slice(per_layer, 2, i, 1), [1, length, cfg.per_layer_input_size], "select")
        attend = _Attention(cfg, params.layers[i], i, cos, sin, grouped[layer_type, groups], caches, owner,
                            start)
        if cfg.altup_inputs:
            x = _gemma3n_layer(b, params.layers[i], cfg, i, x, ple, attend)
        else:
            x = _gemma4_layer(b, params.layers[i], cfg, i, x, ple, attend)
        x.name = layer_output_name(i)
        layer_outputs.append(x)
    graph.outputs = [t for i in sorted(caches) for t in caches[i]]
    output_names = list(state_names(cfg))
    if logits:
        b.module = "epilogue"
        if cfg.altup_inputs:
            last = b._slice(x, 1, length - 1, 1) if length > 1 else x
            x = _altup_merge(b, params.extra["altup_out"], last)
        graph.outputs.insert(0, direct._epilogue(b, params, cfg, x))
        output_names.insert(0, "logits")
    return finish_signature(graph, key, output_names, layer_outputs, report)


def _rms(b: _Builder, x: ir.Tensor, weight: np.ndarray | None, cfg: LlmConfig, what: str = "norm") -> ir.Tensor:
    """Gemma 4 / 3n RMSNorm: x * (mean(x^2) + eps)^-0.5, times the weight when it has one (`with_scale`)."""
    if weight is not None:
        return b._rms_norm(x, weight, cfg, what)
    reduced = [*x.shape[:-1], 1]
    mean = b.emit("MEAN", [b._mul(x, x, "pow"), b.const(np.array([x.rank - 1], np.int32), "axes")], reduced,
                  x.dtype, "mean", keep_dims=True)
    inv = b._like("RSQRT", b._mul(b._add(mean, float(cfg.rms_norm_eps), "add"), 2.0 ** -8, "rsqrt"), what="rsqrt")
    return b._mul(x, b._mul(inv, 2.0 ** -4, "rsqrt"), what)


def _per_layer_inputs(b: _Builder, params: _Params, cfg: LlmConfig, tokens: ir.Tensor, x: ir.Tensor) -> ir.Tensor:
    """The per-layer embeddings [1, T, L, P]: (norm(proj(x) * H^-0.5) + table[tokens] * sqrt(P)) * 2^-0.5, the
    table's rows of Gemma 3n's tokens past it read as row 0 (`get_per_layer_inputs`)."""
    b.module = "per_layer_embedding"
    _, length, hidden = x.shape
    layers, width = cfg.num_layers, cfg.per_layer_input_size
    ids = b._reshape(tokens, [length], "embedding_lookup")
    if cfg.family == "gemma3n" and cfg.per_layer_vocab_size < cfg.vocab_size:
        inside = b.emit("LESS", [ids, b.scalar(cfg.per_layer_vocab_size, np.int32)], [length], np.bool_, "lt")
        ids = b.emit("SELECT_V2", [inside, ids, b.scalar(0, np.int32)], [length], np.int32, "where")
    rows = b.emit("EMBEDDING_LOOKUP", [ids, b.const(params.extra["ple_embed"], "embed_per_layer")],
                  [length, layers * width], np.float32, "embedding_lookup")
    rows = b._reshape(b._mul(rows, float(np.float32(width ** 0.5))), [1, length, layers, width])
    projected = b._mul(b._linear(x, params.extra["ple_projection"], None, "projection"),
                       float(np.float32(hidden ** -0.5)))
    projected = _rms(b, b._reshape(projected, [1, length, layers, width]), params.extra["ple_norm"], cfg)
    return b._mul(b._add(projected, rows), float(np.float32(2.0 ** -0.5)))


@dataclasses.dataclass
class _Attention:
    """What a layer's attention reads besides its input: RoPE rows and mask of its type, and the caches (its own,
    written here, or its owner's as that layer wrote them)."""

    cfg: LlmConfig
    w: dict[str, Any]
    index: int
    cos: ir.Tensor
    sin: ir.Tensor
    mask: ir.Tensor
    caches: dict[int, tuple[ir.Tensor, ir.Tensor]]
    owner: int
    start: ir.Tensor  # where the key and value caches are written: [0, 0, input_pos[0], 0]

    def __call__(self, b: _Builder, x: ir.Tensor) -> ir.Tensor:
        """Attention of the normed input `x` [1, T, H] (q/k norms, unscaled scores), through o_proj."""
        cfg, w, i = self.cfg, self.w, self.index
        _, length, _ = x.shape
        heads, kv_heads, d = cfg.num_heads, cfg.layer_kv_head_count(i), cfg.layer_head_dim(i)
        groups = heads // kv_heads
        q = b._reshape(b._linear(x, w["q"], None, "q"), [1, length, heads, d], "view")
        q = direct._rope(b, _rms(b, q, w["q_norm"], cfg, "q_norm"), self.cos, self.sin)
        if self.owner == i:
            k_cache, v_cache = self.caches[i]
            k = b._reshape(b._linear(x, w["k"], None, "k"), [1, length, kv_heads, d], "view")
            v = k if w["v"] is None else b._reshape(b._linear(x, w["v"], None, "v"), [1, length, kv_heads, d],
                                                    "view")
            k = direct._rope(b, _rms(b, k, w["k_norm"], cfg, "k_norm"), self.cos, self.sin)
            v = _rms(b, v, None, cfg, "v_norm")
            k_cache = b.emit("DYNAMIC_UPDATE_SLICE", [k_cache, b._transpose(k, [0, 2, 1, 3]), self.start],
                             k_cache.shape, np.float32, "update_cache")
            v_cache = b.emit("DYNAMIC_UPDATE_SLICE", [v_cache, b._transpose(v, [0, 2, 1, 3]), self.start],
                             v_cache.shape, np.float32, "update_cache")
            self.caches[i] = (k_cache, v_cache)
        else:
            k_cache, v_cache = self.caches[self.owner]
        q = b._reshape(b._transpose(q, [0, 2, 1, 3]), [1, kv_heads, groups * length, d])
        cache = k_cache.shape[2]
        scores = b.emit("BATCH_MATMUL", [q, k_cache], [1, kv_heads, groups * length, cache], np.float32, "matmul",
                        adj_x=False, adj_y=True, asymmetric_quantize_inputs=False)
        probs = b._like("SOFTMAX", b._add(scores, self.mask), what="softmax", beta=1.0)
        out = b.emit("BATCH_MATMUL", [probs, v_cache], [1, kv_heads, groups * length, d], np.float32, "matmul",
                     adj_x=False, adj_y=False, asymmetric_quantize_inputs=False)
        out = b._transpose(b._reshape(out, [1, heads, length, d]), [0, 2, 1, 3])
        return b._linear(b._reshape(out, [1, length, heads * d]), w["o"], None, "o")


def _mlp(b: _Builder, w: dict[str, Any], cfg: LlmConfig, index: int, x: ir.Tensor) -> ir.Tensor:
    """down(act(gate(x)) * up(x)), Gemma 3n's sparse layers keeping only the gate's values above its cut-off."""
    gate = b._linear(x, w["gate"], None, "gate")
    if cfg.activation_sparsity and cfg.activation_sparsity[index] > 0:
        gate = _gaussian_topk(b, gate, cfg.activation_sparsity[index])
    gate = b._act(gate, cfg.activation)
    return b._linear(b._mul(gate, b._linear(x, w["up"], None, "up")), w["down"], None, "down")


def sparsity_quantile(sparsity: float) -> float:
    """The standard normal quantile of `sparsity` as Gemma 3n's MLP computes it: PyTorch's float32
    `Normal(0, 1).icdf`, which is a few units in the last place away from the correctly rounded quantile for most
    values (0.9: one unit; 0.999: 16). A Gemma 3n model is read with transformers, so PyTorch is loaded."""
    import torch

    return float(torch.distributions.normal.Normal(0, 1).icdf(torch.tensor(sparsity, dtype=torch.float32)))


def _gaussian_topk(b: _Builder, x: ir.Tensor, sparsity: float) -> ir.Tensor:
    """relu(x - (mean(x) + std(x) * q)) over the last axis, std the population one and q the standard normal
    quantile of `sparsity` (`Gemma3nTextMLP._gaussian_topk`)."""
    quantile = sparsity_quantile(sparsity)
    axes = b.const(np.array([x.rank - 1], np.int32), "axes")
    reduced = [*x.shape[:-1], 1]
    mean = b.emit("MEAN", [x, axes], reduced, x.dtype, "mean", keep_dims=True)
    centered = b._binary("SUB", x, mean, "sub")
    var = b.emit("MEAN", [b._mul(centered, centered, "pow"), axes], reduced, x.dtype, "var", keep_dims=True)
    cutoff = b._add(mean, b._mul(b._like("SQRT", var, what="std"), quantile))
    return b._like("RELU", b._binary("SUB", x, cutoff, "sub"), what="relu")


def _per_layer_residual(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor, ple: ir.Tensor) -> ir.Tensor:
    """norm(proj(act(gate(x)) * the layer's per-layer embedding))."""
    gated = b._mul(b._act(b._linear(x, w["ple_gate"], None, "per_layer_input_gate"), cfg.activation), ple)
    return _rms(b, b._linear(gated, w["ple_proj"], None, "per_layer_projection"), w["ple_norm"], cfg,
                "post_per_layer_input_norm")


def _gemma4_layer(b: _Builder, w: dict[str, Any], cfg: LlmConfig, index: int, x: ir.Tensor, ple: ir.Tensor | None,
                  attend: _Attention) -> ir.Tensor:
    """`Gemma4TextDecoderLayer`: sandwich-normed attention and MLP, the per-layer residual, times layer_scalar."""
    module = b.module
    b.module = f"{module}/attention"
    h = attend(b, _rms(b, x, w["input_norm"], cfg, "input_norm"))
    b.module = module
    x = b._add(x, _rms(b, h, w["post_attention_norm"], cfg, "post_attention_norm"))
    b.module = f"{module}/mlp"
    h = _mlp(b, w, cfg, index, _rms(b, x, w["pre_mlp_norm"], cfg, "pre_mlp_norm"))
    if "moe" in w:  # the experts beside the MLP, routed from the MLP's input before its norm
        b.module = f"{module}/moe"
        routed = _rms(b, _experts(b, w["moe"], cfg, x, _rms(b, x, w["pre_moe_norm"], cfg, "pre_moe_norm")),
                      w["post_moe_norm"], cfg, "post_moe_norm")
        h = b._add(_rms(b, h, w["post_mlp_1_norm"], cfg, "post_mlp_1_norm"), routed)
    b.module = module
    x = b._add(x, _rms(b, h, w["post_mlp_norm"], cfg, "post_mlp_norm"))
    if ple is not None:
        b.module = f"{module}/per_layer_input"
        x = b._add(x, _per_layer_residual(b, w, cfg, x, ple))
        b.module = module
    scalar = np.asarray(w["layer_scalar"], np.float32)
    if scalar[0] != 1.0:  # times 1 changes nothing
        x = b._mul(x, b.const(scalar, "layer_scalar"))
    return x


def _experts(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor, normed: ir.Tensor) -> ir.Tensor:
    """Gemma 4's routed experts (`Gemma4TextRouter`, `Gemma4TextExperts`): the router reads x [1, T, H] through
    an unscaled RMSNorm times its scale times H^-0.5; each token's top-k softmax probabilities, renormalized and
    times their experts' `per_expert_scale`, weigh act(gate) * up through down of its experts applied to
    `normed`. The experts' products are `direct.py`'s: a token alone gathers its experts' tables, a chunk is
    sorted into tiles (`direct._tiles`)."""
    _, length, hidden = x.shape
    k, count = cfg.num_experts_per_tok, cfg.num_experts
    flat = b._reshape(x, [length, hidden])
    routed = b._mul(_rms(b, flat, None, cfg, "router_norm"), b.const(np.asarray(w["router_scale"], np.float32),
                                                                      "router_scale"))
    routed = b._mul(routed, float(np.float32(hidden ** -0.5)))
    probs = b._like("SOFTMAX", b._linear(routed, w["router"], None, "router"), what="softmax", beta=1.0)
    weights, chosen = b._topk(probs, k)
    weights = b._binary("DIV", weights, b._sum(weights, 1, keep_dims=True), "div")
    weights = b._mul(weights, b._gather(b.const(np.asarray(w["expert_scale"], np.float32), "per_expert_scale"),
                                        chosen))
    flat = b._reshape(normed, [length, hidden])
    tables = [b.const(w[n], n) for n in ("gate_w", "up_w", "down_w")]
    pairs = length * k
    if expert_tile_rows(pairs, count) > 1:
        out = direct._tiles(b, cfg, flat, weights, chosen, tables, first_tile_rows(pairs, count))
    else:  # each pair's gathered tables times its token's row, summed
        index = b._reshape(chosen, [pairs])
        rows = direct._pair_rows(b, flat, length, k)
        gate = b._sum(b._mul(b._gather(tables[0], index), rows), 2)
        up = b._sum(b._mul(b._gather(tables[1], index), rows), 2)
        inner = b._reshape(b._mul(b._act(gate, cfg.activation), up), [pairs, 1, tables[0].shape[1]], "unsqueeze")
        out = b._reshape(b._sum(b._mul(b._gather(tables[2], index), inner), 2), [length, k, hidden])
        out = b._sum(b._mul(out, b._reshape(weights, [length, k, 1], "unsqueeze")), 1)
    return b._reshape(out, [1, length, hidden])


def _router(b: _Builder, w: dict[str, Any], cfg: LlmConfig, x: ir.Tensor) -> ir.Tensor:
    """AltUp's modalities [1, T, N]: tanh(router(norm(x) * H^-1))."""
    normed = b._mul(_rms(b, x, w["altup_router_norm"], cfg, "router_norm"), float(np.float32(x.shape[-1] ** -1.0)))
    return b._like("TANH", b._linear(normed, w["altup_router"], None, "modality_router"), what="tanh")


def _gemma3n_layer(b: _Builder, w: dict[str, Any], cfg: LlmConfig, index: int, streams: ir.Tensor,
                   ple: ir.Tensor | None, attend: _Attention) -> ir.Tensor:
    """`Gemma3nTextDecoderLayer` on the AltUp streams [N, T, H]: predict, the layer on the active prediction
    (attention and LAuReL side by side, then the MLP), correct, and the per-layer residual added to every stream
    but the first."""
    module = b.module
    n, length, hidden = streams.shape
    active_index = cfg.altup_active
    b.module = f"{module}/altup"
    # predict: stream j += sum_k streams[k] * coefs[t, j, k], coefs = prediction_coefs(router(active stream))
    active = b._slice(streams, 0, active_index, 1)
    coefs = b._linear(_router(b, w, cfg, active), w["altup_predict"], None, "prediction_coefs")
    coefs = b._reshape(coefs, [length, n, n])
    mixed = b.emit("BATCH_MATMUL", [b._transpose(streams, [1, 2, 0]), coefs], [length, hidden, n], np.float32,
                   "matmul", adj_x=False, adj_y=True, asymmetric_quantize_inputs=False)
    predictions = b._add(b._transpose(mixed, [2, 0, 1]), streams)
    active = b._slice(predictions, 0, active_index, 1)
    b.module = module
    normed = _rms(b, active, w["input_norm"], cfg, "input_norm")
    b.module = f"{module}/laurel"
    low_rank = b._linear(b._linear(normed, w["laurel_left"], None, "linear_left"), w["laurel_right"], None,
                         "linear_right")
    laurel = b._add(normed, _rms(b, low_rank, w["laurel_norm"], cfg, "post_laurel_norm"))
    b.module = f"{module}/attention"
    h = attend(b, normed)
    b.module = module
    h = b._add(active, _rms(b, h, w["post_attention_norm"], cfg, "post_attention_norm"))
    h = b._div(b._add(h, laurel), float(np.sqrt(2.0)))
    b.module = f"{module}/mlp"
    out = _mlp(b, w, cfg, index, _rms(b, h, w["pre_mlp_norm"], cfg, "pre_mlp_norm"))
    b.module = module
    h = b._add(h, _rms(b, out, w["post_mlp_norm"], cfg, "post_mlp_norm"))
    b.module = f"{module}/altup"
    # correct: every stream += (activated - active prediction) * (correction_coefs(router(activated)) + 1)
    scale = b._add(b._linear(_router(b, w, cfg, h), w["altup_correct"], None, "correction_coefs"), 1.0)
    scale = b._reshape(b._transpose(b._reshape(scale, [length, n]), [1, 0]), [n, length, 1])
    corrected = b._add(b._mul(b._binary("SUB", h, active, "sub"), scale), predictions)
    first = b._slice(corrected, 0, active_index, 1)
    if cfg.altup_correct_scale:
        first = b._mul(first, b.const(np.asarray(w["altup_scale"], np.float32), "correct_output_scale"))
    if ple is None:
        b.module = module
        return corrected
    b.module = f"{module}/per_layer_input"
    residual = _per_layer_residual(b, w, cfg, first, ple)
    rest = b._add(b._slice(corrected, 0, 1, n - 1), residual)
    b.module = module
    return b._concat([b._slice(corrected, 0, 0, 1), rest], 0)


def _magnitude(b: _Builder, x: ir.Tensor, clamp: bool) -> ir.Tensor:
    """sqrt(mean(x^2)) over the last axis, the mean clamped below at 1e-5 when `clamp`."""
    mean = b.emit("MEAN", [b._mul(x, x, "pow"), b.const(np.array([x.rank - 1], np.int32), "axes")],
                  [*x.shape[:-1], 1], x.dtype, "mean", keep_dims=True)
    if clamp:
        mean = b._binary("MAXIMUM", mean, _ALTUP_MIN_MAGNITUDE)
    return b._like("SQRT", mean, what="sqrt")


def _rescaled(b: _Builder, x: ir.Tensor, target: ir.Tensor) -> ir.Tensor:
    """x * target / its own root-mean-square (clamped)."""
    return b._binary("DIV", b._mul(x, target), _magnitude(b, x, True), "div")


def _altup_streams(b: _Builder, projections: list[np.ndarray], x: ir.Tensor) -> ir.Tensor:
    """Gemma 3n's N streams [N, T, H] of the embedded tokens x [1, T, H]: x, then each projection of x rescaled to
    x's root-mean-square."""
    target = _magnitude(b, x, False)
    streams = [x] + [_rescaled(b, b._linear(x, p, None, "altup_projection"), target) for p in projections]
    return b._concat(streams, 0)


def _altup_merge(b: _Builder, projections: list[np.ndarray], streams: ir.Tensor) -> ir.Tensor:
    """The mean [1, T, H] of stream 0 and each later stream's unembedding projection, rescaled to stream 0's
    root-mean-square."""
    first = b._slice(streams, 0, 0, 1)
    target = _magnitude(b, first, False)
    parts = [first] + [_rescaled(b, b._linear(b._slice(streams, 0, i + 1, 1), p, None, "altup_unembed"), target)
                       for i, p in enumerate(projections)]
    stacked = b._concat(parts, 0)
    return b.emit("MEAN", [stacked, b.const(np.array([0], np.int32), "axes")], [1, *stacked.shape[1:]],
                  np.float32, "mean", keep_dims=True)
