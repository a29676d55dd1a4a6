"""Tiny Hugging Face causal LMs of every architecture the exporter takes, built from configs (random weights) with
the small trained BPE tokenizer of `litert_torch.generative.examples`, saved as model directories the exporter
reads."""

from __future__ import annotations

import os

import torch

from litert_torch.generative.examples import (  # noqa: F401 - the tests use them from here
    CHAT_TEMPLATE, CORPUS, common_config, spread_weights, tokenizer,
)


ARCHS = ("llama", "smollm3", "granite", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "qwen3_moe",
         "mixtral", "qwen2_moe")
# Architectures only the direct builder builds (the traced one refuses them), with config variants
DIRECT_ARCHS = ("phi", "phi_qk_norm", "stablelm", "stablelm_parallel", "olmo2", "olmo3", "lfm2", "gpt_oss",
                "lfm2_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma4", "gemma4_moe", "gemma3n")
# Gemma 4 / 3n: two sliding-window layers and two global ones, the last two sharing the caches of the first two
_GEMMA_PLE = dict(num_hidden_layers=4, head_dim=16, sliding_window=6, hidden_size_per_layer_input=8,
                  num_kv_shared_layers=2,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])


def config(arch: str, vocab_size: int, **overrides):
    import transformers as T

    common = common_config(vocab_size)
    if arch == "llama":
        cfg = T.LlamaConfig(**common, tie_word_embeddings=True)
    elif arch == "smollm3":  # its second layer has no RoPE
        cfg = T.SmolLM3Config(**common, no_rope_layers=[1, 0], tie_word_embeddings=True)
    elif arch == "granite":  # multipliers away from 1 at each of its four places
        cfg = T.GraniteConfig(**common, embedding_multiplier=3.0, attention_multiplier=0.2, residual_multiplier=0.5,
                              logits_scaling=4.0)
    elif arch == "qwen2":
        cfg = T.Qwen2Config(**common)
    elif arch == "qwen3":
        cfg = T.Qwen3Config(**common, head_dim=16)
    elif arch == "phi3":
        cfg = T.Phi3Config(**common)
    elif arch == "gemma":
        cfg = T.GemmaConfig(**common, head_dim=16)
    elif arch == "gemma2":
        # soft caps low enough that the tanh bends the random model's scores (it changes the greedy
        # continuation) and logits; untied, as a tied random Gemma 2 repeats a token or two
        cfg = T.Gemma2Config(**{**common, "tie_word_embeddings": False}, head_dim=16, sliding_window=6,
                             query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention"],
                             attn_logit_softcapping=1.0, final_logit_softcapping=3.0)
    elif arch == "gemma3":
        cfg = T.Gemma3TextConfig(**common, head_dim=16, sliding_window=6, query_pre_attn_scalar=16,
                                 layer_types=["sliding_attention", "full_attention"])
    elif arch == "qwen3_moe":
        cfg = T.Qwen3MoeConfig(**common, head_dim=16, moe_intermediate_size=32, num_experts=4,
                               num_experts_per_tok=2, norm_topk_prob=True)
    elif arch == "qwen2_moe":  # its second layer dense (mlp_only_layers), the first with the shared expert
        cfg = T.Qwen2MoeConfig(**common, moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=4,
                               num_experts_per_tok=2, mlp_only_layers=[1])
    elif arch == "mixtral":
        cfg = T.MixtralConfig(**{**common, "intermediate_size": 32}, num_local_experts=4, num_experts_per_tok=2)
    elif arch in ("phi", "phi_qk_norm"):  # Phi-2: LayerNorm, half the features rotated, parallel attention + MLP
        cfg = T.PhiConfig(**common, qk_layernorm=arch == "phi_qk_norm")
    elif arch in ("stablelm", "stablelm_parallel"):  # a quarter of the features rotated
        cfg = T.StableLmConfig(**common, use_qkv_bias=True, qk_layernorm=arch == "stablelm",
                               use_parallel_residual=arch == "stablelm_parallel")
    elif arch == "olmo2":
        cfg = T.Olmo2Config(**common)
    elif arch == "olmo3":  # a sliding-window layer and a global one, each with its own RoPE base
        cfg = T.Olmo3Config(**common, sliding_window=6, layer_types=["sliding_attention", "full_attention"],
                            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                             "full_attention": {"rope_type": "default", "rope_theta": 500000.0}})
    elif arch == "lfm2":  # convolution layers around an attention layer
        cfg = T.Lfm2Config(**{**common, "num_hidden_layers": 3}, layer_types=["conv", "full_attention", "conv"])
    elif arch == "lfm2_moe":  # LFM2's layers; a dense MLP in the first, sigmoid-routed experts in the others
        cfg = T.Lfm2MoeConfig(**{**common, "num_hidden_layers": 3}, layer_types=["conv", "full_attention", "conv"],
                              moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_dense_layers=1,
                              routed_scaling_factor=1.5)
    elif arch in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        # gated DeltaNet layers around a gated attention layer (a quarter of each head rotated); two value heads
        # per query/key head
        linear = dict(head_dim=16, layer_types=["linear_attention", "full_attention", "linear_attention"],
                      linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=8,
                      linear_num_key_heads=2, linear_num_value_heads=4)
        experts = dict(moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=4,
                       num_experts_per_tok=2)
        size = {**common, "num_hidden_layers": 3}
        if arch == "qwen3_next":  # routed experts (top 3) with a shared expert, a dense MLP in the attention layer
            # (with the top 2, its greedy continuation reaches the stop token at the 8th token)
            cfg = T.Qwen3NextConfig(**size, **linear, **{**experts, "num_experts_per_tok": 3}, mlp_only_layers=[1])
        elif arch == "qwen3_5":
            cfg = T.Qwen3_5TextConfig(**size, **linear)
        else:
            cfg = T.Qwen3_5MoeTextConfig(**size, **linear, **experts)
    elif arch == "gpt_oss":  # attention sinks, experts with biases, a sliding-window layer and a global one
        cfg = T.GptOssConfig(**{**common, "intermediate_size": 32}, head_dim=16, num_local_experts=4,
                             num_experts_per_tok=2, sliding_window=6,
                             layer_types=["sliding_attention", "full_attention"])
    elif arch == "gemma4":  # global layers with their own head size and one key/value head (values = keys),
        # proportional RoPE, double-wide MLPs on the sharing layers
        cfg = T.Gemma4TextConfig(**{**common, **_GEMMA_PLE}, vocab_size_per_layer_input=vocab_size,
                                 global_head_dim=32, attention_k_eq_v=True, num_global_key_value_heads=1,
                                 use_double_wide_mlp=True, final_logit_softcapping=3.0)
    elif arch == "gemma4_moe":  # routed experts beside every MLP (Gemma 4 26B-A4B's layers)
        cfg = T.Gemma4TextConfig(**{**common, **_GEMMA_PLE, "hidden_size_per_layer_input": 0,
                                    "num_kv_shared_layers": 0}, global_head_dim=32, enable_moe_block=True,
                                 num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                                 final_logit_softcapping=3.0)
    elif arch == "gemma3n":  # per-layer MLP sizes, the first two layers sparse, a per-layer-embedding table
        # shorter than the vocabulary (its tokens past it read row 0)
        cfg = T.Gemma3nTextConfig(**{**common, **_GEMMA_PLE, "intermediate_size": [128, 96, 128, 64]},
                                  vocab_size_per_layer_input=vocab_size - 32, laurel_rank=8,
                                  activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0], final_logit_softcapping=3.0)
    else:
        raise ValueError(arch)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def model(arch: str, vocab_size: int, seed: int = 0, **overrides):
    """A randomly initialised model whose greedy continuation is not degenerate (weights drawn wider than the
    config's initializer, so that the logits are spread; norm scales moved off their initial value, so that
    they matter)."""
    import transformers as T

    torch.manual_seed(seed)
    hf = T.AutoModelForCausalLM.from_config(config(arch, vocab_size, **overrides)).eval()
    # Gemma scales its embeddings by sqrt(hidden): narrower weights, except for Gemma 1, whose residual stream
    # (no norms after attention and MLP) is then all embedding and repeats one token
    std = {"gemma": 0.3, "gemma2": 0.1, "gemma3": 0.05, "gemma4": 0.05, "gemma4_moe": 0.05, "gemma3n": 0.05}.get(arch, 0.15)
    hf = spread_weights(hf, std)
    with torch.no_grad():
        for name, buffer in hf.named_buffers():
            if name.endswith("expert_bias"):  # LFM2-MoE's routing bias (zero at init): large enough to move choices
                buffer.normal_(0.0, 0.3)
    if arch in ("gemma4", "gemma4_moe"):  # each layer's output scale (a buffer, 1 as initialised) away from 1
        with torch.no_grad():
            for i, layer in enumerate(hf.model.layers):
                layer.layer_scalar.fill_(0.75 + 0.125 * i)
    return hf


