"""Hugging Face tensor names -> the roles they play in our decoder, for both LLM builders (`direct`, which writes
numpy arrays into the graph, and `model.build`, which holds PyTorch tensors in modules): one map, each weight
checked against the shape the config gives it, so a checkpoint that does not match its config is an error naming
the weight, not a model that broadcasts a wrong tensor.

The names are a checkpoint's or a model's state dict's: mixture-of-experts layers are read from each expert's
projections (`mlp.experts.<e>.gate_proj.weight`, Mixtral's `block_sparse_moe.experts.<e>.w1.weight`) or from the
fused tables a transformers model holds in memory (`mlp.experts.gate_up_proj`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from litert_torch.generative.config import LINEAR_ATTENTION, PLE_GEMMA, LlmConfig, UnsupportedModelError


class Weights:
    """A checkpoint's weights by name, each taken through `widen` (the numpy builder: a float32 array, a view of
    the checkpoint where it is float32; the traced builder: the tensor, checked to be floating point) and
    checked against the shape the config gives it."""

    def __init__(self, weights: Mapping[str, Any], widen: Callable[[str, Any], Any]):
        self.weights, self._widen = weights, widen

    def has(self, name: str, prefix: str = "model.") -> bool:
        return prefix + name in self.weights

    def get(self, name: str, *shape: int, prefix: str = "model.", required: bool = True) -> Any:
        full = prefix + name
        if full not in self.weights:
            if not required:
                return None
            raise UnsupportedModelError(f"the model has no weight {full}, which its config's architecture has")
        array = self._widen(full, self.weights[full])
        if tuple(array.shape) != tuple(shape):
            raise UnsupportedModelError(f"weight {full} has shape {list(array.shape)}, where the config gives "
                                        f"{list(shape)}: the weights do not belong to this config")
        return array


@dataclass
class DecoderWeights:
    """Every weight of a decoder by role. Each layer is a dict: `q`, `k`, `v`, `o` and their `*_bias` (None when
    absent), `q_norm`, `k_norm` (None when absent; StableLM's a list of each head's), the norms `input_norm`,
    `post_attention_norm` (and `pre_mlp_norm`, `post_mlp_norm` with sandwich norms; OLMo 2 and 3 have only
    `post_attention_norm` and `post_mlp_norm`) with their `*_norm_bias` (LayerNorm architectures; else None), and
    either the MLP's `gate` (None for Phi's ungated MLP), `up`, `down` with their biases, or `moe` (`experts`)."""

    embed: Any
    final_norm: Any
    lm_head: Any  # None when tied to the embedding
    layers: list[dict[str, Any]]
    final_norm_bias: Any = None  # LayerNorm architectures
    lm_head_bias: Any = None  # Phi
    # Gemma 4 and 3n: the per-layer embeddings' `ple_embed` [V', L * P], `ple_projection` [L * P, H] and
    # `ple_norm` [P]; Gemma 3n's AltUp stream projections `altup_in`, `altup_out` (lists of [H, H])
    extra: dict[str, Any] | None = None


class _Prefixed(Weights):
    """`w` with the decoder's weights under another prefix than "model." (`LlmConfig.weight_prefix`)."""

    def __init__(self, w: Weights, prefix: str):
        super().__init__(w.weights, w._widen)
        self.prefix = prefix

    def has(self, name: str, prefix: str = "model.") -> bool:
        return super().has(name, self.prefix if prefix == "model." else prefix)

    def get(self, name: str, *shape: int, prefix: str = "model.", required: bool = True) -> Any:
        return super().get(name, *shape, prefix=self.prefix if prefix == "model." else prefix, required=required)


