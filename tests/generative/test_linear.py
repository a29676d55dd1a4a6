"""Qwen3-Next and Qwen 3.5 text decoders (gated DeltaNet layers with a recurrent state) and LFM2-MoE: what the
config reader refuses, and the states a bundle declares. Their decoding, token for token against Hugging Face in
LiteRT-LM and our runner, is `test_llm.test_architecture_decodes_like_hugging_face` (tiny_lm.DIRECT_ARCHS)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("litert_lm_builder")
litert_lm = pytest.importorskip("litert_lm")

from litert_torch.generative import UnsupportedModelError  # noqa: E402
from litert_torch.generative.config import LlmConfig  # noqa: E402
from tests.generative import tiny_lm  # noqa: E402


@pytest.mark.parametrize("arch, change, pattern", [
    ("qwen3_5", {"model_type": "qwen3_5"}, "config.text_config is missing \\(qwen3_5\\)"),
    ("qwen3_next", {"linear_num_value_heads": 3}, "linear_num_value_heads \\(3\\) is not a multiple"),
    ("qwen3_5", {"hidden_act": "gelu"}, "hidden_act 'gelu'.*silu only"),
    ("qwen3_5", {"linear_conv_kernel_dim": 1}, "linear_conv_kernel_dim = 1.*kernel of 2 or more"),
    ("qwen3_next", {"layer_types": ["linear_attention", "conv", "linear_attention"]}, "\\['conv'\\]"),
])
def test_refused_configs_name_the_field(arch, change, pattern):
    cfg = tiny_lm.config(arch, 100).to_dict()
    with pytest.raises(UnsupportedModelError, match=pattern):
        LlmConfig.from_hf({**cfg, **change})


def test_config_reads_the_linear_attention_and_routing_fields():
    cfg = LlmConfig.from_hf(tiny_lm.config("qwen3_next", 100).to_dict())
    assert (cfg.linear_key_heads, cfg.linear_value_heads, cfg.linear_key_dim, cfg.linear_value_dim,
            cfg.linear_conv_kernel) == (2, 4, 16, 8, 4)
    assert cfg.attn_output_gate and cfg.norm_plus_one and cfg.attention_types == ["full_attention"]
    assert cfg.moe_layers == [True, False, True] and cfg.shared_expert_intermediate_size == 48
    moe = LlmConfig.from_hf(tiny_lm.config("lfm2_moe", 100).to_dict())
    assert moe.router_sigmoid and moe.expert_bias and moe.routed_scaling_factor == 1.5
    assert moe.moe_layers == [False, True, True] and moe.intermediate_size == 128  # (not LFM2's adjusted size)


def test_bundle_declares_each_linear_layers_states(tmp_path):
    """A DeltaNet layer's convolution window and recurrent state are linear-attention state buffers without a
    sequence axis, beside the attention layer's KV cache."""
    from litert_torch.generative.bundle import read_bundle
    from litert_torch.generative.export_hf import export

    src = tiny_lm.save(str(tmp_path / "src"), "qwen3_5")
    path = export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=[8], cache_length=32,
                         quantization_recipe="none")
    bundle = read_bundle(path)
    states = {b.name: (b.kind, b.sequence_axis) for b in bundle.state_buffers}
    assert bundle.max_history_size == 0  # (a recurrent state cannot be rolled back)
    assert states == {"kv_cache_win_0": ("conv", -1), "kv_cache_rec_0": ("conv", -1),
                      "kv_cache_k_1": ("key", 2), "kv_cache_v_1": ("value", 2),
                      "kv_cache_win_2": ("conv", -1), "kv_cache_rec_2": ("conv", -1)}


