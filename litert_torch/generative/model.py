"""The decoder the LLM exporter traces: a Hugging Face causal LM rewritten around an explicit KV cache.

One module serves every signature. It takes `tokens` int32[1, T], `input_pos` int32[T] (the absolute position of
each token; positions are consecutive) and, per layer, `kv_cache_k_i` and `kv_cache_v_i` float32[1, KV, C, D] (C
the cache length, D the head size, KV the key/value heads: the first n positions of a head are one run of memory,
which is what attention over the filled part of the cache slices, `prefix.py`). It writes the new keys and values
at `input_pos` with one DYNAMIC_UPDATE_SLICE per cache (`litert_torch.update_cache`), attends over the whole cache
under a mask built from `input_pos` (causal, and windowed on sliding-window layers), and returns the updated caches
and, when asked, the logits of the last token. The cache tensors keep their names from input to output, so a
runtime can hand the same buffer to both.

The weights are the Hugging Face model's own tensors (shared, not copied, when they are float32: views of the
mapped safetensors files when read from a directory). The RoPE tables are the ones both builders take
(`rope.rope_tables`: computed once from the config as the Hugging Face model's rotary module computes them,
within float32 rounding), for positions 0..C-1 and gathered at `input_pos`. Grouped-query attention groups the
query heads of one key/value head into the rows of one matrix product: keys and values are never repeated.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from litert_torch.generative.config import DIRECT_ONLY, LlmConfig, UnsupportedModelError
from litert_torch.generative.layout import cache_shapes, kv_names, sequence_axis
from litert_torch.generative.weight_map import Weights, decoder_weights
from litert_torch.generative.routing import (  # noqa: F401 (expert_tiles re-exported)
    expert_tile_rows, expert_tiles, first_tile_rows, overflow_tiles)
from litert_torch.lower.aten.llm_ops import embedding_lookup, update_cache

log = logging.getLogger("litert_torch")

# A large negative score for masked-out keys: finite, so that no row is ever all -inf (softmax of such a row
# would be NaN); exp() of it relative to any real score is exactly 0 in float32.
MASKED = -1e30


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float, plus_one: bool):
        super().__init__()
        self.weight = _param(weight)
        self.eps, self.plus_one = eps, plus_one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (1.0 + self.weight) if self.plus_one else x * self.weight


class Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight = _param(weight)
        self.bias = _param(bias) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias)


def _param(t: torch.Tensor) -> nn.Parameter:
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    return nn.Parameter(t, requires_grad=False)


def _act(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "silu":
        return nn.functional.silu(x)
    if name == "gelu_tanh":
        return nn.functional.gelu(x, approximate="tanh")
    return nn.functional.gelu(x)


class MLP(nn.Module):
    def __init__(self, cfg: LlmConfig, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                 biases: tuple | None = None):
        super().__init__()
        gb, ub, db = biases or (None, None, None)
        self.gate, self.up, self.down = Linear(gate, gb), Linear(up, ub), Linear(down, db)
        self.activation = cfg.activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_act(self.activation, self.gate(x)) * self.up(x))


class SharedExpert(nn.Module):
    """Qwen2-MoE's MLP: the routed experts' output plus a shared expert's, the latter scaled by
    sigmoid(x . g) per token."""

    def __init__(self, routed: nn.Module, shared: MLP, gate: torch.Tensor):
        super().__init__()
        self.routed, self.shared, self.gate = routed, shared, Linear(gate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.routed(x) + torch.sigmoid(self.gate(x)) * self.shared(x)


class MoE(nn.Module):
    """Top-k routed experts: each token runs only the experts its router picks, so the work per token is that
    of k experts whatever E is. A token alone (decode) gathers its chosen experts' weights. A chunk (prefill)
    sorts its (token, expert) pairs by expert: each expert's first B pairs fill its first tile, multiplied by
    the expert's weights where they are (one batch product over all experts, no copy), and the pairs past them
    fill overflow tiles of B rows, each holding one expert's pairs, for which that expert's weights are
    gathered. The static shapes hold the most overflow tiles any routing can fill (`overflow_tiles`); spare rows
    compute on a dummy token that is never read back. With int8 tables (`quantization.int8_gathered_tables`) the
    first tiles are int8 products against the tables as they are, and gathered tiles are widened to float; a
    few tokens multiply their experts' gathered rows as int8 (hybrid FULLY_CONNECTEDs). With `in_place=False`
    every tile is gathered (`B` from `expert_tile_rows`, the tiles from `expert_tiles`)."""

    def __init__(self, cfg: LlmConfig, router: torch.Tensor, gate: Any, up: Any, down: Any, in_place: bool = True):
        """`gate`, `up`, `down`: each expert's projection in Hugging Face's Linear layout ([out, in]), as one
        [E, out, in] tensor or a sequence of E matrices."""
        super().__init__()
        self.in_place = in_place
        self.router = Linear(router)
        # Each table is stored once, every signature reading (and quantization finding) the same array: each
        # expert's Linear weight as it is ([out, in]). A row times a gathered table is summed along the row (with
        # int8 tables, hybrid FULLY_CONNECTEDs), and tiles multiply the tables as transposed right operands
        # (BATCH_MATMUL adj_y); either way a product's output channels are the table's rows, the axis int8 tables
        # are scaled along.
        self.gate_w = _param(_stacked(gate))  # [E, I, H]
        self.up_w = _param(_stacked(up))  # [E, I, H]
        self.down_w = _param(_stacked(down))  # [E, H, I]
        self.top_k, self.norm_topk, self.activation = cfg.num_experts_per_tok, cfg.norm_topk_prob, cfg.activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        flat = x.reshape(batch * length, hidden)
        probs = torch.softmax(self.router(flat), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [N, k]
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        pairs, experts = batch * length * self.top_k, self.gate_w.shape[0]
        tile_rows = expert_tile_rows(pairs, experts)
        if tile_rows > 1:
            b = first_tile_rows(pairs, experts) if self.in_place else tile_rows
            return self._tiled(flat, weights, chosen, b).reshape(batch, length, hidden)
        # A few tokens: each (token, expert) pair's gathered gate and up tables times the token, summed over H,
        # and its down table times its inner row, summed over I: products of one row, which read the gathered
        # weights once where a matrix kernel would repack them first. (With int8 tables these become hybrid
        # FULLY_CONNECTEDs of the gathered int8 rows: `quantization.int8_gathered_tables`.)
        idx = chosen.reshape(-1)  # [N*k]
        if batch * length == 1:  # one token: its row is broadcast against its k tables by the products
            rows = flat.reshape(1, 1, hidden)
        else:
            rows = flat.unsqueeze(1).expand(batch * length, self.top_k, hidden).reshape(-1, 1, hidden)  # [N*k, 1, H]
        gate = (self.gate_w[idx] * rows).sum(dim=2)  # [N*k, I]
        up = (self.up_w[idx] * rows).sum(dim=2)
        inner = (_act(self.activation, gate) * up).unsqueeze(1)  # [N*k, 1, I]
        out = (self.down_w[idx] * inner).sum(dim=2).reshape(batch * length, self.top_k, hidden)
        out = (out * weights.unsqueeze(-1)).sum(dim=1)
        return out.reshape(batch, length, hidden)

    def _experts(self, x: torch.Tensor, which: torch.Tensor | None) -> torch.Tensor:
        """Tiles x [T, B, H] through their experts: all experts in order (which=None, T = E, the weights read
        in place) or the experts `which` [T] names (their weights gathered). The tables are the transposed right
        operand, read as stored with adj_y: the kernels pack a constant right operand once, and multiply int8
        tables as they are."""
        gate_w, up_w, down_w = ((self.gate_w, self.up_w, self.down_w) if which is None
                                else (self.gate_w[which], self.up_w[which], self.down_w[which]))
        inner = _act(self.activation, torch.bmm(x, gate_w.transpose(1, 2))) * torch.bmm(x, up_w.transpose(1, 2))
        return torch.bmm(inner, down_w.transpose(1, 2))  # [T, B, H]

    def _tiled(self, flat: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor, b: int) -> torch.Tensor:
        tokens, hidden = flat.shape
        experts, k = self.gate_w.shape[0], self.top_k
        pairs = tokens * k
        # with no first tiles in place (first = 0), every pair goes to the gathered tiles of b rows
        first, first_slots = (b, experts * b) if self.in_place else (0, 0)
        extra = overflow_tiles(pairs, b) if self.in_place else expert_tiles(pairs, experts, b)
        expert = chosen.reshape(pairs)  # pair p = (token p // k, its expert)
        onehot = (expert.unsqueeze(1) == torch.arange(experts)).to(torch.int32)  # [P, E]
        rank = ((torch.cumsum(onehot, 0) - onehot) * onehot).sum(1)  # earlier pairs of the same expert
        past = ((onehot.sum(0) - first).clamp(min=0) + (b - 1)) // b * b  # each expert's overflow, whole tiles
        ends = torch.cumsum(past, 0)
        # slot of each pair, all distinct: its expert's first tile, or that expert's overflow tiles
        slot = torch.where(rank < first, expert * b + rank, first_slots + ends[expert] - past[expert] + rank - first)
        # the token each slot holds (token 0 in the spare slots, whose results are never read)
        slot_token = torch.zeros(first_slots + extra * b, dtype=torch.int64).scatter_add(
            0, slot, torch.arange(pairs) // k)
        xs = flat[slot_token]  # [S, H]
        tiles = [self._experts(xs[:first_slots].reshape(experts, b, hidden), None)] if first else []
        if extra:
            starts = torch.arange(extra) * b
            tile_expert = (ends.unsqueeze(0) <= starts.unsqueeze(1)).to(torch.int32).sum(1).clamp(max=experts - 1)
            tiles.append(self._experts(xs[first_slots:].reshape(extra, b, hidden), tile_expert))
        out = torch.cat([o.reshape(-1, hidden) for o in tiles])[slot].reshape(tokens, k, hidden)
        return (out * weights.unsqueeze(-1)).sum(dim=1)


def _stacked(matrices: Any) -> torch.Tensor:
    """[E, out, in]: the experts' [out, in] matrices stacked as they are, one copy (in float32)."""
    return torch.stack([m.to(torch.float32) for m in matrices])