def save(directory: str, arch: str, seed: int = 0, **overrides) -> str:
    """Save model + tokenizer into `directory` (save_pretrained) and return it."""
    tok = tokenizer()
    hf = model(arch, len(tok), seed, **overrides)
    hf.generation_config.eos_token_id = tok.eos_token_id
    os.makedirs(directory, exist_ok=True)
    hf.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def hf_rope_tables(hf_config, cfg, length: int) -> dict:
    """The reference RoPE tables: cos/sin [length, R] per layer type, from transformers' own RoPE functions as
    the model's rotary module uses them (the exporter's `rope.rope_tables` holds one half of these rows,
    computed with numpy)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    positions = torch.arange(length, dtype=torch.float32)
    tables = {}
    for layer_type in sorted(set(cfg.layer_types)):
        params, kwargs = hf_config.rope_parameters, {}
        if cfg.family == "gemma3":  # one RoPE per layer type
            params, kwargs = params.get(layer_type), {"layer_type": layer_type}
        rope_type = params.get("rope_type", "default")
        if rope_type == "default":  # theta^(-2i/d) over the rotated features (Phi-3 rotates a fraction of them)
            factor = params.get("partial_rotary_factor", 1.0) if cfg.family == "phi3" else 1.0
            dim = int(cfg.head_dim * factor)
            inv_freq = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            scaling = 1.0
        else:
            inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, None, **kwargs)
        freqs = positions[:, None] * inv_freq.to(torch.float32)[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        tables[layer_type] = (angles.cos() * scaling, angles.sin() * scaling)
    return tables
