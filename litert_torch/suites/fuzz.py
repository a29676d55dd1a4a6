"""Mutated .tflite files through `EdgeModel` + a call: every file must run or raise a typed error, never take
the process down.

A case is "SEED:N": mutation N (deterministic) of a small model this module converts (a conv net, an MLP, an
LSTM, an embedding lookup, a model with two signatures, int4 weights per channel and in blocks, and a 2-layer LLM with prefill and decode signatures
whose attention runs in IF branch subgraphs over its KV cache, in float and with int8 weights, and an
attention block with a dynamic batch and sequence); the LLMs also through `generative.LlmRunner` (load,
prefill, decode: seeds named `*_runner`). Mutations: flipped bytes, truncation, and 32-bit
integers overwritten with the values that break readers (0, -1, 1, small counts, huge values) at positions
outside the weight data. Run through `litert_torch.suites.runner`, each case in a worker process, so that a
crash is recorded (with its signal) instead of ending the run:

    python -m litert_torch.coverage fuzz --limit 20000     # bench/fuzz.py prints the summary
"""

from __future__ import annotations

import functools
import random
import struct
from typing import Any

import numpy as np

STATUSES = ("ok", "refused", "error")
SEEDS = ("cnn", "mlp", "lstm", "embedding", "two_signatures", "llm", "llm_int8", "dynamic", "moe_int8",
         "llm_runner", "moe_int8_runner", "int4")
RUNNER = "_runner"  # a seed named so runs through the LLM runner (generative.LlmRunner: prefill, then decode)
VALUES = (0, 1, 2, 3, 4, 7, 8, 16, 64, 255, 256, 65535, 2**31 - 1, -1, -2, -(2**31))


def cases(count: int, seed: int = 0) -> list[str]:
    """`count` case ids, spread over the seed models."""
    return [f"{SEEDS[i % len(SEEDS)]}:{seed * 1_000_000 + i // len(SEEDS)}" for i in range(count)]


@functools.lru_cache(maxsize=None)
def seed_model(name: str) -> bytes:
    import torch
    from torch import nn

    import litert_torch

    if name.endswith(RUNNER):
        return seed_model(name.removesuffix(RUNNER))
    torch.manual_seed(0)
    if name == "cnn":
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, groups=4),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3), nn.Softmax(-1))
        return litert_torch.convert(model.eval(), (torch.randn(1, 3, 8, 8),)).flatbuffer
    if name == "mlp":
        model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5), nn.Linear(5, 2))
        return litert_torch.convert(model.eval(), (torch.randn(2, 6),)).flatbuffer
    if name == "lstm":
        class Recurrent(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(3, 4, batch_first=True)

            def forward(self, x):
                return self.lstm(x)[0]

        return litert_torch.convert(Recurrent().eval(), (torch.randn(1, 5, 3),)).flatbuffer
    if name == "embedding":
        class Lookup(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(10, 4)

            def forward(self, ids):
                v = self.emb(ids)
                return v.sum(1), torch.argmax(v, -1), v.transpose(1, 2).reshape(ids.shape[0], -1)

        return litert_torch.convert(Lookup().eval(), (torch.randint(0, 10, (2, 3)),)).flatbuffer
    if name == "two_signatures":
        a, b = nn.Linear(4, 3).eval(), nn.Conv1d(2, 2, 3, padding=1).eval()
        return litert_torch.signature("a", a, (torch.randn(1, 4),)).signature("b", b, (torch.randn(1, 2, 6),)) \
            .convert().flatbuffer
    if name == "dynamic":
        class Attention(nn.Module):  # shapes known only at run time: RESHAPEs fed computed shapes
            def __init__(self):
                super().__init__()
                self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

            def forward(self, x):
                batch, seq, _ = x.shape
                q, k, v = self.qkv(x).reshape(batch, seq, 3, 2, 4).permute(2, 0, 3, 1, 4)
                mixed = torch.softmax(q @ k.transpose(-1, -2) * 0.5, -1) @ v
                return self.out(mixed.transpose(1, 2).reshape(batch, seq, 8)) + torch.arange(seq)[:, None]

        from torch.export import Dim

        shapes = {"x": {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=2, max=16)}}
        return litert_torch.convert(Attention().eval(), (torch.randn(2, 5, 8),), dynamic_shapes=shapes).flatbuffer
    if name == "int4":  # int4 weights packed two to a byte, per channel and in blocks with a scales tensor
        from ai_edge_quantizer import recipe

        from litert_torch.quantization.quantize import quantize_model

        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 64), nn.ReLU(),
                              nn.Linear(64, 4))
        edge = litert_torch.convert(model.eval(), (torch.randn(1, 3, 6, 6),))
        per_channel = dict(recipe.dynamic_wi4_afp32()[0], operation="CONV_2D")
        blocks = dict(recipe.dynamic_wi4b32_afp32()[0], operation="FULLY_CONNECTED")
        return quantize_model(edge, [per_channel, blocks]).flatbuffer
    if name in ("llm", "llm_int8"):
        return _llm_seed(int8=name == "llm_int8")
    if name == "moe_int8":
        return _moe_seed()
    raise ValueError(f"unknown seed model {name!r}")