class Attention(nn.Module):
    def __init__(self, cfg: LlmConfig, layer: int, q, k, v, o, biases, q_norm=None, k_norm=None):
        super().__init__()
        qb, kb, vb, ob = biases
        self.q, self.k, self.v, self.o = Linear(q, qb), Linear(k, kb), Linear(v, vb), Linear(o, ob)
        self.q_norm = RMSNorm(q_norm, cfg.rms_norm_eps, cfg.norm_plus_one) if q_norm is not None else None
        self.k_norm = RMSNorm(k_norm, cfg.rms_norm_eps, cfg.norm_plus_one) if k_norm is not None else None
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.scale, self.softcap = cfg.attention_scale, cfg.attn_softcap
        self.rope = cfg.has_rope(layer)
        self.layer = layer

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, start: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, length, _ = x.shape
        d, groups = self.head_dim, self.heads // self.kv_heads
        q = self.q(x).view(batch, length, self.heads, d)
        k = self.k(x).view(batch, length, self.kv_heads, d)
        v = self.v(x).view(batch, length, self.kv_heads, d)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.k_norm is not None:
            k = self.k_norm(k)
        if self.rope:
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        k_cache = update_cache(k_cache, k.transpose(1, 2), start, 2)  # [1, KV, C, D]
        v_cache = update_cache(v_cache, v.transpose(1, 2), start, 2)  # [1, KV, C, D]
        # The query heads of one key/value head as the rows of one product: [1, KV, G*T, D] x [1, KV, C, D]^T.
        q = (q * self.scale).transpose(1, 2).reshape(batch, self.kv_heads, groups * length, d)
        scores = torch.matmul(q, k_cache.transpose(2, 3))
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        probs = torch.softmax(scores + mask, dim=-1)
        out = torch.matmul(probs, v_cache)  # [1, KV, G*T, D]
        out = out.reshape(batch, self.heads, length, d).transpose(1, 2).reshape(batch, length, self.heads * d)
        return self.o(out), k_cache, v_cache


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Hugging Face's rotate-half RoPE on the first cos.shape[-1] features of each head (x: [B, T, heads, D];
    cos, sin: [1, T, 1, R], sin with its first half negated by the prologue: cat(-x2, x1) * sin is
    cat(x2, x1) * cat(-s1, s2), exactly, with no negation in each layer)."""
    rot = cos.shape[-1]
    xr = x[..., :rot] if rot < x.shape[-1] else x
    half = rot // 2
    rotated = torch.cat([xr[..., half:], xr[..., :half]], dim=-1)
    out = xr * cos + rotated * sin
    return torch.cat([out, x[..., rot:]], dim=-1) if rot < x.shape[-1] else out


class Layer(nn.Module):
    def __init__(self, cfg: LlmConfig, attention: Attention, mlp: nn.Module, norms: dict[str, torch.Tensor]):
        super().__init__()
        norm = lambda w: RMSNorm(w, cfg.rms_norm_eps, cfg.norm_plus_one)  # noqa: E731
        self.attention, self.mlp = attention, mlp
        self.input_norm = norm(norms["input"])
        self.post_attention_norm = norm(norms["post_attention"])
        self.pre_mlp_norm = norm(norms["pre_mlp"]) if "pre_mlp" in norms else None
        self.post_mlp_norm = norm(norms["post_mlp"]) if "post_mlp" in norms else None
        self.residual_scale = cfg.residual_scale

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, start: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, k_cache, v_cache = self.attention(self.input_norm(x), cos, sin, mask, k_cache, v_cache, start)
        if self.pre_mlp_norm is not None:  # Gemma: normed after attention, then normed again before the MLP
            x = x + self.post_attention_norm(h)
            y = self.mlp(self.pre_mlp_norm(x))
            return x + (self.post_mlp_norm(y) if self.post_mlp_norm is not None else y), k_cache, v_cache
        x = x + self._scaled(h)
        return x + self._scaled(self.mlp(self.post_attention_norm(x))), k_cache, v_cache

    def _scaled(self, h: torch.Tensor) -> torch.Tensor:
        return h if self.residual_scale is None else h * self.residual_scale


class Prologue(nn.Module):
    """tokens [1, T], input_pos [T] -> the embedded tokens [1, T, H]; the index vector at which every layer
    writes its key and value caches ([0, 0, p, 0], p = input_pos[0]); then per layer type
    (sorted) its mask [G*T, C] (the T rows repeated for each of the G query heads sharing a key/value head) and
    its RoPE rows cos, sin [1, T, 1, R] (gathered from tables of positions that hold one half of Hugging Face's
    rows, which are two equal halves), sin with its first half negated for `_rope`. What
    does not depend on the layer is computed here once."""

    positions: torch.Tensor  # a buffer: the cache slots 0 .. cache_length - 1

    def __init__(self, cfg: LlmConfig, embed: nn.Parameter, rope: dict[str, tuple[Any, Any]], cache_length: int):
        super().__init__()
        self.cfg, self.embed = cfg, embed
        self.layer_types = sorted(rope)
        for layer_type, (cos, sin) in rope.items():
            # one half of Hugging Face's rows, which are each rotation's angles twice (cat(freqs, freqs)): the
            # model concatenates the half to itself after the gather, exactly the same rows for half the bytes
            self.register_buffer(f"cos_{layer_type}", torch.as_tensor(cos, dtype=torch.float32), persistent=False)
            self.register_buffer(f"sin_{layer_type}", torch.as_tensor(sin, dtype=torch.float32), persistent=False)
        self.register_buffer("positions", torch.arange(cache_length, dtype=torch.int32), persistent=False)

    def masks(self, input_pos: torch.Tensor) -> dict[str, torch.Tensor]:
        """Additive masks [T, C] per layer type: key c is seen by the token at position p when c <= p (and
        c > p - window on sliding-window layers)."""
        keys, pos = self.positions[None, :], input_pos[:, None]
        causal = keys <= pos
        out = {"full_attention": torch.where(causal, 0.0, MASKED)}
        if self.cfg.sliding_window:
            window = causal & (keys > pos - self.cfg.sliding_window)
            out["sliding_attention"] = torch.where(window, 0.0, MASKED)
        return out

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = embedding_lookup(self.embed, tokens)
        if self.cfg.embed_scale is not None:
            x = x * self.cfg.embed_scale
        masks = self.masks(input_pos)
        groups = self.cfg.kv_groups
        zero = torch.zeros_like(input_pos[:1])
        first = input_pos[:1]
        out = [x, torch.cat([zero, zero, first, zero])]
        for t in self.layer_types:
            mask = torch.cat([masks[t]] * groups) if groups > 1 else masks[t]
            cos, sin = getattr(self, f"cos_{t}")[input_pos], getattr(self, f"sin_{t}")[input_pos]
            cos, sin = torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)
            out += [mask, cos[None, :, None, :], sin[None, :, None, :]]
        return tuple(out)


class Epilogue(nn.Module):
    """The hidden states [1, T, H] -> the logits of the last token [1, 1, V]."""

    def __init__(self, cfg: LlmConfig, norm: RMSNorm, lm_head: nn.Parameter):
        super().__init__()
        self.cfg, self.norm, self.lm_head = cfg, norm, lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = nn.functional.linear(self.norm(x[:, -1:, :]), self.lm_head)
        if self.cfg.logit_divisor is not None:
            scores = scores / self.cfg.logit_divisor
        if self.cfg.final_logit_softcap:
            cap = float(self.cfg.final_logit_softcap)
            scores = torch.tanh(scores / cap) * cap
        return scores


class DecoderLM(nn.Module):
    """tokens [1, T], input_pos [T], kv caches -> {"logits": [1, 1, V] of the last token (when `logits`),
    kv_cache_*: updated}: the prologue, the layers, the epilogue. Each part is traced on its own when
    converting (`litert_torch.generative.convert`); this forward is their composition, for eager checks."""

    def __init__(self, cfg: LlmConfig, embed: torch.Tensor, layers: list[Layer], final_norm: torch.Tensor,
                 lm_head: torch.Tensor, rope: dict[str, tuple[Any, Any]], cache_length: int):
        super().__init__()
        self.cfg = cfg
        embed = _param(embed)
        self.prologue = Prologue(cfg, embed, rope, cache_length)
        self.layers = nn.ModuleList(layers)
        self.epilogue = Epilogue(cfg, RMSNorm(final_norm, cfg.rms_norm_eps, cfg.norm_plus_one),
                                 embed if lm_head is None else _param(lm_head))
        self.cache_length = cache_length

    def cache_shapes(self) -> dict[str, tuple[int, int, int, int]]:
        """Each cache's shape: keys and values [1, KV, C, D]."""
        return cache_shapes(self.cfg.num_layers, self.cfg.num_kv_heads, self.cache_length, self.cfg.head_dim)

    sequence_axis = staticmethod(sequence_axis)

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, caches: list[torch.Tensor],
                logits: bool = True) -> dict[str, Any]:
        cfg = self.cfg
        x, start, *per_type = self.prologue(tokens, input_pos)
        tables = {t: per_type[3 * i: 3 * i + 3] for i, t in enumerate(self.prologue.layer_types)}
        out: dict[str, torch.Tensor] = {}
        names = kv_names(cfg.num_layers)
        for i, layer in enumerate(self.layers):
            mask, cos, sin = tables[cfg.layer_types[i]]
            x, k_cache, v_cache = layer(x, cos, sin, mask, caches[2 * i], caches[2 * i + 1], start)
            out[names[2 * i]], out[names[2 * i + 1]] = k_cache, v_cache
        if logits:
            out = {"logits": self.epilogue(x), **out}
        return out


