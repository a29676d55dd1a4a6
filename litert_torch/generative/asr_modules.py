"""The PyTorch modules a Whisper model is converted from, around explicit caches:

    WhisperCrossKV   `input_features` [1, n_mels, 2 * S] -> per decoder layer i, `cross_k_i` [1, H, S, D] and
                     `cross_v_i` [1, H, D, S]: the encoder run once per utterance, its output projected by each
                     decoder layer's cross-attention key and value projections (values stored transposed)
    WhisperDecoder   `tokens` int32 [1, T], `input_pos` int32 [T] (consecutive positions), per layer the self-attention
                     caches `kv_cache_k_i` [1, H, C, D] and `kv_cache_v_i` [1, H, D, C] and the cross `cross_k_i`,
                     `cross_v_i` -> `logits` [1, 1, V] of the last token and the updated self-attention caches

Each self-attention cache is written at `input_pos` with one DYNAMIC_UPDATE_SLICE (`litert_torch.update_cache`) and
read under a mask that lets position p see the cache entries 0..p, so entries past p (stale or never written) never
count. The arithmetic is Hugging Face's Whisper decoder's (pre-LayerNorm layers, the query scaled before the
product, learned positions, the output projection tied or not as the model has it), so that the converted model's
greedy tokens are `generate`'s.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from litert_torch.lower.aten.llm_ops import embedding_lookup, update_cache


def cache_names(num_layers: int) -> list[str]:
    """The self-attention cache names, keys and values interleaved by layer."""
    return [f"kv_cache_{kind}_{i}" for i in range(num_layers) for kind in "kv"]


def cross_names(num_layers: int) -> list[str]:
    """The cross-attention key and value names, interleaved by layer."""
    return [f"cross_{kind}_{i}" for i in range(num_layers) for kind in "kv"]


class WhisperCrossKV(nn.Module):
    """The encoder and the cross-attention keys and values of every decoder layer (see the module docstring)."""

    def __init__(self, hf: Any):
        super().__init__()
        self.encoder = hf.model.encoder
        layers = hf.model.decoder.layers
        self.k = nn.ModuleList(layer.encoder_attn.k_proj for layer in layers)
        self.v = nn.ModuleList(layer.encoder_attn.v_proj for layer in layers)
        self.heads = int(hf.config.decoder_attention_heads)

    def forward(self, input_features: torch.Tensor) -> dict[str, torch.Tensor]:
        states = self.encoder(input_features=input_features).last_hidden_state  # [1, S, d]
        length = states.shape[1]
        out = {}
        for i, (k, v) in enumerate(zip(self.k, self.v)):
            out[f"cross_k_{i}"] = k(states).view(1, length, self.heads, -1).transpose(1, 2)  # [1, H, S, D]
            out[f"cross_v_{i}"] = v(states).view(1, length, self.heads, -1).permute(0, 2, 3, 1)  # [1, H, D, S]
        return out


class WhisperDecoder(nn.Module):
    """One decoder call over `T` tokens with the self-attention caches as state (see the module docstring)."""

    def __init__(self, hf: Any, cache_length: int):
        super().__init__()
        import litert_torch.lower  # noqa: F401 - registers the litert_torch ops

        decoder = hf.model.decoder
        self.embed = decoder.embed_tokens.weight
        self.positions = decoder.embed_positions.weight
        self.layers = decoder.layers
        self.norm = decoder.layer_norm
        self.proj = hf.proj_out
        self.heads = int(hf.config.decoder_attention_heads)
        self.cache_length = int(cache_length)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, **state: torch.Tensor) -> dict[str, torch.Tensor]:
        length = tokens.shape[1]
        x = embedding_lookup(self.embed, tokens) + embedding_lookup(self.positions, input_pos)[None]
        slots = torch.arange(self.cache_length, dtype=torch.int32)
        visible = slots[None, :] <= input_pos[:, None].to(torch.int32)  # [T, C]
        mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)
        start = input_pos[:1]  # the first position: the update is written there (one entry, never a full index)
        out = {}
        for i, layer in enumerate(self.layers):
            k_cache, v_cache = state[f"kv_cache_k_{i}"], state[f"kv_cache_v_{i}"]
            residual = x
            h = layer.self_attn_layer_norm(x)
            attn = layer.self_attn
            q = self._heads(attn.q_proj(h) * attn.scaling, length)  # [1, H, T, D]
            k = self._heads(attn.k_proj(h), length)
            v = self._heads(attn.v_proj(h), length)
            k_cache = update_cache(k_cache, k, start, 2)  # [1, H, C, D]
            v_cache = update_cache(v_cache, v.transpose(2, 3), start, 3)  # [1, H, D, C]
            x = residual + attn.out_proj(self._attend(q, k_cache, v_cache, mask, length))
            out[f"kv_cache_k_{i}"], out[f"kv_cache_v_{i}"] = k_cache, v_cache

            residual = x
            h = layer.encoder_attn_layer_norm(x)
            cross = layer.encoder_attn
            q = self._heads(cross.q_proj(h) * cross.scaling, length)
            x = residual + cross.out_proj(self._attend(q, state[f"cross_k_{i}"], state[f"cross_v_{i}"], None, length))

            residual = x
            h = layer.final_layer_norm(x)
            x = residual + layer.fc2(layer.activation_fn(layer.fc1(h)))
        logits = self.proj(self.norm(x[:, -1:]))
        return {"logits": logits, **out}

    def _heads(self, x: torch.Tensor, length: int) -> torch.Tensor:
        return x.view(1, length, self.heads, -1).transpose(1, 2)

    @staticmethod
    def _attend(q, keys, values_t, mask, length: int) -> torch.Tensor:
        """softmax(q k^T + mask) v over keys [1, H, S, D] and transposed values [1, H, D, S] -> [1, T, H * D]."""
        scores = torch.matmul(q, keys.transpose(2, 3))
        if mask is not None:
            scores = scores + mask
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, values_t.transpose(2, 3))  # [1, H, T, D]
        return out.transpose(1, 2).reshape(1, length, -1)


class MoonshineCrossKV(nn.Module):
    """Moonshine's encoder on `input_values` float32 [1, N] (raw 16 kHz samples, zero-padded) and
    `attention_mask` int32 [1, N] (1 for a real sample), and the cross-attention keys and values of every decoder
    layer (`cross_k_i` [1, H, S, D], `cross_v_i` [1, H, D, S]), with `cross_mask` float32 [1, 1, 1, S]: 0 for an
    encoder position the decoder attends to, the lowest float for one that comes from padding (the encoder
    downsamples the mask as Hugging Face's does)."""

    def __init__(self, hf: Any):
        super().__init__()
        self.encoder = hf.model.encoder
        layers = hf.model.decoder.layers
        self.k = nn.ModuleList(layer.encoder_attn.k_proj for layer in layers)
        self.v = nn.ModuleList(layer.encoder_attn.v_proj for layer in layers)
        self.heads = int(hf.config.decoder_num_key_value_heads)

    def forward(self, input_values: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        encoded = self.encoder(input_values, attention_mask=attention_mask)
        states = encoded.last_hidden_state  # [1, S, d]
        length = states.shape[1]
        keep = encoded.attention_mask.to(torch.bool)[:, None, None, :]  # [1, 1, 1, S]
        out = {"cross_mask": torch.where(keep, 0.0, torch.finfo(torch.float32).min)}
        for i, (k, v) in enumerate(zip(self.k, self.v)):
            out[f"cross_k_{i}"] = k(states).view(1, length, self.heads, -1).transpose(1, 2)
            out[f"cross_v_{i}"] = v(states).view(1, length, self.heads, -1).permute(0, 2, 3, 1)
        return out


class MoonshineDecoder(WhisperDecoder):
    """Moonshine's decoder over `T` tokens with the self-attention caches as state: Whisper's interface, with
    rotary positions (interleaved pairs on the first `partial_rotary_factor` of each head, computed from
    `input_pos`) instead of learned ones, bias-free LayerNorms, a gated MLP, and `cross_mask` on the
    cross-attention scores."""

    def __init__(self, hf: Any, cache_length: int):
        nn.Module.__init__(self)
        import litert_torch.lower  # noqa: F401 - registers the litert_torch ops

        decoder = hf.model.decoder
        self.embed = decoder.embed_tokens.weight
        self.rotary = decoder.rotary_emb
        self.layers = decoder.layers
        self.norm = decoder.norm
        self.proj = hf.proj_out
        self.heads = int(hf.config.decoder_num_attention_heads)
        self.cache_length = int(cache_length)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, **state: torch.Tensor) -> dict[str, torch.Tensor]:
        from transformers.models.moonshine.modeling_moonshine import apply_rotary_pos_emb

        length = tokens.shape[1]
        x = embedding_lookup(self.embed, tokens)
        cos, sin = self.rotary(x, position_ids=input_pos[None].to(torch.int64))
        slots = torch.arange(self.cache_length, dtype=torch.int32)
        visible = slots[None, :] <= input_pos[:, None].to(torch.int32)
        mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)
        start = input_pos[:1]
        out = {}
        for i, layer in enumerate(self.layers):
            residual = x
            h = layer.input_layernorm(x)
            attn = layer.self_attn
            q = self._heads(attn.q_proj(h), length)
            k = self._heads(attn.k_proj(h), length)
            v = self._heads(attn.v_proj(h), length)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            k_cache = update_cache(state[f"kv_cache_k_{i}"], k, start, 2)
            v_cache = update_cache(state[f"kv_cache_v_{i}"], v.transpose(2, 3), start, 3)
            x = residual + attn.o_proj(self._attend(q * attn.scaling, k_cache, v_cache, mask, length))
            out[f"kv_cache_k_{i}"], out[f"kv_cache_v_{i}"] = k_cache, v_cache

            residual = x
            h = layer.post_attention_layernorm(x)
            cross = layer.encoder_attn
            q = self._heads(cross.q_proj(h), length) * cross.scaling
            x = residual + cross.o_proj(self._attend(q, state[f"cross_k_{i}"], state[f"cross_v_{i}"],
                                                     state["cross_mask"], length))

            residual = x
            x = residual + layer.mlp(layer.final_layernorm(x))
        logits = self.proj(self.norm(x[:, -1:]))
        return {"logits": logits, **out}
