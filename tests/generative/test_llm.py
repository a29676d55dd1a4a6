"""Hugging Face causal LMs -> .litertlm bundles, run by the real LiteRT-LM runtime and by our runner, token for
token against Hugging Face's greedy generate."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
litert_lm = pytest.importorskip("litert_lm")
pytest.importorskip("litert_lm_builder")

from litert_torch import generative  # noqa: E402
from litert_torch.errors import InvalidArgumentError, LiteRTTorchError  # noqa: E402
from litert_torch.generative import CacheFullError, UnsupportedModelError  # noqa: E402
from litert_torch.generative.export_hf import export  # noqa: E402
from litert_torch.generative.hf import ModelSourceError  # noqa: E402
from tests.generative import tiny_lm  # noqa: E402

# 52 tokens with the start token: longer than the largest prefill length (16), so that the prompt is prefilled
# in chunks, the last one padded.
PROMPT = "once upon a time there was a little robot who liked"
NEW_TOKENS = 32
PREFILL = [4, 16]
CACHE = 96


def hf_greedy(hf, ids: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def engine_greedy(bundle: str, cache_dir: str, prompt: str, n: int) -> str:
    os.makedirs(cache_dir, exist_ok=True)
    engine = litert_lm.Engine(bundle, backend=litert_lm.Backend.CPU(), cache_dir=cache_dir, max_num_tokens=CACHE)
    try:
        session = engine.create_session(apply_prompt_template=False,
                                        sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=n)
        session.run_prefill([prompt])
        return session.run_decode().texts[0]
    finally:
        engine.close() if hasattr(engine, "close") else None


@pytest.mark.parametrize("arch", tiny_lm.ARCHS + tiny_lm.DIRECT_ARCHS)
def test_architecture_decodes_like_hugging_face(arch, tmp_path):
    src = tiny_lm.save(str(tmp_path / "src"), arch)
    bundle = export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=PREFILL, cache_length=CACHE,
                           quantization_recipe="none")
    assert os.listdir(tmp_path / "out") == ["model.litertlm"]
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import unpack_bundle

    # tensors moved again and again by the layout passes keep names of bounded length
    model = read_model(unpack_bundle(bundle)[0])
    names = [t.name for g in model.subgraphs for t in g.tensors()]
    assert max(map(len, names)) < 80, max(names, key=len)
    # RoPE's rotate-half negates in the prologue, once per layer type, not in every layer
    assert all(sum(op.opcode == "NEG" for op in g.ops) <= 2 for g in model.subgraphs)

    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(src)
    ids = tok(PROMPT).input_ids
    reference = hf_greedy(hf, ids, NEW_TOKENS)
    assert len(set(reference)) > 3, "the test model's continuation is degenerate"

    # The real LiteRT-LM runtime: it prepends the start token itself and stops at the stop token.
    text = engine_greedy(bundle, str(tmp_path / "cache"), PROMPT, NEW_TOKENS)
    stop = reference.index(tok.eos_token_id) if tok.eos_token_id in reference else len(reference)
    # (its Python text ends at a NUL character, which a random model may generate: compared up to there)
    stop = next((i for i, t in enumerate(reference[:stop]) if "\x00" in tok.decode([t])), stop)
    assert stop >= 16, "the test model reaches its stop token or a NUL before 16 tokens"
    # (its detokenizer writes a special token it generates, such as <pad>, as its text)
    assert text == tok.decode(reference[:stop], skip_special_tokens=False)

    # Our runner, from the same bundle: the same tokens, and a validation report that says so.
    llm = generative.load(bundle)
    assert llm.encode(PROMPT) == ids
    assert list(llm.generate_ids(ids, NEW_TOKENS, stop=False)) == reference
    report = generative.validate_llm(llm, hf, ids, NEW_TOKENS)
    assert report.identical and report.token_agreement == 1.0
    assert report.max_relative_error < 1e-4, report.summary()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return tiny_lm.save(str(tmp_path_factory.mktemp("llama")), "llama")


def test_quantized_bundles_run_and_report(llama_dir, tmp_path):
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()
    sizes = {}
    for recipe in ("none", "dynamic_wi8_afp32", "dynamic_wi4b32_afp32"):
        out = export.export(model=llama_dir, output_dir=str(tmp_path / recipe), prefill_lengths=PREFILL,
                            cache_length=CACHE, quantization_recipe=recipe, keep_temporary_files=True)
        sizes[recipe] = os.path.getsize(os.path.join(tmp_path / recipe, "model.tflite"))
        llm = generative.load(out)
        report = generative.validate_llm(llm, hf, llm.encode(PROMPT), 16)
        if recipe == "none":
            assert report.identical
        else:  # quantized weights (and int8 activations inside each product): close, not exact; the report
            # says how close (random 64-wide weights lose much to per-tensor dynamic activation quantization)
            assert report.step_top1_agrees[0], report.summary()
            assert 0 < report.max_relative_error < 1.0, report.summary()
            assert len(report.step_max_abs_error) == 16 and "teacher-forced" in report.summary()
            # layer by layer at one step: every decoder layer compared, each a little off, none far
            assert len(report.layer_errors) == hf.config.num_hidden_layers, report.summary()
            assert all(e is not None and 0 < e < 1 for e in report.layer_errors), report.summary()
            assert f"layers at step {report.layer_step}" in report.summary()
        text = engine_greedy(out, str(tmp_path / "cache" / recipe), PROMPT, 8)
        assert isinstance(text, str)
    assert sizes["dynamic_wi8_afp32"] < 0.5 * sizes["none"]
    assert sizes["dynamic_wi4b32_afp32"] < sizes["dynamic_wi8_afp32"]

    from litert_torch.flatbuffer.reader import read_model

    model = read_model(open(os.path.join(tmp_path / "dynamic_wi8_afp32", "model.tflite"), "rb").read())
    lookups = [op for g in model.subgraphs for op in g.ops if op.opcode == "EMBEDDING_LOOKUP"]
    assert lookups and all(op.inputs[1].dtype == np.int8 for op in lookups)  # the embedding table too


def test_int8_experts_are_int8_products_in_place_and_gathered_as_int8(tmp_path):
    """dynamic_wi8_afp32 on a mixture-of-experts model: the experts' tables are stored int8 (a token gathers its
    chosen experts' int8 tables and their scales, then widens them), and each expert's first tile of a prefill
    chunk is an int8 product against the table as it is, scaled after; the model shrinks like a dense one and
    stays close."""
    import transformers

    from litert_torch.flatbuffer.reader import read_model

    src = tiny_lm.save(str(tmp_path / "src"), "qwen3_moe", moe_intermediate_size=64)
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    sizes, models = {}, {}
    for recipe in ("none", "dynamic_wi8_afp32"):
        out = export.export(model=src, output_dir=str(tmp_path / recipe), prefill_lengths=PREFILL,
                            cache_length=CACHE, quantization_recipe=recipe, keep_temporary_files=True)
        models[recipe] = read_model(open(os.path.join(tmp_path / recipe, "model.tflite"), "rb").read())
        sizes[recipe] = sum(b.nbytes for g in models[recipe].subgraphs
                            for b in {id(t.data): t.data for t in g.tensors() if t.is_constant}.values())
        report = generative.validate_llm(generative.load(out), hf, hf_tokens(src), 8)
        if recipe == "none":
            assert report.identical, report.summary()
        else:
            assert report.step_top1_agrees[0] and report.max_relative_error < 0.5, report.summary()
    ops = [op for g in models["dynamic_wi8_afp32"].subgraphs for op in g.ops]
    tables = [op.inputs[0] for op in ops if op.opcode == "GATHER" and op.inputs[0].is_constant
              and op.inputs[0].rank == 3]
    assert tables and all(t.dtype in (np.int8, np.float32) for t in tables)
    assert not any(t.dtype == np.float32 and t.shape[-2] > 1 for t in tables)  # only [E, 1, columns] scales

    def in_place(recipe: str) -> list:
        return [op for g in models[recipe].subgraphs for op in g.ops if op.opcode == "BATCH_MATMUL"
                and any(t is not None and t.is_constant and t.rank == 3 for t in op.inputs)]

    # prefill multiplies each expert's first tile by its table in place, in float and in int8
    assert in_place("none") and len(in_place("none")) == len(in_place("dynamic_wi8_afp32"))
    assert all(op.inputs[1].dtype == np.int8 for op in in_place("dynamic_wi8_afp32"))
    assert sizes["dynamic_wi8_afp32"] < 0.4 * sizes["none"], sizes


def hf_tokens(src: str) -> list[int]:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(src)(PROMPT).input_ids


def test_validation_names_the_layer_where_a_model_departs(llama_dir, tmp_path):
    """A float bundle against its Hugging Face model with the second layer's MLP changed afterwards: the tokens
    differ, and the layer comparison puts the departure at layer 1, not 0."""
    import transformers

    out = export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=PREFILL, cache_length=CACHE,
                        quantization_recipe="none")
    llm = generative.load(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()
    same = generative.validate_llm(llm, hf, llm.encode(PROMPT), 8, layers=True)
    assert same.identical and same.first_divergent_layer is None
    assert all(e < 1e-4 for e in same.layer_errors), same.summary()
    with torch.no_grad():
        hf.model.layers[1].mlp.down_proj.weight.mul_(3.0)
    changed = generative.validate_llm(llm, hf, llm.encode(PROMPT), 8, layers=True)
    assert changed.layer_errors[0] < 1e-4 and changed.first_divergent_layer == 1, changed.summary()
    assert "first beyond" in changed.summary()


def test_runner_streams_text_samples_and_keeps_state(llama_dir, tmp_path):
    out = export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=PREFILL, cache_length=CACHE,
                        quantization_recipe="none")
    llm = generative.load(out)
    pieces = list(llm.generate(PROMPT, max_new_tokens=12))
    ids = llm.encode(PROMPT)
    greedy = list(llm.generate_ids(ids, 12))
    assert "".join(pieces) == llm.decode_text(greedy)

    # multi-byte characters the byte-level tokenizer splits over several tokens stream out whole
    text = " café 日本"
    text_ids = llm.encode(text)[1:]  # without the start token
    assert len(text_ids) > 6
    llm.generate_ids = lambda *args, **kwargs: iter(text_ids)
    streamed = []
    pieces = list(llm.generate(PROMPT, on_token=streamed.append))
    assert "".join(pieces) == text and streamed == pieces and not any("\ufffd" in p for p in pieces), pieces
    del llm.generate_ids

    sampled = [list(llm.generate_ids(ids, 12, generative.Sampling(temperature=1.0, top_k=20, seed=s)))
               for s in (1, 1, 2)]
    assert sampled[0] == sampled[1]  # seeded
    assert all(t < llm.layout.vocab_size for t in sampled[2])

    # Prefill in one go or token by token: the same cache, the same next logits.
    llm.reset()
    a = llm.prefill(ids[:20])
    llm.reset()
    for t in ids[:19]:
        llm.decode(t)
    b = llm.decode(ids[19])
    np.testing.assert_allclose(a, b, atol=1e-5)

    llm.reset()
    with pytest.raises(CacheFullError, match="cache"):
        list(llm.generate_ids(ids, CACHE))
    with pytest.raises(ValueError):
        list(llm.generate_ids(ids, 4, generative.Sampling(temperature=-1)))


def test_bad_sources_and_options_leave_nothing(tmp_path, llama_dir):
    out = tmp_path / "out"
    with pytest.raises(ModelSourceError, match="not a directory"):
        export.export(model=str(tmp_path / "missing"), output_dir=str(out))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelSourceError, match="config.json"):
        export.export(model=str(empty), output_dir=str(out))

    no_tok = tmp_path / "no_tok"
    tiny_lm.save(str(no_tok), "qwen2")
    os.unlink(no_tok / "tokenizer.json")
    with pytest.raises(ModelSourceError, match="tokenizer.json"):
        export.export(model=str(no_tok), output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)

    dyn = tmp_path / "dyn"  # dynamic NTK: exact up to max_position_embeddings (512), not past it
    tiny_lm.save(str(dyn), "llama", rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    with pytest.raises(UnsupportedModelError, match=r"rope_type = 'dynamic'.*cache_length <= 512"):
        export.export(model=str(dyn), output_dir=str(out), prefill_lengths=PREFILL, cache_length=600)

    with pytest.raises(InvalidArgumentError, match="exceeds cache_length"):
        export.export(model=llama_dir, output_dir=str(out), prefill_lengths=[128], cache_length=64)
    with pytest.raises(InvalidArgumentError, match="unknown quantization recipe"):
        export.export(model=llama_dir, output_dir=str(out), quantization_recipe="int3_magic")
    with pytest.raises(LiteRTTorchError, match="tokenizer"):
        export.export(model=tiny_lm.model("llama", 260), output_dir=str(out))  # in memory, no tokenizer
    assert not out.exists()


@pytest.mark.parametrize("arch", ["phi", "stablelm", "olmo2", "olmo3", "lfm2", "gpt_oss", "lfm2_moe", "qwen3_next",
                                  "qwen3_5", "qwen3_5_moe"])
def test_direct_only_architectures_in_memory_and_never_traced(arch, tmp_path):
    """Phi, StableLM and OLMo 2 are built op by op, from a directory (read with transformers) or a model in
    memory; the traced builder refuses them by name rather than building a different decoder."""
    from litert_torch.generative.config import LlmConfig
    from litert_torch.generative.model import build

    tok = tiny_lm.tokenizer()
    hf = tiny_lm.model(arch, len(tok))
    out = export.export(model=hf, tokenizer=tok, output_dir=str(tmp_path / "out"), prefill_lengths=[8],
                        cache_length=CACHE, quantization_recipe="none", bundle_litert_lm=False)
    from litert_torch.generative.runner import LlmRunner

    ids = tok(PROMPT).input_ids
    llm = LlmRunner(open(out, "rb").read(), tok)
    assert list(llm.generate_ids(ids, 16, stop=False)) == hf_greedy(hf, ids, 16)
    with pytest.raises(UnsupportedModelError, match=f"model_type '{hf.config.model_type}'.*built op by op only"):
        build(dict(hf.state_dict()), LlmConfig.from_hf(hf.config), {}, CACHE)


def test_unsupported_configs_are_named():
    from litert_torch.generative.config import LlmConfig

    cfg = tiny_lm.config("llama", 100).to_dict()
    for key, value, pattern in [("model_type", "mamba", "model_type 'mamba'"),
                                ("hidden_act", "relu2", "hidden_act 'relu2'"),
                                ("rope_parameters", {"rope_type": "magic", "rope_theta": 1e4}, "'magic'"),
                                ("num_key_value_heads", 3, "not a multiple")]:
        with pytest.raises(UnsupportedModelError, match=pattern):
            LlmConfig.from_hf({**cfg, key: value})
    # soft-capping is Gemma 2's and 3's: on another architecture (whose Hugging Face model would ignore it) it
    # names the field
    with pytest.raises(UnsupportedModelError, match="attn_logit_softcapping = 50.0: the llama"):
        LlmConfig.from_hf({**cfg, "attn_logit_softcapping": 50.0})
    gemma = LlmConfig.from_hf({**tiny_lm.config("gemma3", 100).to_dict(), "attn_logit_softcapping": 50.0})
    assert gemma.attn_softcap == 50.0


@pytest.mark.parametrize("arch", ["qwen3", "mixtral", "qwen2_moe"])  # in memory: fused expert tables
def test_model_in_memory_with_tokenizer(tmp_path, arch):
    tok = tiny_lm.tokenizer()
    hf = tiny_lm.model(arch, len(tok))
    path = export.export(model=hf, tokenizer=tok, output_dir=str(tmp_path), prefill_lengths=[8], cache_length=64,
                         quantization_recipe="none", bundle_litert_lm=False)
    assert path.endswith("model.tflite") and os.listdir(tmp_path) == ["model.tflite"]
    llm = generative.LlmRunner(open(path, "rb").read(), tok)
    ids = tok(PROMPT).input_ids[:20]
    assert list(llm.generate_ids(ids, 10, stop=False)) == hf_greedy(hf, ids, 10)


def test_model_in_memory_to_a_bundle_runs_in_litert_lm(tmp_path):
    """A PreTrainedModel and its tokenizer in memory, to a bundle: its tokenizer, chat template and stop token
    are carried in it, and LiteRT-LM continues the prompt as Hugging Face does."""
    from litert_torch.generative.bundle import read_bundle

    tok = tiny_lm.tokenizer()
    hf = tiny_lm.model("llama", len(tok))
    hf.generation_config.eos_token_id = tok.eos_token_id
    path = export.export(model=hf, tokenizer=tok, output_dir=str(tmp_path / "out"), prefill_lengths=PREFILL,
                         cache_length=CACHE, quantization_recipe="none")
    assert os.listdir(tmp_path / "out") == ["model.litertlm"]
    bundle = read_bundle(path)
    assert bundle.info.chat_template == tok.chat_template and bundle.info.stop_token_ids == [tok.eos_token_id]
    assert bundle.tokenizer and bundle.info.start_token_id == tok.bos_token_id
    ids = tok(PROMPT).input_ids
    reference = hf_greedy(hf, ids, 16)
    stop = reference.index(tok.eos_token_id) if tok.eos_token_id in reference else len(reference)
    text = engine_greedy(path, str(tmp_path / "cache"), PROMPT, 16)
    assert text == tok.decode(reference[:stop], skip_special_tokens=False)


def test_cli_export_hf(tmp_path, llama_dir):
    from litert_convert.main import main

    out = tmp_path / "m.litertlm"
    rc = main(["export-hf", llama_dir, "-o", str(out), "--prefill", "4,16", "--cache", str(CACHE), "--quantize",
               "none", "--quiet"])
    assert rc == 0 and out.exists()
    assert main(["export-hf", llama_dir, "-o", str(out), "--quiet"]) == 2  # exists, no --force
    assert main(["export-hf", str(tmp_path / "nope"), "-o", str(tmp_path / "x.litertlm")]) == 2
    assert main(["export-hf", llama_dir, "-o", str(tmp_path / "y.litertlm"), "--prefill", "a,b"]) == 2
    assert main(["export-hf", llama_dir, "-o", str(tmp_path / "y.litertlm"), "--quantize", "nope"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["m.litertlm"]


def test_cli_export_hf_prints_each_stage_with_its_time(tmp_path, llama_dir, capsys):
    import re

    from litert_convert.main import main

    out = tmp_path / "m.litertlm"
    assert main(["export-hf", llama_dir, "-o", str(out), "--prefill", "4,16", "--cache", str(CACHE), "--quantize",
                 "dynamic_wi8_afp32"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    stages = [m.group(2) for line in lines if (m := re.match(r"\[\s*(\d+\.\d) s\] (.+)", line))]
    assert stages[0] == "read" and stages[-1] == "bundle", lines
    for key in ("prefill_4", "prefill_16", "decode"):
        assert f"optimize {key}" in stages, stages
    assert "quantize" in stages and stages.index("quantize") < stages.index("bundle")
    times = [float(re.match(r"\[\s*(\d+\.\d) s\]", line).group(1)) for line in lines if line.startswith("[")]
    assert times == sorted(times)
    assert re.fullmatch(rf"wrote {re.escape(str(out))} \(\d+\.\d MB\) in \d+\.\d s", lines[-1]), lines[-1]


def test_cli_inspect_reads_a_bundle(tmp_path, llama_dir, capsys):
    import json

    from litert_convert.main import main

    bundle = export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=PREFILL, cache_length=CACHE,
                           quantization_recipe="none")
    assert main(["inspect", bundle]) == 0
    text = capsys.readouterr().out
    generation = json.load(open(os.path.join(llama_dir, "generation_config.json")))
    assert "LiteRT-LM bundle" in text and f"stop {generation['eos_token_id']}, at most {CACHE}" in text
    assert f"state buffers of {CACHE} positions" in text and "signature 'decode'" in text
    assert main(["inspect", bundle, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bundle"]["chat_template"] == tiny_lm.CHAT_TEMPLATE
    assert [b["name"] for b in summary["bundle"]["state_buffers"]][:2] == ["kv_cache_k_0", "kv_cache_v_0"]
    assert {s["key"] for s in summary["signatures"]} == {"decode", *(f"prefill_{n}" for n in PREFILL)}
    damaged = tmp_path / "damaged.litertlm"
    data = open(bundle, "rb").read()
    damaged.write_bytes(data[:64])
    assert main(["inspect", str(damaged)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) <= 3, err


def test_cli_bench_and_view_read_a_bundles_model(tmp_path, llama_dir, capsys):
    import importlib.util

    from litert_convert.main import main
    from litert_torch.generative.bundle import read_bundle

    out = export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=[4], cache_length=32,
                        quantization_recipe="none")
    bundle = tmp_path / "tiny.litertlm"
    os.rename(out, bundle)
    assert main(["bench", str(bundle), "--runs", "2", "--warmup", "1", "--json"]) == 0
    assert "TFL3" not in capsys.readouterr().err
    if importlib.util.find_spec("model_explorer") is None:
        pytest.skip("Model Explorer (pip install -e '.[view]')")
    assert main(["view", str(bundle), "--export", str(tmp_path / "shared"), "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "shared" / "tiny.html")  # named as docs/VIEW.md says
    assert (tmp_path / "shared" / "tiny.tflite").read_bytes() == read_bundle(str(bundle)).tflite


def test_cli_validate_llm(tmp_path, llama_dir, capsys):
    from litert_convert.main import main

    bundle = export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=PREFILL, cache_length=CACHE,
                           quantization_recipe="none")
    assert main(["validate", bundle, llama_dir, "--prompt", PROMPT, "--tokens", "12", "--quiet"]) == 0
    assert "identical to Hugging Face" in capsys.readouterr().out
    assert main(["validate", bundle, llama_dir, "--tokens", str(CACHE + 1)]) == 2  # does not fit the cache


def test_longrope_within_its_original_length(tmp_path):
    """Phi-3.5/Phi-4-mini's LongRoPE: exact while the cache stays within original_max_position_embeddings."""
    import transformers

    half = 8  # head_dim 16 / 2
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": CACHE,
            "short_factor": [1.0 + 0.1 * i for i in range(half)], "long_factor": [2.0 + 0.5 * i for i in range(half)],
            "partial_rotary_factor": 1.0}
    src = tiny_lm.save(str(tmp_path / "src"), "phi3", rope_parameters=rope, max_position_embeddings=4 * CACHE,
                       original_max_position_embeddings=CACHE)
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    out = export.export(model=src, output_dir=str(tmp_path / "out"), prefill_lengths=PREFILL, cache_length=CACHE,
                        quantization_recipe="none")
    llm = generative.load(out)
    ids = llm.encode(PROMPT)
    assert list(llm.generate_ids(ids, 24, stop=False)) == hf_greedy(hf, ids, 24)
    with pytest.raises(UnsupportedModelError, match="longrope"):
        export.export(model=src, output_dir=str(tmp_path / "long"), prefill_lengths=PREFILL, cache_length=2 * CACHE)