def decoder_weights(w: Weights, cfg: LlmConfig) -> DecoderWeights:
    """The weights of `cfg`'s decoder, read from `w` by their Hugging Face names."""
    if cfg.weight_prefix != "model.":
        w = _Prefixed(w, cfg.weight_prefix)
    if cfg.family in PLE_GEMMA:
        return _ple_gemma_weights(w, cfg)
    hidden, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    nq, nkv = cfg.num_heads * d, cfg.num_kv_heads * d
    embed = w.get("embed_tokens.weight", cfg.vocab_size, hidden)
    final = {"phi": "final_layernorm", "lfm2": "embedding_norm"}.get(cfg.family, "norm")
    final_norm = w.get(f"{final}.weight", hidden)
    lm_head = None if cfg.tie_word_embeddings else w.get("lm_head.weight", cfg.vocab_size, hidden, prefix="")
    layers = []
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        if cfg.family == "lfm2":
            layers.append(_lfm2_layer(w, cfg, p, cfg.layer_types[i] == "conv", cfg.moe_layers[i]))
            continue
        if cfg.family in LINEAR_ATTENTION:
            layers.append(_linear_family_layer(w, cfg, p, i))
            continue
        layer: dict[str, Any] = {}
        if cfg.family == "phi3":
            qkv = w.get(p + "self_attn.qkv_proj.weight", nq + 2 * nkv, hidden)
            layer.update(q=qkv[:nq], k=qkv[nq:nq + nkv], v=qkv[nq + nkv:], q_bias=None, k_bias=None, v_bias=None)
            layer["o_bias"] = w.get(p + "self_attn.o_proj.bias", hidden, required=False)
        else:
            out = "dense" if cfg.family == "phi" else "o_proj"
            for n, rows in zip("qkv", (nq, nkv, nkv)):
                layer[n] = w.get(p + f"self_attn.{n}_proj.weight", rows, hidden)
            for n, name, rows in zip("qkvo", ("q_proj", "k_proj", "v_proj", out), (nq, nkv, nkv, hidden)):
                layer[f"{n}_bias"] = w.get(p + f"self_attn.{name}.bias", rows, required=False)
        layer["o"] = w.get(p + ("self_attn.dense.weight" if cfg.family == "phi" else "self_attn.o_proj.weight"),
                           hidden, nq)
        if cfg.attention_sinks:  # gpt-oss: one logit per query head beside the cache slots
            layer["sinks"] = w.get(p + "self_attn.sinks", cfg.num_heads)
        if cfg.moe_layers[i]:
            layer["moe"] = experts(w, cfg, p)
        elif cfg.family == "phi3":
            gate_up = w.get(p + "mlp.gate_up_proj.weight", 2 * inter, hidden)
            layer.update(gate=gate_up[:inter], up=gate_up[inter:], gate_bias=None, up_bias=None, down_bias=None)
        elif cfg.family == "phi":  # fc2(act(fc1(x))), with biases
            layer.update(gate=None, gate_bias=None, up=w.get(p + "mlp.fc1.weight", inter, hidden),
                         up_bias=w.get(p + "mlp.fc1.bias", inter), down_bias=w.get(p + "mlp.fc2.bias", hidden))
        else:
            for n, shape in (("gate", (inter, hidden)), ("up", (inter, hidden))):
                layer[n] = w.get(p + f"mlp.{n}_proj.weight", *shape)
            for n, rows in (("gate", inter), ("up", inter), ("down", hidden)):
                layer[f"{n}_bias"] = w.get(p + f"mlp.{n}_proj.bias", rows, required=False)
        if not cfg.moe_layers[i]:
            layer["down"] = w.get(p + ("mlp.fc2.weight" if cfg.family == "phi" else "mlp.down_proj.weight"),
                                  hidden, inter)
        layer.update(_qk_norms(w, cfg, p))
        if cfg.post_norms:
            norms = {"post_attention": "post_attention_layernorm", "post_mlp": "post_feedforward_layernorm"}
        else:
            norms = {"input": "input_layernorm"}
            if not cfg.parallel_residual:
                norms["post_attention"] = "post_attention_layernorm"
        if cfg.sandwich_norms:
            norms.update(pre_mlp="pre_feedforward_layernorm", post_mlp="post_feedforward_layernorm")
        for key, name in norms.items():
            layer[f"{key}_norm"] = w.get(p + f"{name}.weight", hidden)
            if cfg.layer_norm:
                layer[f"{key}_norm_bias"] = w.get(p + f"{name}.bias", hidden)
        layers.append(layer)
    read = DecoderWeights(embed, final_norm, lm_head, layers)
    if cfg.layer_norm:
        read.final_norm_bias = w.get(f"{final}.bias", hidden)
    if cfg.lm_head_bias:
        read.lm_head_bias = w.get("lm_head.bias", cfg.vocab_size, prefix="")
    return read


