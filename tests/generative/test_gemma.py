"""Gemma 4 and Gemma 3n text decoders (`direct_gemma.py`): their config read as transformers reads it, what is
refused, models given in memory and config variants decoding like Hugging Face in our runner, every layer's
output against Hugging Face's. (Both architectures' saved directories decode like Hugging Face in LiteRT-LM
and in our runner in test_llm.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("litert_lm_builder")

from litert_torch import generative  # noqa: E402
from litert_torch.generative import UnsupportedModelError  # noqa: E402
from litert_torch.generative.config import LlmConfig  # noqa: E402
from litert_torch.generative import prefix  # noqa: E402
from litert_torch.generative.export_hf import export  # noqa: E402
from litert_torch.generative.weights import ModelSourceError  # noqa: E402
from tests.generative import tiny_lm  # noqa: E402

# 52 tokens with the start token: past the sliding window (6) and the largest prefill length (16)
PROMPT = "once upon a time there was a little robot who liked"
NEW_TOKENS = 16
VOCAB = len(tiny_lm.tokenizer())


def test_gemma4_config_per_layer_sizes_and_shared_caches():
    """Gemma 4's full-attention layers take global_head_dim and, with attention_k_eq_v, the global key/value
    heads; the last num_kv_shared_layers layers attend over the last earlier layer of their type; the same from
    the config object, its dict, and a dict without per_layer_config (as transformers fills it)."""
    hf_config = tiny_lm.config("gemma4", VOCAB)
    cfg = LlmConfig.from_hf(hf_config)
    assert cfg.layer_head_dims == [16, 32, 16, 32] and cfg.layer_kv_heads == [2, 1, 2, 1]
    assert cfg.kv_owners == [0, 1, 0, 1] and cfg.k_eq_v_layers == [False, True, False, True]
    assert cfg.layer_intermediate_sizes == [128, 128, 256, 256]  # double-wide on the sharing layers
    assert cfg.attention_scale == 1.0 and not cfg.norm_plus_one and cfg.v_norm and cfg.per_layer_input_size == 8
    raw = hf_config.to_dict()
    assert LlmConfig.from_hf(raw) == cfg
    raw.pop("per_layer_config")
    raw.update(global_head_dim=32, num_global_key_value_heads=1)
    assert LlmConfig.from_hf(raw) == cfg


def test_gemma4_config_experts():
    cfg = LlmConfig.from_hf(tiny_lm.config("gemma4_moe", VOCAB))
    assert cfg.moe_layers == [True] * 4 and (cfg.num_experts, cfg.num_experts_per_tok) == (4, 2)
    assert cfg.moe_intermediate_size == 32 and cfg.norm_topk_prob and cfg.kv_owners == [0, 1, 2, 3]


def test_gemma3n_config_altup_laurel_sparsity():
    cfg = LlmConfig.from_hf(tiny_lm.config("gemma3n", VOCAB))
    assert cfg.altup_inputs == 4 and cfg.altup_active == 0 and cfg.altup_correct_scale and cfg.laurel_rank == 8
    assert cfg.activation_sparsity == [0.95, 0.95, 0.0, 0.0]
    assert cfg.layer_intermediate_sizes == [128, 96, 128, 64] and cfg.kv_owners == [0, 1, 0, 1]
    assert cfg.per_layer_vocab_size == VOCAB - 32 and cfg.final_logit_softcap == 3.0


@pytest.mark.parametrize("arch, fields, message", [
    ("gemma4", {"enable_moe_block": True, "num_experts": None}, "num_experts"),
    ("gemma4", {"enable_moe_block": True, "num_experts": 2, "top_k_experts": 3, "moe_intermediate_size": 8},
     "top_k_experts"),
    ("gemma4", {"vocab_size_per_layer_input": 100}, "vocab_size_per_layer_input"),
    ("gemma4", {"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    ("gemma3n", {"num_kv_shared_layers": 4}, "num_kv_shared_layers"),
    ("gemma3n", {"altup_active_idx": 4}, "altup_active_idx"),
    ("gemma3n", {"activation_sparsity_pattern": [0.95, 1.0, 0.0, 0.0]}, "activation_sparsity_pattern"),
])
def test_gemma_refusals_name_the_field(arch, fields, message):
    raw = tiny_lm.config(arch, VOCAB).to_dict()
    raw.update(fields)
    with pytest.raises((UnsupportedModelError, ModelSourceError), match=message):
        LlmConfig.from_hf(raw)


@pytest.mark.parametrize("wrapper", ["gemma4", "gemma3n"])
def test_multimodal_wrapper_is_refused_naming_its_language_model(wrapper):
    with pytest.raises(UnsupportedModelError, match=f"model_type '{wrapper}_text'"):
        LlmConfig.from_hf({"model_type": wrapper, "text_config": {}})


def test_gemma4_use_bidirectional_vision_is_a_causal_text_decoder():
    raw = tiny_lm.config("gemma4", VOCAB).to_dict()
    raw["use_bidirectional_attention"] = "vision"  # only image tokens attend both ways
    assert LlmConfig.from_hf(raw).family == "gemma4"


def _greedy(hf, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("arch, overrides", [
    ("gemma4", {}),
    ("gemma4_moe", {}),
    # no per-layer embeddings, no shared caches, values from their own projection, one head size
    ("gemma4", {"hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "attention_k_eq_v": False,
                "global_head_dim": 16, "use_double_wide_mlp": False}),
    ("gemma3n", {}),
    # AltUp's corrected output unscaled, its active stream the second, no sparse layer
    ("gemma3n", {"altup_correct_scale": False, "altup_active_idx": 1,
                 "activation_sparsity_pattern": [0.0, 0.0, 0.0, 0.0]}),
])
def test_gemma_in_memory_decodes_like_hugging_face_layer_by_layer(arch, overrides, tmp_path):
    """A model in memory (its config and state dict read directly): 16 greedy tokens as Hugging Face's through a
    prompt longer than the window and the largest prefill chunk; each layer's output within float rounding of
    Hugging Face's."""
    tok = tiny_lm.tokenizer()
    torch.manual_seed(0)
    if overrides:
        hf_config = tiny_lm.config(arch, len(tok))
        params = {**hf_config.to_dict(), **overrides}
        params.pop("per_layer_config", None)
        config = type(hf_config)(**{k: v for k, v in params.items() if k not in ("model_type", "transformers_version")})
        hf = tiny_lm.spread_weights(transformers.AutoModelForCausalLM.from_config(config).eval(), 0.05)
    else:
        hf = tiny_lm.model(arch, len(tok))
    out = export.export(model=hf, tokenizer=tok, output_dir=str(tmp_path), prefill_lengths=[4, 16], cache_length=96,
                        quantization_recipe="none")
    llm = generative.load(out)
    cfg = LlmConfig.from_hf(hf.config)
    # the sharing layers hold no caches; each layer's caches have its own head size and key/value heads
    owners = sorted(set(cfg.kv_owners))
    assert llm.layout.cache_names == [f"kv_cache_{kv}_{i}" for i in owners for kv in "kv"]
    for i in owners:
        assert llm.layout.cache_shapes[f"kv_cache_k_{i}"] == [1, cfg.layer_kv_head_count(i), 96,
                                                              cfg.layer_head_dim(i)]
    ids = tok(PROMPT).input_ids
    reference = _greedy(hf, ids, NEW_TOKENS)
    assert len(set(reference)) > 3, "the test model's continuation is degenerate"
    assert list(llm.generate_ids(ids, NEW_TOKENS, stop=False)) == reference
    report = generative.validate_llm(llm, hf, ids, NEW_TOKENS, layers=True)  # every layer compared
    assert report.identical and report.max_relative_error < 1e-4, report.summary()
    # (Gemma 3n's layer outputs are its AltUp streams, every stream compared)
    assert len(report.layer_errors) == 4 and all(e is not None and e < 1e-4 for e in report.layer_errors), \
        report.summary()