ROPES = {
    "default": None,
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
}


@pytest.mark.parametrize("arch,rope", [(a, "default") for a in tiny_lm.ARCHS]
                         + [("llama", r) for r in ROPES if r != "default"] + [("phi3", "partial")])
def test_rope_tables_are_hugging_faces_and_keep_one_half(arch, rope):
    """The RoPE tables, computed from the config alone (no Hugging Face model is built when exporting a
    directory), are one half of the rows Hugging Face's rotary module gives (its rows are each angle twice), to
    float32 rounding, for every architecture and RoPE type (the reference's own functions give that module's
    rows bit for bit); the prologue gives back the full rows at any positions."""
    from litert_torch.generative.config import LlmConfig
    from litert_torch.generative.model import build
    from litert_torch.generative.rope import rope_tables

    overrides = {}
    if rope == "partial":  # Phi-3 rotates a fraction of each head
        overrides["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    elif ROPES[rope] is not None:
        overrides["rope_parameters"] = ROPES[rope]
    hf = _with_rope(arch, overrides) if overrides else tiny_lm.model(arch, 64)
    cfg = LlmConfig.from_hf(hf.config)
    tables = rope_tables(cfg, hf.config.rope_parameters, CACHE)
    reference = tiny_lm.hf_rope_tables(hf.config, cfg, CACHE)
    if rope not in ("default", "partial"):
        assert hf.config.rope_parameters["rope_type"] == rope
    if rope == "partial":
        assert all(cos.shape[-1] == cfg.head_dim // 4 for cos, _ in tables.values())
    positions = torch.arange(CACHE)[None, :]
    probe = torch.zeros(1, 1, cfg.hidden_size)
    assert sorted(tables) == sorted(reference)
    for layer_type, (cos, sin) in reference.items():
        args = (layer_type,) if arch == "gemma3" else ()
        hf_cos, hf_sin = hf.model.rotary_emb(probe, positions, *args)
        assert torch.equal(cos, hf_cos[0]) and torch.equal(sin, hf_sin[0]), (arch, rope, layer_type)
        half = cos.shape[-1] // 2
        bound = 2.0 ** -23 * (2 + np.arange(CACHE))[:, None]
        for ours, theirs in zip(tables[layer_type], (cos, sin)):
            assert ours.shape == (CACHE, half)
            assert (np.abs(ours - theirs[:, :half].numpy()) <= bound).all(), (arch, rope, layer_type)

    lm = build(dict(hf.state_dict()), cfg, tables, CACHE)
    prologue = lm.prologue
    pos = torch.tensor([0, 5, 6, CACHE - 1])
    out = prologue(torch.zeros(1, len(pos), dtype=torch.long), pos)
    for i, t in enumerate(prologue.layer_types):
        cos, sin = (torch.from_numpy(a) for a in tables[t])
        assert torch.equal(out[2 + 3 * i + 1][0, :, 0], torch.cat([cos[pos], cos[pos]], -1))
        # sin with its first half negated, which the layers' rotate-half expects
        assert torch.equal(out[2 + 3 * i + 2][0, :, 0], torch.cat([-sin[pos], sin[pos]], -1))


def _with_rope(arch: str, overrides: dict):
    """A model whose config is built with `overrides` (RoPE parameters are standardised when a config is made,
    so they cannot be set afterwards)."""
    import transformers

    cfg = tiny_lm.config(arch, 64).to_dict()
    cfg.update(overrides)
    config = transformers.AutoConfig.for_model(**cfg)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _tflite_greedy(src: str, out: str, ids: list[int], n: int) -> list[int]:
    path = export.export(model=src, output_dir=out, prefill_lengths=PREFILL, cache_length=CACHE,
                         quantization_recipe="none", bundle_litert_lm=False)
    return list(generative.LlmRunner(open(path, "rb").read(), None).generate_ids(ids, n, stop=False))


def test_checkpoint_layouts_are_read_without_building_the_model(tmp_path):
    """A directory's weights are read from its files by name, whatever their layout: sharded safetensors with
    an index, bfloat16 tensors (widened as Hugging Face widens them), a PyTorch .bin state dict, model.safetensors
    beside another file; each decodes
    like Hugging Face's model loaded from the same directory. The export never builds that model: neither the
    modeling code nor transformers' model machinery is imported."""
    import subprocess
    import sys

    import transformers

    src = tiny_lm.save(str(tmp_path / "src"), "qwen3_moe")
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(src)(PROMPT).input_ids[:24]
    n = 12

    sharded = tmp_path / "sharded"
    hf.save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").exists()
    assert len([f for f in os.listdir(sharded) if f.endswith(".safetensors")]) > 2
    assert _tflite_greedy(str(sharded), str(tmp_path / "o1"), ids, n) == hf_greedy(hf, ids, n)

    bf16 = tmp_path / "bf16"
    hf.to(torch.bfloat16).save_pretrained(bf16)
    hf.float()
    hf_bf16 = transformers.AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.float32).eval()
    assert _tflite_greedy(str(bf16), str(tmp_path / "o2"), ids, n) == hf_greedy(hf_bf16, ids, n)

    legacy = tmp_path / "legacy"  # a PyTorch state dict (read with weights_only: tensors, never code)
    legacy.mkdir()
    for f in os.listdir(src):
        if not f.endswith(".safetensors"):
            (legacy / f).write_bytes((tmp_path / "src" / f).read_bytes())
    from safetensors.torch import load_file, save_file

    torch.save(load_file(os.path.join(src, "model.safetensors")), legacy / "pytorch_model.bin")
    assert _tflite_greedy(str(legacy), str(tmp_path / "o3"), ids, n) == hf_greedy(hf, ids, n)

    # A file beside model.safetensors (a PEFT adapter, say) is not read: Hugging Face reads model.safetensors
    save_file({"model.norm.weight": torch.zeros(64)}, os.path.join(src, "adapter_model.safetensors"))
    code = ("import sys\nfrom litert_torch.generative.export_hf import export\n"
            f"export.export(model={src!r}, output_dir={str(tmp_path / 'o4')!r}, prefill_lengths=[4], "
            "cache_length=32, quantization_recipe='none')\n"
            "print(sorted(m for m in sys.modules if m in ('transformers.modeling_utils', "
            "'transformers.models.qwen3_moe.modeling_qwen3_moe')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_weights_that_do_not_fit_their_config_are_named_and_leave_nothing(tmp_path):
    from safetensors.torch import load_file, save_file

    src = tiny_lm.save(str(tmp_path / "src"), "qwen2")
    file = os.path.join(src, "model.safetensors")
    weights = load_file(file)
    out = tmp_path / "out"

    wrong = dict(weights)  # a norm scale of the wrong length would broadcast: refused by name
    wrong["model.layers.1.post_attention_layernorm.weight"] = torch.ones(1)
    save_file(wrong, file)
    with pytest.raises(UnsupportedModelError, match=r"model.layers.1.post_attention_layernorm.weight has shape \[1\]"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)

    missing = {k: v for k, v in weights.items() if k != "lm_head.weight"}  # untied: the head is needed
    save_file(missing, file)
    with pytest.raises(UnsupportedModelError, match="no weight lm_head.weight"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)

    quantized = dict(weights)  # an integer weight: a quantized checkpoint, refused by name
    quantized["model.layers.0.mlp.up_proj.weight"] = torch.zeros_like(weights["model.layers.0.mlp.up_proj.weight"],
                                                                      dtype=torch.int8)
    save_file(quantized, file)
    with pytest.raises(UnsupportedModelError, match=r"model.layers.0.mlp.up_proj.weight is int8"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)

    save_file(weights, file)
    data = open(file, "rb").read()
    open(file, "wb").write(b"\xff" * 8 + data[8:])  # a header size past the end of the file
    with pytest.raises(ModelSourceError, match="could not read the weights"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)
    open(file, "wb").write(data[:len(data) // 2])  # truncated
    with pytest.raises(ModelSourceError, match="could not read the weights"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)

    os.unlink(file)  # an index naming a file that is not there
    with open(os.path.join(src, "model.safetensors.index.json"), "w") as f:
        f.write('{"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}')
    with pytest.raises(ModelSourceError, match="names weight files that are not in"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)
    save_file(weights, tmp_path / "outside.safetensors")  # an index does not reach outside its directory
    with open(os.path.join(src, "model.safetensors.index.json"), "w") as f:
        f.write('{"weight_map": {"model.norm.weight": "../outside.safetensors"}}')
    with pytest.raises(ModelSourceError, match="names weight files that are not in"):
        export.export(model=src, output_dir=str(out), prefill_lengths=PREFILL, cache_length=CACHE)
    assert not out.exists()


def test_top_p_samples_the_smallest_set_reaching_p_in_proportion():
    """top-p keeps the most likely tokens until their probabilities reach p (Hugging Face's nucleus), renormalised;
    with top-k first and temperature before both."""
    from litert_torch.generative.runner import Sampling

    probs = np.array([0.05, 0.5, 0.15, 0.3])
    logits = np.log(probs)
    rng = np.random.default_rng(0)

    def draws(sampling, n=4000):
        return np.bincount([sampling.pick(logits, rng) for _ in range(n)], minlength=4) / n

    nucleus = draws(Sampling(temperature=1.0, top_p=0.75))  # 0.5 + 0.3 reach 0.75; 0.5 alone does not
    assert nucleus[0] == nucleus[2] == 0
    np.testing.assert_allclose(nucleus[[1, 3]], [0.5 / 0.8, 0.3 / 0.8], atol=0.03)
    assert set(np.flatnonzero(draws(Sampling(temperature=1.0, top_p=0.5)))) == {1}
    assert set(np.flatnonzero(draws(Sampling(temperature=1.0, top_p=0.99)))) == {0, 1, 2, 3}
    capped = draws(Sampling(temperature=1.0, top_k=3, top_p=0.99))  # top-k drops the 0.05 token first
    assert capped[0] == 0 and (capped[1:] > 0).all()
    cold = draws(Sampling(temperature=0.25, top_p=0.85))  # sharper: the 0.5 token alone holds 0.88 of the mass
    assert set(np.flatnonzero(cold)) == {1}


def test_damaged_llm_files_are_refused_before_the_runtime_sees_them(tmp_path, llama_dir, capsys):
    """generative.load and `litert-convert validate` check a converted LLM as EdgeModel checks a file: the ops
    against what their kernels need, and the layout metadata against the signatures it describes."""
    import json

    from litert_convert.main import main

    from litert_torch.errors import ModelFileError
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.generative.bundle import unpack_bundle
    from litert_torch.generative.layout import LAYOUT_KEY
    from litert_torch.metadata import decode, encode

    bundle = export.export(model=llama_dir, output_dir=str(tmp_path / "ok"), prefill_lengths=PREFILL,
                           cache_length=CACHE, quantization_recipe="none")
    flatbuffer = unpack_bundle(bundle)[0]

    def written(model, name: str) -> str:
        path = tmp_path / name
        path.write_bytes(serialize(model))
        return str(path)

    model = read_model(flatbuffer)
    decode_graph = model.subgraphs[next(s.subgraph for s in model.signatures if s.key == "decode")]
    fc = next(op for op in decode_graph.ops if op.opcode == "FULLY_CONNECTED")
    fc.outputs[0].shape = [*fc.outputs[0].shape[:-1], fc.outputs[0].shape[-1] + 3]
    with pytest.raises(ModelFileError, match="FULLY_CONNECTED"):
        generative.load(written(model, "bad_op.tflite"))

    for field, value, message in [("cache_length", CACHE * 2, "not 192 positions long|is not float32"),
                                  ("prefill_lengths", [4, 32], "no signature 'prefill_32'"),
                                  ("vocab_size", 7, "logits over 7 tokens"),
                                  ("cache_shapes", "nonsense", "malformed")]:
        model = read_model(flatbuffer)
        layout = decode(model.metadata[LAYOUT_KEY])
        layout[field] = value
        model.metadata[LAYOUT_KEY] = encode(layout)
        with pytest.raises(ModelFileError, match=message):
            generative.load(written(model, f"bad_{field}.tflite"))
    model = read_model(flatbuffer)
    model.metadata[LAYOUT_KEY] = json.dumps({"cache_length": 1}).encode()
    with pytest.raises(ModelFileError, match="metadata is malformed"):
        generative.load(written(model, "bad_layout.tflite"))

    truncated = tmp_path / "truncated.litertlm"
    data = open(bundle, "rb").read()
    truncated.write_bytes(data[: len(data) // 2])
    unreadable = "not a readable .litertlm bundle|holds no TFLite model|corrupt TFLite model"
    with pytest.raises(ModelFileError, match=unreadable):
        generative.load(str(truncated))
    capsys.readouterr()
    for path in (truncated, tmp_path / "bad_op.tflite"):
        assert main(["validate", str(path), llama_dir, "--tokens", "4"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error:") and len(err.strip().splitlines()) <= 3 and "Traceback" not in err, err
    assert generative.load(bundle).generate_ids([1, 2, 3], 2, stop=False)  # the undamaged file still runs


def test_bundle_metadata_reads_back_as_written(tmp_path, llama_dir):
    """The bundle's LLM metadata (start and stop tokens, chat template, maximum tokens) and executor metadata
    (each KV-cache pair named as the signatures name it, its axis and length), read back from the file."""
    import json

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import read_bundle

    bundle = read_bundle(export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=PREFILL,
                                       cache_length=CACHE, quantization_recipe="none"))
    tokenizer_config = json.load(open(os.path.join(llama_dir, "tokenizer_config.json")))
    template = tokenizer_config.get("chat_template")
    if template is None:
        template = open(os.path.join(llama_dir, "chat_template.jinja")).read()
    assert bundle.info.chat_template == template == tiny_lm.CHAT_TEMPLATE
    assert bundle.info.max_num_tokens == CACHE == bundle.max_history_size
    generation = json.load(open(os.path.join(llama_dir, "generation_config.json")))
    assert bundle.info.stop_token_ids == [generation["eos_token_id"]]
    assert bundle.info.start_token_id == generation["bos_token_id"]
    assert bundle.tokenizer == open(os.path.join(llama_dir, "tokenizer.json")).read()

    model = read_model(bundle.tflite)
    config = json.load(open(os.path.join(llama_dir, "config.json")))
    assert [b.name for b in bundle.state_buffers] == [
        f"kv_cache_{kind}_{i}" for i in range(config["num_hidden_layers"]) for kind in "kv"]
    for sig in model.signatures:
        graph = model.subgraphs[sig.subgraph]
        inputs, outputs = dict(zip(sig.input_names, graph.inputs)), dict(zip(sig.output_names, graph.outputs))
        for b in bundle.state_buffers:
            assert b.maximum_sequence_length == CACHE and b.kind == ("key" if "_k_" in b.name else "value")
            assert inputs[b.name].shape[b.sequence_axis] == CACHE, (sig.key, b)
            assert outputs[b.name].shape == inputs[b.name].shape


def test_grouped_query_attention_never_repeats_keys_or_values(tmp_path, llama_dir):
    """4 query heads over 2 KV heads: no tensor of the model (branch subgraphs included) holds the keys or
    values of a cache prefix more than once: every tensor with a cache axis and the head dimension is at most
    the size of the cache it reads."""
    import json

    from litert_torch import ir
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import unpack_bundle
    from litert_torch.generative.prefix import prefix_lengths

    cache = 256  # past the smallest prefix: the IF branches over 128 slots are there too
    config = json.load(open(os.path.join(llama_dir, "config.json")))
    kv_heads, head_dim = config["num_key_value_heads"], config["hidden_size"] // config["num_attention_heads"]
    assert config["num_attention_heads"] == 2 * kv_heads
    model = read_model(unpack_bundle(export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=[8],
                                                   cache_length=cache, quantization_recipe="none"))[0])
    graphs = ir.all_graphs(model)
    assert any("/attention_" in g.name for g in graphs)  # the prefix branches
    lengths = [*prefix_lengths(cache), cache]
    checked = 0
    for graph in graphs:
        for op in graph.ops:
            for t in op.outputs:
                shape = list(t.shape or [])
                span = next((n for n in lengths if n in shape), None)
                if span is not None and head_dim in shape:
                    checked += 1
                    assert int(np.prod(shape)) <= kv_heads * span * head_dim, (graph.name, op.opcode, shape)
    assert checked


def test_int8_quantization_report_names_what_stayed_float(llama_dir, tmp_path):
    """The bundle's model carries the quantization report: its sizes, the ops whose weights became int8, and
    each op left in float with the reason and the line that made it."""
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import unpack_bundle
    from litert_torch.metadata import decode
    from litert_torch.quantization.report import QUANTIZATION_KEY

    model = read_model(unpack_bundle(export.export(model=llama_dir, output_dir=str(tmp_path), prefill_lengths=PREFILL,
                                                   cache_length=CACHE, quantization_recipe="dynamic_wi8_afp32"))[0])
    report = decode(model.metadata[QUANTIZATION_KEY])
    assert report["mode"] == "dynamic-int8" and report["io"] == "float"
    int8 = [op for g in model.subgraphs for op in g.ops
            if any(t is not None and t.is_constant and t.dtype == np.int8 for t in op.inputs)]
    assert int8 and report["quantized_ops"] == len(int8)
    assert {op.opcode for op in int8} >= {"FULLY_CONNECTED", "EMBEDDING_LOOKUP"}
    # the constants as built (the writer then stores identical ones once: the file holds at most that)
    constants = {(t.data.ctypes.data, t.data.nbytes) for g in model.subgraphs for op in g.ops for t in op.inputs
                 if t is not None and t.is_constant}
    assert sum(n for _, n in constants) <= report["quantized_bytes"]
    assert report["quantized_bytes"] < 0.4 * report["float_bytes"]
    left = report["float_ops"]
    assert left and all(entry["reason"] and entry["location"].startswith("litert_torch/generative/") for entry in left)
    # what stayed float has float weights: the RoPE tables gathered at the input positions
    assert not {entry["opcode"] for entry in left} & {"FULLY_CONNECTED", "EMBEDDING_LOOKUP"}


def test_dynamic_int8_recipe_gives_ai_edge_quantizers_weights(llama_dir, tmp_path):
    """`dynamic_wi8_afp32` is quantized as the model is written (the quantizer would hold several copies of a
    large model), to exactly what ai-edge-quantizer's recipe of that name makes of the float model: every int8
    weight and its scales, the embedding table included. (The recipe given as a list goes to ai-edge-quantizer
    itself, with the float model as exported before quantization: a float bundle's model reads its token table
    with a GATHER, for LiteRT-LM's GPU backend, which that recipe leaves float.)"""
    from ai_edge_quantizer import recipe

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import unpack_bundle

    def exported(name: str, given) -> bytes:
        return unpack_bundle(export.export(model=llama_dir, output_dir=str(tmp_path / name), prefill_lengths=PREFILL,
                                           cache_length=CACHE, quantization_recipe=given))[0]

    def int8_weights(model) -> list:
        return [(graph.name, op.opcode, t) for graph in model.subgraphs for op in graph.ops for t in op.inputs
                if t is not None and t.is_constant and t.dtype == np.int8]

    ours = int8_weights(read_model(exported("ours", "dynamic_wi8_afp32")))
    theirs = int8_weights(read_model(exported("theirs", recipe.dynamic_wi8_afp32())))
    assert len(ours) == len(theirs) > 0
    assert {op for _, op, _ in ours} == {"FULLY_CONNECTED", "EMBEDDING_LOOKUP"}
    for (graph, op, a), (graph_b, op_b, b) in zip(ours, theirs):
        assert (graph, op, list(a.shape)) == (graph_b, op_b, list(b.shape))
        np.testing.assert_array_equal(a.data, b.data, err_msg=f"{graph} {op} {a.name}")
        assert a.quantization.scale == b.quantization.scale and a.quantization.axis == b.quantization.axis


RSS_CHILD = """
import json, sys
open("/proc/self/clear_refs", "w").write("5")  # VmHWM from here (a child starts from its parent's resident size)
from litert_torch.generative.export_hf import export
export.export(model=sys.argv[1], output_dir=sys.argv[2], prefill_lengths=[32], cache_length=256,
              quantization_recipe=sys.argv[3])
print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) * 1024)
"""


@pytest.mark.parametrize("recipe", ["none", "dynamic_wi8_afp32"])
def test_conversion_peak_memory_is_within_the_weights_bound(tmp_path, recipe):
    """A Llama of about 50M parameters (200 MB of float32 safetensors) converts at a peak resident size within 1.5x its
    float weights plus 500 MB: the weights are streamed from the mapped file, never copied whole."""
    import subprocess
    import sys

    import transformers
    from safetensors.numpy import save_file

    src = tmp_path / "src"
    tok = tiny_lm.tokenizer()
    layers, hidden, inner, heads, kv = 8, 768, 2048, 12, 4
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=inner,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                   tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                                   eos_token_id=tok.eos_token_id)
    cfg.save_pretrained(src)
    tok.save_pretrained(src)
    rng = np.random.default_rng(0)
    head = hidden // heads
    shapes = {"model.embed_tokens.weight": (len(tok), hidden), "model.norm.weight": (hidden,)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + name: shape for name, shape in [
            ("self_attn.q_proj.weight", (hidden, hidden)), ("self_attn.k_proj.weight", (kv * head, hidden)),
            ("self_attn.v_proj.weight", (kv * head, hidden)), ("self_attn.o_proj.weight", (hidden, hidden)),
            ("mlp.gate_proj.weight", (inner, hidden)), ("mlp.up_proj.weight", (inner, hidden)),
            ("mlp.down_proj.weight", (hidden, inner)), ("input_layernorm.weight", (hidden,)),
            ("post_attention_layernorm.weight", (hidden,))]})
    weights = {name: (0.02 * rng.standard_normal(shape, np.float32)) for name, shape in shapes.items()}
    float_bytes = sum(w.nbytes for w in weights.values())
    save_file(weights, str(src / "model.safetensors"))
    del weights
    proc = subprocess.run([sys.executable, "-c", RSS_CHILD, str(src), str(tmp_path / "out"), recipe],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak = int(proc.stdout.strip().splitlines()[-1])
    bound = 1.5 * float_bytes + 500e6
    assert peak <= bound, f"peak {peak / 1e6:.0f} MB > bound {bound / 1e6:.0f} MB"
    assert os.path.getsize(tmp_path / "out" / "model.litertlm") > (0.2 if recipe != "none" else 0.9) * float_bytes


def test_an_ai_edge_quantizer_float16_recipe_file_goes_through_the_quantizer(llama_dir, tmp_path):
    """A recipe file is handed to ai-edge-quantizer as it is: its float16 casting, here, of the weights of the
    dense layers and the embedding lookup; the bundle runs and its report names the recipe."""
    import json

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import unpack_bundle
    from litert_torch.metadata import decode
    from litert_torch.quantization.report import QUANTIZATION_KEY

    recipe = [{"regex": ".*", "operation": "*", "algorithm_key": "float_casting",
               "op_config": {"weight_tensor_config": {"num_bits": 16, "dtype": "FLOAT"},
                             "compute_precision": "FLOAT", "explicit_dequantize": True}}]
    path = tmp_path / "fp16_recipe.json"
    path.write_text(json.dumps(recipe))
    bundle = export.export(model=llama_dir, output_dir=str(tmp_path / "out"), prefill_lengths=PREFILL,
                           cache_length=CACHE, quantization_recipe=str(path))
    model = read_model(unpack_bundle(bundle)[0])
    assert any(op.opcode == "DEQUANTIZE" and op.inputs[0].is_constant and op.inputs[0].dtype == np.float16
               for g in model.subgraphs for op in g.ops)  # float16 weights widened at run time
    (used,) = decode(model.metadata[QUANTIZATION_KEY])["recipe"]  # as the quantizer filled in its defaults
    assert used["algorithm_key"] == "float_casting" and used["op_config"]["weight_tensor_config"]["num_bits"] == 16
    llm = generative.load(bundle)
    assert len(list(llm.generate_ids(llm.encode(PROMPT), 4, stop=False))) == 4