def _ple_gemma_weights(w: Weights, cfg: LlmConfig) -> DecoderWeights:
    """Gemma 4's and Gemma 3n's decoder: each layer's attention (`q`, `o`, `q_norm`; `k`, `v`, `k_norm` only on
    layers with their own caches, `v` None where Gemma 4 takes values from the key projection), its four
    sandwich norms, MLP, per-layer-embedding gate `ple_gate` [P, H], `ple_proj` [H, P] and `ple_norm`, Gemma 4's
    `layer_scalar` [1] and experts (`moe`: router, its scale and per-expert scales, each expert's [out, in]
    gate, up and down, with three more norms); Gemma 3n's AltUp (`altup_*`) and LAuReL (`laurel_*`) weights."""
    hidden, layers, per_layer = cfg.hidden_size, cfg.num_layers, cfg.per_layer_input_size
    embed = w.get("embed_tokens.weight", cfg.vocab_size, hidden)
    extra: dict[str, Any] = {}
    if per_layer:
        extra.update(ple_embed=w.get("embed_tokens_per_layer.weight", cfg.per_layer_vocab_size, layers * per_layer),
                     ple_projection=w.get("per_layer_model_projection.weight", layers * per_layer, hidden),
                     ple_norm=w.get("per_layer_projection_norm.weight", per_layer))
    streams = cfg.altup_inputs
    if streams:
        for key, name in (("altup_in", "altup_projections"), ("altup_out", "altup_unembed_projections")):
            extra[key] = [w.get(f"{name}.{i}.weight", hidden, hidden) for i in range(streams - 1)]
    out = []
    for i in range(layers):
        p = f"layers.{i}."
        d, kv, inter = cfg.layer_head_dim(i), cfg.layer_kv_head_count(i), cfg.layer_intermediate_size(i)
        layer: dict[str, Any] = {
            "q": w.get(p + "self_attn.q_proj.weight", cfg.num_heads * d, hidden),
            "o": w.get(p + "self_attn.o_proj.weight", hidden, cfg.num_heads * d),
            "q_norm": w.get(p + "self_attn.q_norm.weight", d),
            "gate": w.get(p + "mlp.gate_proj.weight", inter, hidden),
            "up": w.get(p + "mlp.up_proj.weight", inter, hidden),
            "down": w.get(p + "mlp.down_proj.weight", hidden, inter),
            "gate_bias": None, "up_bias": None, "down_bias": None}
        if cfg.kv_owner(i) == i:
            layer["k"] = w.get(p + "self_attn.k_proj.weight", kv * d, hidden)
            layer["k_norm"] = w.get(p + "self_attn.k_norm.weight", d)
            k_eq_v = bool(cfg.k_eq_v_layers) and cfg.k_eq_v_layers[i]
            layer["v"] = None if k_eq_v else w.get(p + "self_attn.v_proj.weight", kv * d, hidden)
        for key, name in (("input", "input_layernorm"), ("post_attention", "post_attention_layernorm"),
                          ("pre_mlp", "pre_feedforward_layernorm"), ("post_mlp", "post_feedforward_layernorm")):
            layer[f"{key}_norm"] = w.get(p + f"{name}.weight", hidden)
        if per_layer:
            layer.update(ple_gate=w.get(p + "per_layer_input_gate.weight", per_layer, hidden),
                         ple_proj=w.get(p + "per_layer_projection.weight", hidden, per_layer),
                         ple_norm=w.get(p + "post_per_layer_input_norm.weight", hidden))
        if cfg.family == "gemma4":
            layer["layer_scalar"] = w.get(p + "layer_scalar", 1)
        if cfg.moe_layers[i]:  # Gemma 4's experts beside the MLP, their router and three more norms
            experts, inner = cfg.num_experts, cfg.moe_intermediate_size
            gate_up = w.get(p + "experts.gate_up_proj", experts, 2 * inner, hidden)
            layer["moe"] = {"router": w.get(p + "router.proj.weight", experts, hidden),
                            "router_scale": w.get(p + "router.scale", hidden),
                            "expert_scale": w.get(p + "router.per_expert_scale", experts),
                            "gate": gate_up[:, :inner], "up": gate_up[:, inner:],
                            "down": w.get(p + "experts.down_proj", experts, hidden, inner)}
            for key, name in (("post_mlp_1", "post_feedforward_layernorm_1"),
                              ("pre_moe", "pre_feedforward_layernorm_2"),
                              ("post_moe", "post_feedforward_layernorm_2")):
                layer[f"{key}_norm"] = w.get(p + f"{name}.weight", hidden)
        if streams:
            layer.update(altup_scale=w.get(p + "altup.correct_output_scale", hidden),
                         altup_correct=w.get(p + "altup.correction_coefs.weight", streams, streams),
                         altup_predict=w.get(p + "altup.prediction_coefs.weight", streams * streams, streams),
                         altup_router=w.get(p + "altup.modality_router.weight", streams, hidden),
                         altup_router_norm=w.get(p + "altup.router_norm.weight", hidden))
        if cfg.laurel_rank:
            layer.update(laurel_left=w.get(p + "laurel.linear_left.weight", cfg.laurel_rank, hidden),
                         laurel_right=w.get(p + "laurel.linear_right.weight", hidden, cfg.laurel_rank),
                         laurel_norm=w.get(p + "laurel.post_laurel_norm.weight", hidden))
        out.append(layer)
    lm_head = None if cfg.tie_word_embeddings else w.get("lm_head.weight", cfg.vocab_size, hidden, prefix="")
    return DecoderWeights(embed, w.get("norm.weight", hidden), lm_head, out, extra=extra)


