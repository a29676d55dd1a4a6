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

from litert_torch.generative.config import LlmConfig, UnsupportedModelError


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
    absent), `q_norm`, `k_norm` (None when absent), `input_norm`, `post_attention_norm` (and `pre_mlp_norm`,
    `post_mlp_norm` with sandwich norms), and either the MLP's `gate`, `up`, `down` with their biases, or `moe`
    (`experts`)."""

    embed: Any
    final_norm: Any
    lm_head: Any  # None when tied to the embedding
    layers: list[dict[str, Any]]


def decoder_weights(w: Weights, cfg: LlmConfig) -> DecoderWeights:
    """The weights of `cfg`'s decoder, read from `w` by their Hugging Face names."""
    hidden, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    nq, nkv = cfg.num_heads * d, cfg.num_kv_heads * d
    embed = w.get("embed_tokens.weight", cfg.vocab_size, hidden)
    final_norm = w.get("norm.weight", hidden)
    lm_head = None if cfg.tie_word_embeddings else w.get("lm_head.weight", cfg.vocab_size, hidden, prefix="")
    layers = []
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        layer: dict[str, Any] = {}
        if cfg.family == "phi3":
            qkv = w.get(p + "self_attn.qkv_proj.weight", nq + 2 * nkv, hidden)
            layer.update(q=qkv[:nq], k=qkv[nq:nq + nkv], v=qkv[nq + nkv:], q_bias=None, k_bias=None, v_bias=None)
            layer["o_bias"] = w.get(p + "self_attn.o_proj.bias", hidden, required=False)
        else:
            for n, rows in zip("qkv", (nq, nkv, nkv)):
                layer[n] = w.get(p + f"self_attn.{n}_proj.weight", rows, hidden)
            for n, rows in zip("qkvo", (nq, nkv, nkv, hidden)):
                layer[f"{n}_bias"] = w.get(p + f"self_attn.{n}_proj.bias", rows, required=False)
        layer["o"] = w.get(p + "self_attn.o_proj.weight", hidden, nq)
        if cfg.moe_layers[i]:
            layer["moe"] = experts(w, cfg, p)
        elif cfg.family == "phi3":
            gate_up = w.get(p + "mlp.gate_up_proj.weight", 2 * inter, hidden)
            layer.update(gate=gate_up[:inter], up=gate_up[inter:], gate_bias=None, up_bias=None, down_bias=None)
        else:
            for n, shape in (("gate", (inter, hidden)), ("up", (inter, hidden))):
                layer[n] = w.get(p + f"mlp.{n}_proj.weight", *shape)
            for n, rows in (("gate", inter), ("up", inter), ("down", hidden)):
                layer[f"{n}_bias"] = w.get(p + f"mlp.{n}_proj.bias", rows, required=False)
        if not cfg.moe_layers[i]:
            layer["down"] = w.get(p + "mlp.down_proj.weight", hidden, inter)
        layer["q_norm"] = w.get(p + "self_attn.q_norm.weight", d, required=False)
        layer["k_norm"] = w.get(p + "self_attn.k_norm.weight", d, required=False)
        norms = {"input": "input_layernorm", "post_attention": "post_attention_layernorm"}
        if cfg.sandwich_norms:
            norms.update(pre_mlp="pre_feedforward_layernorm", post_mlp="post_feedforward_layernorm")
        for key, name in norms.items():
            layer[f"{key}_norm"] = w.get(p + f"{name}.weight", hidden)
        layers.append(layer)
    return DecoderWeights(embed, final_norm, lm_head, layers)


def experts(w: Weights, cfg: LlmConfig, p: str) -> dict[str, Any]:
    """A routed-experts layer's weights: the `router` [E, H]; `gate`, `up`, `down`: each expert's projection in
    Hugging Face's Linear layout ([out, in]), as E matrices (or one [E, out, in] array); with a shared expert,
    `shared` (an MLP's weights by role) and `shared_gate` [1, H]."""
    hidden, count, inter = cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size
    if cfg.family == "mixtral" and not w.has(p + "mlp.gate.weight"):
        router = w.get(p + "block_sparse_moe.gate.weight", count, hidden)
    else:
        router = w.get(p + "mlp.gate.weight", count, hidden)
    if w.has(p + "mlp.experts.gate_up_proj"):  # the experts fused, as transformers holds them in memory
        gate_up = w.get(p + "mlp.experts.gate_up_proj", count, 2 * inter, hidden)
        mats = (gate_up[:, :inter], gate_up[:, inter:], w.get(p + "mlp.experts.down_proj", count, hidden, inter))
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