@pytest.mark.parametrize("arch", ["gemma4", "gemma3n"])
def test_rope_tables_per_layer_type_are_hugging_faces(arch):
    """Each layer type's RoPE over its own head size (Gemma 4: default RoPE on the sliding layers' 16 features,
    proportional RoPE rotating a quarter of the global layers' 32), one half of the rows Hugging Face's rotary
    module gives, within float32 rounding."""
    from litert_torch.generative.direct_gemma import typed_rope_tables

    length = 96
    hf = tiny_lm.model(arch, VOCAB)
    cfg = LlmConfig.from_hf(hf.config)
    tables = typed_rope_tables(cfg, hf.config.rope_parameters, length)
    assert sorted(tables) == ["full_attention", "sliding_attention"]
    positions = torch.arange(length)[None, :]
    bound = 2.0 ** -23 * (2 + np.arange(length))[:, None]
    for layer_type, (cos, sin) in tables.items():
        head_dim = cfg.layer_head_dim(cfg.layer_types.index(layer_type))
        hf_cos, hf_sin = hf.model.rotary_emb(torch.zeros(1, 1, cfg.hidden_size), positions, layer_type)
        assert cos.shape == (length, head_dim // 2) and hf_cos.shape[-1] == head_dim
        for ours, theirs in ((cos, hf_cos[0]), (sin, hf_sin[0])):
            assert torch.equal(theirs[:, :head_dim // 2], theirs[:, head_dim // 2:])
            assert (np.abs(ours - theirs[:, :head_dim // 2].numpy()) <= bound).all(), layer_type
    if arch == "gemma4":  # proportional: three quarters of the global layers' angles stay 0
        assert (tables["full_attention"][1][:, 4:] == 0).all() and (tables["full_attention"][1][1:, :4] != 0).all()


def test_gemma3n_sparsity_quantile_is_pytorchs():
    """The cut-off's quantile is PyTorch's float32 one, which differs from the correctly rounded quantile by a few
    units in the last place for most sparsities."""
    from statistics import NormalDist

    from litert_torch.generative.direct_gemma import sparsity_quantile

    normal = torch.distributions.normal.Normal(0, 1)
    for p in (0.6, 0.9, 0.95, 0.999):
        assert sparsity_quantile(p) == float(normal.icdf(torch.tensor(p, dtype=torch.float32)))
    assert sparsity_quantile(0.999) != float(np.float32(NormalDist().inv_cdf(0.999)))


@pytest.mark.parametrize("arch", ["gemma4", "gemma3n"])
def test_gemma_attends_over_the_filled_prefix_with_shared_caches(arch, tmp_path):
    """A cache of 300 slots: each attention core, a sharing layer's over its owner's caches included, is an IF
    on the filled prefix (128, 256, the whole cache); a 156-token prompt crosses the first prefix length and the
    tokens are still Hugging Face's."""
    from litert_torch.flatbuffer.reader import read_model

    src = tiny_lm.save(str(tmp_path / "src"), arch)
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(src)
    ids = tok(" ".join([PROMPT] * 3)).input_ids
    assert len(ids) > 128
    out = export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=[32], cache_length=300,
                        quantization_recipe="none", bundle_litert_lm=False)
    model = read_model(open(out, "rb").read())
    decode = next(g for g in model.subgraphs if g.name == "decode")
    # every layer's core, the sharing layers' included: one IF per cache prefix and one for the whole cache
    assert sum(op.opcode == "IF" for op in decode.ops) == 4 * (len(prefix.prefix_lengths(300)) + 1)
    llm = generative.load(out)
    assert list(llm.generate_ids(ids, NEW_TOKENS, stop=False)) == _greedy(hf, ids, NEW_TOKENS)