def _lfm2_layer(w: Weights, cfg: LlmConfig, p: str, conv: bool, moe: bool) -> dict[str, Any]:
    """An LFM2 layer: a gated short convolution (`conv_in` [3 * hidden, hidden], `conv_w` [K, hidden]: each
    channel's taps, oldest first; `conv_out`) or attention with RMSNorm on each query and key head; then its
    SwiGLU MLP (w1 gate, w3 up, w2 down) or, in LFM2-MoE, its routed experts (`moe`); `input_norm`
    (operator_norm) and `post_attention_norm` (ffn_norm)."""
    hidden, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    nq, nkv = cfg.num_heads * d, cfg.num_kv_heads * d
    layer: dict[str, Any] = {}
    if conv:
        bias = cfg.conv_bias
        taps = w.get(p + "conv.conv.weight", hidden, 1, cfg.conv_kernel)
        layer.update(conv_in=w.get(p + "conv.in_proj.weight", 3 * hidden, hidden),
                     conv_in_bias=w.get(p + "conv.in_proj.bias", 3 * hidden) if bias else None,
                     conv_w=taps[:, 0, :].T, conv_bias=w.get(p + "conv.conv.bias", hidden) if bias else None,
                     conv_out=w.get(p + "conv.out_proj.weight", hidden, hidden),
                     conv_out_bias=w.get(p + "conv.out_proj.bias", hidden) if bias else None)
    else:
        for n, rows in zip("qkv", (nq, nkv, nkv)):
            layer[n] = w.get(p + f"self_attn.{n}_proj.weight", rows, hidden)
            layer[f"{n}_bias"] = None
        layer.update(o=w.get(p + "self_attn.out_proj.weight", hidden, nq), o_bias=None,
                     q_norm=w.get(p + "self_attn.q_layernorm.weight", d),
                     k_norm=w.get(p + "self_attn.k_layernorm.weight", d))
    if moe:
        layer["moe"] = _lfm2_experts(w, cfg, p)
    else:
        layer.update(gate=w.get(p + "feed_forward.w1.weight", inter, hidden),
                     up=w.get(p + "feed_forward.w3.weight", inter, hidden),
                     down=w.get(p + "feed_forward.w2.weight", hidden, inter), gate_bias=None, up_bias=None,
                     down_bias=None)
    layer.update(input_norm=w.get(p + "operator_norm.weight", hidden),
                 post_attention_norm=w.get(p + "ffn_norm.weight", hidden))
    return layer