@pytest.mark.parametrize("arch", ["qwen3_next", "qwen3_5"])
def test_long_padded_chunks_decode_like_hugging_face(arch, tmp_path):
    """A 108-token prompt through 64-token prefill chunks (the second one padded with 21 tokens): the chunk form
    of the gated delta rule over 64 tokens, padding left out of the states, decodes Hugging Face's greedy tokens
    in LiteRT-LM and our runner, its logits within 1e-4 (relative) of Hugging Face's."""
    import os

    import torch
    import transformers

    from litert_torch import generative
    from litert_torch.generative.export_hf import export
    from tests.generative.test_llm import PROMPT, hf_greedy

    src = tiny_lm.save(str(tmp_path / "src"), arch)
    path = export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=[64], cache_length=160,
                         quantization_recipe="none")
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(src)
    prompt = PROMPT + " and " + PROMPT
    ids = tok(prompt).input_ids
    assert len(ids) == 108
    reference = hf_greedy(hf, ids, 16)
    llm = generative.load(path)
    assert list(llm.generate_ids(ids, 16, stop=False)) == reference
    report = generative.validate_llm(llm, hf, ids, 16)
    assert report.identical and report.max_relative_error < 1e-4, report.summary()

    os.makedirs(tmp_path / "cache")
    engine = litert_lm.Engine(path, backend=litert_lm.Backend.CPU(), cache_dir=str(tmp_path / "cache"),
                              max_num_tokens=160)
    try:
        session = engine.create_session(apply_prompt_template=False,
                                        sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=16)
        session.run_prefill([prompt])
        text = session.run_decode().texts[0]
    finally:
        engine.close() if hasattr(engine, "close") else None
    stop = reference.index(tok.eos_token_id) if tok.eos_token_id in reference else len(reference)
    stop = next((i for i, t in enumerate(reference[:stop]) if "\x00" in tok.decode([t])), stop)
    assert stop >= 16 and text == tok.decode(reference[:stop], skip_special_tokens=False)


@pytest.mark.parametrize("arch, tied", [("qwen3_5", False), ("qwen3_5", True), ("qwen3_5_moe", False)])
def test_image_text_checkpoint_exports_its_language_model(arch, tied, tmp_path):
    """A Qwen 3.5 image+text checkpoint (model_type qwen3_5: text_config, weights under model.language_model.,
    a vision tower, the output layer tied to the embeddings or not by the top-level tie_word_embeddings): its
    language model is exported, and decodes text as the image+text model does, in LiteRT-LM and our runner.
    (AutoModelForCausalLM loads such a directory as a Qwen3_5ForCausalLM of the text config, whose own
    tie_word_embeddings (False) leaves a tied checkpoint's output layer missing, drawn at random.)"""
    import os

    import torch
    import transformers

    from litert_torch import generative
    from litert_torch.generative.examples import spread_weights
    from litert_torch.generative.export_hf import export
    from tests.generative.test_llm import CACHE, PREFILL, PROMPT, engine_greedy, hf_greedy

    tok = tiny_lm.tokenizer()
    text = tiny_lm.config(arch, len(tok)).to_dict()
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    classes = {"qwen3_5": (transformers.Qwen3_5Config, transformers.Qwen3_5ForConditionalGeneration),
               "qwen3_5_moe": (transformers.Qwen3_5MoeConfig, transformers.Qwen3_5MoeForConditionalGeneration)}
    config_class, model_class = classes[arch]
    config = config_class(text_config=text, tie_word_embeddings=tied, vision_config=vision)
    torch.manual_seed(0)
    wrapper = spread_weights(model_class(config).eval())
    src = str(tmp_path / "src")
    wrapper.save_pretrained(src)
    tok.save_pretrained(src)
    path = export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=PREFILL, cache_length=CACHE,
                         quantization_recipe="none")
    hf = model_class.from_pretrained(src, dtype=torch.float32).eval()
    ids = tok(PROMPT).input_ids
    reference = hf_greedy(hf, ids, 16)
    assert list(generative.load(path).generate_ids(ids, 16, stop=False)) == reference
    text_out = engine_greedy(path, str(tmp_path / "cache"), PROMPT, 16)
    stop = reference.index(tok.eos_token_id) if tok.eos_token_id in reference else len(reference)
    stop = next((i for i, t in enumerate(reference[:stop]) if "\x00" in tok.decode([t])), stop)
    assert text_out == tok.decode(reference[:stop], skip_special_tokens=False)
    assert os.listdir(tmp_path / "out") == ["model.litertlm"]