def _llm_seed(int8: bool = False) -> bytes:
    """A 2-layer Llama over random weights (no transformers needed), cache 256: its attention cores are IF ops
    over cache prefixes, the branches subgraphs of their own. `int8`: its weights int8 per channel, as the
    LLM exporter's dynamic int8 recipe stores them (LiteRT's hybrid kernels)."""
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.generative import direct
    from litert_torch.generative.config import LlmConfig

    hidden, inner, head_dim, layers = 16, 24, 8, 2
    cfg = LlmConfig.from_hf(dict(model_type="llama", vocab_size=48, hidden_size=hidden, intermediate_size=inner,
                                 num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=head_dim, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                 max_position_embeddings=512, hidden_act="silu"))
    shapes = {"embed_tokens.weight": (48, hidden), "norm.weight": (hidden,)}
    for i in range(layers):
        shapes.update({f"layers.{i}.{name}": shape for name, shape in (
            ("self_attn.q_proj.weight", (2 * head_dim, hidden)), ("self_attn.k_proj.weight", (head_dim, hidden)),
            ("self_attn.v_proj.weight", (head_dim, hidden)), ("self_attn.o_proj.weight", (hidden, 2 * head_dim)),
            ("mlp.gate_proj.weight", (inner, hidden)), ("mlp.up_proj.weight", (inner, hidden)),
            ("mlp.down_proj.weight", (hidden, inner)), ("input_layernorm.weight", (hidden,)),
            ("post_attention_layernorm.weight", (hidden,)))})
    rng = np.random.default_rng(0)
    weights = {"model." + k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    model = direct.build_llm(direct.Weights(weights, lambda name, array: array), cfg,
                             {"rope_type": "default", "rope_theta": 10000.0}, 256, [4])[0]
    if int8:
        from litert_torch.quantization.weights import int8_weights

        int8_weights(model.subgraphs)
    return serialize(model)


def _moe_seed() -> bytes:
    """A 2-layer Qwen3-MoE over random weights (4 experts, 2 per token), cache 64, its weights and expert tables
    int8 as the LLM exporter's dynamic int8 recipe stores them: routing by TOPK_V2, a prefill chunk's tiles as
    hybrid products against the tables in place and gathered ones widened, the decoded token's products hybrid
    FULLY_CONNECTEDs of gathered int8 rows."""
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.generative import direct
    from litert_torch.generative.config import LlmConfig
    from litert_torch.quantization.weights import int8_gathered_tables, int8_weights

    hidden, inner, head_dim, experts = 16, 8, 8, 4
    cfg = LlmConfig.from_hf(dict(model_type="qwen3_moe", vocab_size=32, hidden_size=hidden, intermediate_size=24,
                                 moe_intermediate_size=inner, num_experts=experts, num_experts_per_tok=2,
                                 norm_topk_prob=True, num_hidden_layers=2, num_attention_heads=2,
                                 num_key_value_heads=1, head_dim=head_dim, rms_norm_eps=1e-6,
                                 tie_word_embeddings=True, max_position_embeddings=128, hidden_act="silu"))
    shapes = {"embed_tokens.weight": (32, hidden), "norm.weight": (hidden,)}
    for i in range(2):
        shapes.update({f"layers.{i}.{name}": shape for name, shape in (
            ("input_layernorm.weight", (hidden,)), ("post_attention_layernorm.weight", (hidden,)),
            ("self_attn.q_proj.weight", (2 * head_dim, hidden)), ("self_attn.k_proj.weight", (head_dim, hidden)),
            ("self_attn.v_proj.weight", (head_dim, hidden)), ("self_attn.o_proj.weight", (hidden, 2 * head_dim)),
            ("self_attn.q_norm.weight", (head_dim,)), ("self_attn.k_norm.weight", (head_dim,)),
            ("mlp.gate.weight", (experts, hidden)))})
        for e in range(experts):
            for name, shape in (("gate_proj", (inner, hidden)), ("up_proj", (inner, hidden)),
                                ("down_proj", (hidden, inner))):
                shapes[f"layers.{i}.mlp.experts.{e}.{name}.weight"] = shape
    rng = np.random.default_rng(0)
    weights = {"model." + k: (0.3 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    model = direct.build_llm(direct.Weights(weights, lambda name, array: array), cfg,
                             {"rope_type": "default", "rope_theta": 10000.0}, 64, [8])[0]
    int8_weights(model.subgraphs)
    int8_gathered_tables(model.subgraphs)
    return serialize(model)


@functools.lru_cache(maxsize=None)
def _structure_positions(name: str) -> tuple[int, ...]:
    """4-byte aligned offsets of the file that are not inside a buffer's data (where the tables, vectors of
    indices and shapes live)."""
    data = seed_model(name)
    skip = np.zeros(len(data), bool)
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(data, 0)
    for i in range(model.BuffersLength()):
        buf = model.Buffers(i)
        if buf.DataLength() > 16:
            start = buf._tab.Vector(buf._tab.Offset(4))
            skip[start:start + buf.DataLength()] = True
    return tuple(p for p in range(0, len(data) - 4, 4) if not skip[p:p + 4].any())


def mutate(name: str, n: int) -> bytes:
    data = bytearray(seed_model(name))
    rng = random.Random(f"{name}:{n}")
    kind = n % 5
    if kind == 0:  # flipped bytes anywhere in the structure
        positions = _structure_positions(name)
        for _ in range(rng.randint(1, 4)):
            p = rng.choice(positions) + rng.randint(0, 3)
            data[p] ^= 1 << rng.randint(0, 7)
    elif kind == 1:  # truncation
        return bytes(data[:rng.randint(0, len(data) - 1)])
    else:  # an aligned int32 overwritten with a value that breaks readers
        positions = _structure_positions(name)
        for _ in range(1 if kind < 4 else rng.randint(2, 3)):
            p = rng.choice(positions)
            value = rng.choice(VALUES) if rng.random() < 0.8 else rng.randint(-40, 40)
            struct.pack_into("<i", data, p, value)
    return bytes(data)


def run_case(case: str) -> dict[str, Any]:
    from litert_torch.errors import LiteRTTorchError
    from litert_torch.runtime.edge_model import EdgeModel

    name, _, n = case.partition(":")
    data = mutate(name, int(n))
    try:
        if name.endswith(RUNNER):
            from litert_torch.generative.runner import LlmRunner

            llm = LlmRunner(data)
            llm.prefill([1, 2, 3, 4, 5])
            llm.decode(1)
            return {"status": "ok"}
        edge = EdgeModel(data)
        for key, sig in edge.signatures.items():
            # run-time dimensions (-1) as 2; an absurd static one (a mutated shape) too, so that the feed
            # itself fits in memory: the model then refuses it as an input of the wrong shape
            feeds = [np.zeros([d if 0 < d <= 4096 else 2 for d in spec.shape], spec.dtype) for spec in sig.inputs]
            edge.run(key, tuple(feeds))
    except LiteRTTorchError as exc:
        return {"status": "refused", "detail": f"{type(exc).__name__}: {str(exc)[:160]}"}
    except Exception as exc:  # noqa: BLE001 - what this records: an untyped failure
        return {"status": "error", "detail": f"{type(exc).__name__}: {str(exc)[:160]}"}
    return {"status": "ok"}