def _lfm2_experts(w: Weights, cfg: LlmConfig, p: str) -> dict[str, Any]:
    """LFM2-MoE's routed experts, as `experts` gives them: the `router` (`feed_forward.gate`), each expert's
    w1 (gate), w3 (up) and w2 (down) from a checkpoint or the fused tables of a model in memory, and the
    `expert_bias` [E] added to the sigmoid scores to choose the experts (when `use_expert_bias`)."""
    hidden, count, inter = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    f = p + "feed_forward."
    params: dict[str, Any] = {"router": w.get(f + "gate.weight", count, hidden)}
    if w.has(f + "experts.gate_up_proj"):
        gate_up = w.get(f + "experts.gate_up_proj", count, 2 * inter, hidden)
        params.update(gate=gate_up[:, :inter], up=gate_up[:, inter:],
                      down=w.get(f + "experts.down_proj", count, hidden, inter))
    else:
        for role, n, shape in (("gate", "w1", (inter, hidden)), ("up", "w3", (inter, hidden)),
                               ("down", "w2", (hidden, inter))):
            params[role] = [w.get(f + f"experts.{e}.{n}.weight", *shape) for e in range(count)]
    if cfg.expert_bias:
        params["expert_bias"] = w.get(f + "expert_bias", count)
    return params


def _linear_family_layer(w: Weights, cfg: LlmConfig, p: str, index: int) -> dict[str, Any]:
    """A Qwen3-Next or Qwen 3.5 layer: gated DeltaNet (`_gated_delta_net`) or attention whose query projection
    also gives the output gate (`q` and `q_gate`, each [heads * D, hidden], from q_proj's rows [heads, 2 * D]),
    with (1 + w) RMSNorm on each query and key head; then routed experts with a shared expert (`moe`) or a
    dense SwiGLU MLP; `input_norm` and `post_attention_norm`."""
    hidden, d, heads = cfg.hidden_size, cfg.head_dim, cfg.num_heads
    layer: dict[str, Any] = {}
    if cfg.layer_types[index] == "linear_attention":
        layer.update(_gated_delta_net(w, cfg, p + "linear_attn."))
    else:
        nkv = cfg.num_kv_heads * d
        q_gate = np.asarray(w.get(p + "self_attn.q_proj.weight", 2 * heads * d, hidden)).reshape(heads, 2 * d, hidden)
        layer.update(q=np.ascontiguousarray(q_gate[:, :d].reshape(heads * d, hidden)),
                     q_gate=np.ascontiguousarray(q_gate[:, d:].reshape(heads * d, hidden)),
                     k=w.get(p + "self_attn.k_proj.weight", nkv, hidden),
                     v=w.get(p + "self_attn.v_proj.weight", nkv, hidden),
                     o=w.get(p + "self_attn.o_proj.weight", hidden, heads * d),
                     q_norm=w.get(p + "self_attn.q_norm.weight", d), k_norm=w.get(p + "self_attn.k_norm.weight", d))
        for n, rows in zip("qkvo", (heads * d, nkv, nkv, hidden)):
            layer[f"{n}_bias"] = None
        if cfg.qkv_bias:
            raise UnsupportedModelError(f"config.attention_bias is set: the exporter builds {cfg.model_type}'s "
                                        "gated attention without biases")
    if cfg.moe_layers[index]:
        layer["moe"] = experts(w, cfg, p)
    else:
        inter = cfg.intermediate_size
        layer.update(gate=w.get(p + "mlp.gate_proj.weight", inter, hidden),
                     up=w.get(p + "mlp.up_proj.weight", inter, hidden),
                     down=w.get(p + "mlp.down_proj.weight", hidden, inter), gate_bias=None, up_bias=None,
                     down_bias=None)
    layer.update(input_norm=w.get(p + "input_layernorm.weight", hidden),
                 post_attention_norm=w.get(p + "post_attention_layernorm.weight", hidden))
    return layer