def build(weights: Mapping[str, torch.Tensor], cfg: LlmConfig, rope: dict[str, tuple[Any, Any]],
          cache_length: int) -> DecoderLM:
    """Our decoder over a Hugging Face causal LM's weights (`weights`: its parameters by state-dict name, or a
    checkpoint's names) of `cfg`'s architecture, read by role through the weight map both builders share
    (`weight_map.decoder_weights`, which checks each against the shape the config gives it), with the RoPE
    tables `rope` (`rope.rope_tables`: per layer type, one half of the cos and sin rows)."""
    if cfg.family in DIRECT_ONLY:
        raise UnsupportedModelError(f"config.model_type {cfg.model_type!r}: this architecture is built op by op "
                                    "only (generative/direct.py), which does not take this model; the log says why")
    read = decoder_weights(Weights(weights, _floating), cfg)
    layers = []
    for i, w in enumerate(read.layers):
        biases = tuple(w[f"{n}_bias"] for n in "qkvo")
        attention = Attention(cfg, i, w["q"], w["k"], w["v"], w["o"], biases, w["q_norm"], w["k_norm"])
        if "moe" in w:
            moe = w["moe"]
            mlp: nn.Module = MoE(cfg, moe["router"], moe["gate"], moe["up"], moe["down"])
            if "shared" in moe:
                shared = moe["shared"]
                mlp = SharedExpert(mlp, MLP(cfg, shared["gate"], shared["up"], shared["down"]), moe["shared_gate"])
        else:
            mlp = MLP(cfg, w["gate"], w["up"], w["down"], (w["gate_bias"], w["up_bias"], w["down_bias"]))
        norms = {key: w[f"{key}_norm"] for key in ("input", "post_attention", "pre_mlp", "post_mlp")
                 if f"{key}_norm" in w}
        layers.append(Layer(cfg, attention, mlp, norms))
    return DecoderLM(cfg, read.embed, layers, read.final_norm, read.lm_head, rope, cache_length)


def _floating(name: str, tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_floating_point():
        raise UnsupportedModelError(f"weight {name} is {tensor.dtype}: the exporter reads floating-point weights "
                                    "(quantize with quantization_recipe instead of exporting a quantized checkpoint)")
    return tensor