def _gated_delta_net(w: Weights, cfg: LlmConfig, p: str) -> dict[str, Any]:
    """A gated DeltaNet layer's weights: `lin_qkv` [2 * Kd + Vd, hidden] (the queries of every key head, then the
    keys, then the values: the order of the convolution's channels), `lin_z` [Vd, hidden] (the output gate),
    `lin_b` and `lin_a` [value heads, hidden] (beta and the decay's input), `conv_w` [K, 2 * Kd + Vd] (each
    channel's taps, oldest first), `dt_bias`, `A_log` [value heads], `lin_norm` [value dim] (the gated RMSNorm's
    weight) and `lin_out` [hidden, Vd]. Kd = key heads * key dim, Vd = value heads * value dim. Qwen3-Next's fused
    in_proj_qkvz and in_proj_ba hold these per key head (q, k, then the values and gates of the key head's group
    of value heads); Qwen 3.5 keeps them apart."""
    hidden, nk, nv = cfg.hidden_size, cfg.linear_key_heads, cfg.linear_value_heads
    dk, dv, group = cfg.linear_key_dim, cfg.linear_value_dim, nv // nk
    kd, vd = nk * dk, nv * dv
    conv_dim = 2 * kd + vd
    if cfg.family == "qwen3_next":
        qkvz = np.asarray(w.get(p + "in_proj_qkvz.weight", 2 * kd + 2 * vd, hidden)).reshape(nk, -1, hidden)
        cuts = np.cumsum([dk, dk, group * dv])
        q, k, v, z = np.split(qkvz, cuts, axis=1)
        ba = np.asarray(w.get(p + "in_proj_ba.weight", 2 * nv, hidden)).reshape(nk, 2 * group, hidden)
        qkv = np.concatenate([part.reshape(-1, hidden) for part in (q, k, v)])
        z, b, a = (np.ascontiguousarray(t.reshape(-1, hidden)) for t in (z, ba[:, :group], ba[:, group:]))
    else:
        qkv = w.get(p + "in_proj_qkv.weight", conv_dim, hidden)
        z = w.get(p + "in_proj_z.weight", vd, hidden)
        b, a = (w.get(p + f"in_proj_{n}.weight", nv, hidden) for n in "ba")
    taps = w.get(p + "conv1d.weight", conv_dim, 1, cfg.linear_conv_kernel)
    return {"lin_qkv": qkv, "lin_z": z, "lin_b": b, "lin_a": a,
            "conv_w": np.ascontiguousarray(np.asarray(taps)[:, 0, :].T), "dt_bias": w.get(p + "dt_bias", nv),
            "A_log": w.get(p + "A_log", nv), "lin_norm": w.get(p + "norm.weight", dv),
            "lin_out": w.get(p + "out_proj.weight", hidden, vd)}


def _gpt_oss_experts(w: Weights, cfg: LlmConfig, p: str) -> dict[str, Any]:
    """gpt-oss's experts, whose tables are stored [E, in, out] with gate and up interleaved (gate the even
    columns, up the odd ones), and biases: as `experts` gives them ([out, in] per expert), with `router_bias`
    [E] and each projection's bias per expert (`gate_bias`, `up_bias` [E, I], `down_bias` [E, H])."""
    hidden, count, inter = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    gate_up = w.get(p + "mlp.experts.gate_up_proj", count, hidden, 2 * inter)
    gate_up_bias = w.get(p + "mlp.experts.gate_up_proj_bias", count, 2 * inter)
    return {"router": w.get(p + "mlp.router.weight", count, hidden), "router_bias": w.get(p + "mlp.router.bias", count),
            "gate": gate_up[:, :, 0::2].swapaxes(1, 2), "up": gate_up[:, :, 1::2].swapaxes(1, 2),
            "down": w.get(p + "mlp.experts.down_proj", count, inter, hidden).swapaxes(1, 2),
            "gate_bias": gate_up_bias[:, 0::2], "up_bias": gate_up_bias[:, 1::2],
            "down_bias": w.get(p + "mlp.experts.down_proj_bias", count, hidden)}


def _qk_norms(w: Weights, cfg: LlmConfig, p: str) -> dict[str, Any]:
    """The query and key norms of a layer: RMSNorm weights per head [D] (Qwen 3, Gemma 3) or over the whole
    projections (OLMo 2, [heads * D]); LayerNorm weights and biases shared by the heads (Phi, [D]); or one
    LayerNorm weight per head without bias (StableLM: a list of [D])."""
    d = cfg.head_dim
    if cfg.family == "phi":
        if not cfg.qk_norm:
            return {"q_norm": None, "k_norm": None}
        return {f"{n}_norm{part}": w.get(p + f"self_attn.{n}_layernorm.{name}", d)
                for n in "qk" for part, name in (("", "weight"), ("_bias", "bias"))}
    if cfg.family == "stablelm":
        if not cfg.qk_norm:
            return {"q_norm": None, "k_norm": None}
        return {f"{n}_norm": [w.get(p + f"self_attn.{n}_layernorm.norms.{h}.weight", d) for h in range(heads)]
                for n, heads in (("q", cfg.num_heads), ("k", cfg.num_kv_heads))}
    if cfg.qk_norm_whole:
        return {"q_norm": w.get(p + "self_attn.q_norm.weight", cfg.num_heads * d),
                "k_norm": w.get(p + "self_attn.k_norm.weight", cfg.num_kv_heads * d)}
    return {"q_norm": w.get(p + "self_attn.q_norm.weight", d, required=False),
            "k_norm": w.get(p + "self_attn.k_norm.weight", d, required=False)}


def experts(w: Weights, cfg: LlmConfig, p: str) -> dict[str, Any]:
    """A routed-experts layer's weights: the `router` [E, H]; `gate`, `up`, `down`: each expert's projection in
    Hugging Face's Linear layout ([out, in]), as E matrices (or one [E, out, in] array); with a shared expert,
    `shared` (an MLP's weights by role) and `shared_gate` [1, H]."""
    hidden, count, inter = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    if cfg.family == "gpt_oss":
        return _gpt_oss_experts(w, cfg, p)
    if cfg.family == "mixtral" and not w.has(p + "mlp.gate.weight"):
        router = w.get(p + "block_sparse_moe.gate.weight", count, hidden)
    else:
        router = w.get(p + "mlp.gate.weight", count, hidden)
    if w.has(p + "mlp.experts.gate_up_proj"):  # the experts fused, as transformers holds them in memory
        gate_up = w.get(p + "mlp.experts.gate_up_proj", count, 2 * inter, hidden)
        mats: tuple[Any, ...] = (gate_up[:, :inter], gate_up[:, inter:], w.get(p + "mlp.experts.down_proj", count, hidden, inter))
    elif cfg.family == "mixtral":  # Mixtral's checkpoints: w1 gate, w3 up, w2 down
        mats = tuple([w.get(p + f"block_sparse_moe.experts.{e}.{n}.weight", *shape) for e in range(count)]
                     for n, shape in (("w1", (inter, hidden)), ("w3", (inter, hidden)), ("w2", (hidden, inter))))
    else:
        mats = tuple([w.get(p + f"mlp.experts.{e}.{n}_proj.weight", *shape) for e in range(count)]
                     for n, shape in (("gate", (inter, hidden)), ("up", (inter, hidden)), ("down", (hidden, inter))))
    params = {"router": router, "gate": mats[0], "up": mats[1], "down": mats[2]}
    if cfg.shared_expert_intermediate_size:
        shared = cfg.shared_expert_intermediate_size
        params["shared"] = {
            "gate": w.get(p + "mlp.shared_expert.gate_proj.weight", shared, hidden),
            "up": w.get(p + "mlp.shared_expert.up_proj.weight", shared, hidden),
            "down": w.get(p + "mlp.shared_expert.down_proj.weight", hidden, shared),
            "gate_bias": None, "up_bias": None, "down_bias": None}
        params["shared_gate"] = w.get(p + "mlp.shared_expert_gate.weight", 1, hidden)
    return params
