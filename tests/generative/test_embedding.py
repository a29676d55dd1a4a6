"""Text embeddings: export(task="text_embedding") of tiny encoders (BERT, RoBERTa, XLM-RoBERTa, ModernBERT,
EmbeddingGemma-style Gemma 3) to a LiteRT-LM bundle, checked against the Hugging Face model with the
sentence-transformers modules of its directory, in our runner and in LiteRT-LM's EmbeddingEngine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from litert_torch import generative
from litert_torch.errors import InvalidArgumentError, LiteRTTorchError, ModelFileError
from litert_torch.generative import embedding_runner
from litert_torch.generative.embedding_runner import InputTooLongError
from litert_torch.generative.embedding_source import UnsupportedEmbeddingError
from litert_torch.generative.export_hf import export
from tests.generative import tiny_embed

pytest.importorskip("transformers")

FLOAT_COSINE = 0.9999
INT8_COSINE = 0.99

IDENTITY = "torch.nn.modules.linear.Identity"
TANH = "torch.nn.modules.activation.Tanh"

# name -> (family, sentence-transformers modules)
MODELS = {
    "bert": ("bert", {}),  # no modules.json: mean pooling over the attention mask
    "roberta": ("roberta", {}),
    "xlm-roberta": ("roberta", {"model_type": "xlm-roberta"}),
    "modernbert": ("modernbert", {}),
    # EmbeddingGemma's pipeline: mean pooling, two Dense layers without bias, L2 normalisation
    "embeddinggemma": ("gemma3", {"pooling": {"pooling_mode_mean_tokens": True},
                                  "dense": [(48, IDENTITY, False), (32, IDENTITY, False)], "normalize": True}),
    # every pooling mode at once (concatenated in sentence-transformers' order), a Dense with tanh and a bias
    "bert_all_pooling": ("bert", {"pooling": {m: True for m in (
        "pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_tokens",
        "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")},
        "dense": [(24, TANH, True)], "normalize": True, "max_seq_length": 24}),
}


def _save(folder: str, name: str) -> str:
    family, options = MODELS[name]
    options = dict(options)
    model_type = options.pop("model_type", None)
    path = tiny_embed.save(os.path.join(folder, name), family, **options)
    if model_type is not None:  # the same weights under another model_type of the family
        config_file = os.path.join(path, "config.json")
        config = json.load(open(config_file))
        config["model_type"] = model_type
        config["architectures"] = ["XLMRobertaModel"]
        json.dump(config, open(config_file, "w"))
    return path


def _engine_embeddings(bundle: str, texts: list[str], cache_dir: str) -> np.ndarray:
    litert_lm = pytest.importorskip("litert_lm")
    engine = litert_lm.EmbeddingEngine(bundle, cache_dir=cache_dir)
    options = litert_lm.EmbeddingOptions(normalize=False)
    return np.array([engine.compute_embedding(t, options).embedding for t in texts], np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (model directory, float bundle), each exported once."""
    cache = {}

    def get(name: str):
        if name not in cache:
            folder = tmp_path_factory.mktemp(name.replace("-", "_"))
            path = _save(str(folder), name)
            task = None if name == "bert" else "text_embedding"  # bert: the task read from config.json
            bundle = export.export(path, str(folder / "out"), task=task, prefill_lengths=[8, 24],
                                   quantization_recipe="none")
            cache[name] = (path, bundle)
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(MODELS))
def test_float_embeddings_match_hugging_face(name, exported, tmp_path):
    path, bundle = exported(name)
    reference = tiny_embed.reference(path, tiny_embed.TEXTS)
    runner = generative.load(bundle)
    assert isinstance(runner, embedding_runner.EmbeddingRunner)
    ours = runner.embed(tiny_embed.TEXTS)
    assert ours.shape == reference.shape
    assert tiny_embed.cosines(ours, reference).min() >= FLOAT_COSINE
    np.testing.assert_allclose(ours, reference, atol=1e-4 * np.abs(reference).max() + 1e-5)
    engine = _engine_embeddings(bundle, tiny_embed.TEXTS, str(tmp_path))
    assert tiny_embed.cosines(engine, reference).min() >= FLOAT_COSINE


@pytest.mark.parametrize("name, recipe, cosine", [
    ("bert", None, INT8_COSINE),  # None: the default recipe, dynamic_wi8_afp32
    ("modernbert", None, INT8_COSINE),
    ("embeddinggemma", None, INT8_COSINE),
    ("bert", "fp16", 0.999),
])
def test_quantized_embeddings(name, recipe, cosine, exported, tmp_path):
    path, float_bundle = exported(name)
    bundle = export.export(path, str(tmp_path / "out"), task="text_embedding", prefill_lengths=[8, 24],
                           quantization_recipe=recipe)
    assert os.path.getsize(bundle) < os.path.getsize(float_bundle)
    read = embedding_runner.read_embedding_bundle(bundle)
    from litert_torch.runtime.edge_model import EdgeModel

    for model in (read.embedder, read.encoder):  # quantized weights in both models, the token table included
        report = EdgeModel(model).quantization
        assert report.quantized_bytes < report.float_bytes
        if recipe is None:
            assert report.mode == "dynamic-int8" and report.quantized_ops > 0
    reference = tiny_embed.reference(path, tiny_embed.TEXTS)
    ours = embedding_runner.load_embedding(bundle).embed(tiny_embed.TEXTS)
    assert tiny_embed.cosines(ours, reference).min() >= cosine
    engine = _engine_embeddings(bundle, tiny_embed.TEXTS, str(tmp_path))
    assert tiny_embed.cosines(engine, reference).min() >= cosine


def test_bundle_sections(exported):
    _, bundle = exported("bert")
    read = embedding_runner.read_embedding_bundle(bundle)
    tok = tiny_embed.tokenizer("bert")
    assert (read.bos_token_id, read.eos_token_id) == (tok.cls_token_id, tok.sep_token_id)
    assert read.max_input_length == 24 and read.model_type == "generic_model"
    runner = embedding_runner.EmbeddingRunner(read)
    assert runner.lengths == [8, 24]
    assert runner.encode("hello world") == tok("hello world")["input_ids"]
    assert embedding_runner.is_embedding_bundle(bundle)
    from ai_edge_litert.interpreter import Interpreter

    signatures = Interpreter(model_content=read.encoder).get_signature_list()
    assert signatures == {f"encoder_{n}": {"inputs": ["embeddings", "input_mask"], "outputs": ["embedding"]}
                          for n in (8, 24)}
    signatures = Interpreter(model_content=read.embedder).get_signature_list()
    assert signatures == {"embedder": {"inputs": ["token"], "outputs": ["embeddings"]}}
    # litert-convert inspect describes the bundle and its encoder
    result = _cli("inspect", bundle)
    assert result.returncode == 0, result.stderr
    assert "text-embedding bundle (generic_model)" in result.stdout and "encoder_24" in result.stdout
    assert "EMBEDDING_LOOKUP" not in result.stdout  # the encoder's ops, not the embedder's


def test_default_length_is_the_sentence_transformers_limit(exported, tmp_path):
    path, _ = exported("bert_all_pooling")  # max_seq_length 24
    bundle = export.export(path, str(tmp_path / "out"), task="text_embedding", quantization_recipe="none",
                           keep_temporary_files=True)
    assert embedding_runner.load_embedding(bundle).lengths == [24]
    assert sorted(os.listdir(tmp_path / "out")) == ["embedder.tflite", "encoder.tflite", "model.litertlm",
                                                    "tokenizer.json"]


def test_too_long_input(exported, tmp_path):
    _, bundle = exported("bert")
    runner = embedding_runner.load_embedding(bundle)
    text = " ".join(["fox"] * 23)  # 25 tokens with [CLS] and [SEP]
    with pytest.raises(InputTooLongError, match="25 tokens.*24 tokens"):
        runner.embed(text)
    assert runner.embed(" ".join(["fox"] * 22)).shape == (1, 32)
    # the runtime refuses it too (its default overflow strategy is an error)
    with pytest.raises(RuntimeError, match="Failed to compute embedding"):
        _engine_embeddings(bundle, [text], str(tmp_path))
    # truncated, the end token kept: as the runtime's TRUNCATE strategy
    litert_lm = pytest.importorskip("litert_lm")
    engine = litert_lm.EmbeddingEngine(bundle, cache_dir=str(tmp_path))
    options = litert_lm.EmbeddingOptions(normalize=False,
                                         input_overflow_strategy=litert_lm.InputOverflowStrategy.TRUNCATE)
    truncated = np.array(engine.compute_embedding(text, options).embedding, np.float32)
    ours = runner.embed(text, truncate=True)
    assert tiny_embed.cosines(ours, truncated[None])[0] >= FLOAT_COSINE
    assert runner.truncated(runner.encode(text))[-1] == runner.bundle.eos_token_id


def _config_dir(tmp_path, config: dict, name: str = "model") -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


@pytest.mark.parametrize("config, match", [
    ({"model_type": "llama"}, "model_type 'llama' is not supported for text_embedding"),
    ({"model_type": "gemma3_text"}, "without use_bidirectional_attention is a causal decoder"),
])
def test_refused_architectures(tmp_path, config, match):
    path = _config_dir(tmp_path, config)
    with pytest.raises(UnsupportedEmbeddingError, match=match):
        export.export(path, str(tmp_path / "out"), task="text_embedding")
    assert not (tmp_path / "out").exists()


def _with_module(path: str, kind: str, config: dict | None) -> None:
    modules_file = os.path.join(path, "modules.json")
    modules = json.load(open(modules_file))
    folder = f"{len(modules)}_{kind}"
    modules.append({"idx": len(modules), "name": str(len(modules)), "path": folder, "type": kind})
    json.dump(modules, open(modules_file, "w"))
    os.makedirs(os.path.join(path, folder), exist_ok=True)
    if config is not None:
        json.dump(config, open(os.path.join(path, folder, "config.json"), "w"))


@pytest.mark.parametrize("change, match", [
    (lambda p: _with_module(p, "sentence_transformers.models.LayerNorm", {}), "module .*LayerNorm.* not supported"),
    (lambda p: json.dump({"pooling_mode_mean_tokens": True, "include_prompt": False},
                         open(os.path.join(p, "1_Pooling", "config.json"), "w")), "include_prompt"),
    (lambda p: json.dump({"pooling_mode_mean_tokens": False}, open(os.path.join(p, "1_Pooling", "config.json"), "w")),
     "selects no pooling mode"),
    (lambda p: json.dump({"in_features": 32, "out_features": 8, "activation_function": "torch.nn.modules.activation.SiLU"},
                         open(os.path.join(p, "2_Dense", "config.json"), "w")), "activation_function .*SiLU"),
])
def test_refused_sentence_transformers_modules(tmp_path, change, match):
    path = tiny_embed.save(str(tmp_path / "model"), "bert", pooling={"pooling_mode_mean_tokens": True},
                           dense=[(8, IDENTITY, True)])
    change(path)
    with pytest.raises(UnsupportedEmbeddingError, match=match):
        export.export(path, str(tmp_path / "out"), task="text_embedding")
    assert not (tmp_path / "out").exists()


def test_refused_options(tmp_path):
    path = _config_dir(tmp_path, {"model_type": "bert", "max_position_embeddings": 64})
    for options, match in [({"cache_length": 128}, "cache_length"), ({"bundle_litert_lm": False}, "bundle_litert_lm"),
                           ({"enable_dynamic_shape": True}, "enable_dynamic_shape"),
                           ({"prefill_lengths": [65]}, "exceeds the model's limit of 64"),
                           ({"prefill_lengths": [0]}, "positive"),
                           ({"quantization_recipe": "no_such_recipe"}, "unknown quantization recipe")]:
        with pytest.raises(InvalidArgumentError, match=match):
            export.export(path, str(tmp_path / "out"), task="text_embedding", **options)
    with pytest.raises(InvalidArgumentError, match="task 'fill_mask' is not supported"):
        export.export(path, str(tmp_path / "out"), task="fill_mask")
    from litert_torch.generative.config import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="describes a text encoder.*task='text_embedding'"):
        export.export(path, str(tmp_path / "out"), task="text_generation")
    with pytest.raises(InvalidArgumentError, match="model directory"):
        export.export(object(), str(tmp_path / "out"), task="text_embedding")
    assert not (tmp_path / "out").exists()


def test_tokenizer_with_two_leading_tokens_is_refused(tmp_path):
    from tokenizers import processors

    path = tiny_embed.save(str(tmp_path / "model"), "bert")
    tok = tiny_embed.tokenizer("bert")
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] [CLS] $A [SEP]", special_tokens=[("[CLS]", tok.cls_token_id), ("[SEP]", tok.sep_token_id)])
    with pytest.raises(UnsupportedEmbeddingError, match="2 token\\(s\\) before"):
        export.export(path, str(tmp_path / "out"), task="text_embedding", tokenizer=tok)


def test_damaged_bundle(tmp_path, exported):
    _, bundle = exported("bert")
    data = open(bundle, "rb").read()
    damaged = tmp_path / "damaged.litertlm"
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(LiteRTTorchError):
        embedding_runner.load_embedding(str(damaged))
    (tmp_path / "llm_like.litertlm").write_bytes(b"not a bundle")
    assert not embedding_runner.is_embedding_bundle(str(tmp_path / "llm_like.litertlm"))
    with pytest.raises(ModelFileError):
        embedding_runner.load_embedding(str(tmp_path / "llm_like.litertlm"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "cli")]))
    return subprocess.run([sys.executable, "-m", "litert_convert", *args], capture_output=True, text=True, env=env)


def test_cli_export_hf(exported, tmp_path):
    path, _ = exported("modernbert")
    out = str(tmp_path / "explicit.litertlm")
    result = _cli("export-hf", path, "-o", out, "--task", "text_embedding", "--prefill", "16", "--quantize", "none")
    assert result.returncode == 0, result.stderr
    reference = tiny_embed.reference(path, tiny_embed.TEXTS[:2])
    ours = embedding_runner.load_embedding(out).embed(tiny_embed.TEXTS[:2])
    assert tiny_embed.cosines(ours, reference).min() >= FLOAT_COSINE
    inferred = str(tmp_path / "inferred.litertlm")  # the task read from config.json
    result = _cli("export-hf", path, "-o", inferred, "--prefill", "16", "--quantize", "none")
    assert result.returncode == 0, result.stderr
    assert embedding_runner.load_embedding(inferred).lengths == [16]
    # refusals: an architecture (exit 1), an option that does not apply (exit 2)
    llama = _config_dir(tmp_path, {"model_type": "llama"}, "llama")
    result = _cli("export-hf", llama, "-o", str(tmp_path / "x.litertlm"), "--task", "text_embedding")
    assert result.returncode == 1 and "model_type 'llama' is not supported" in result.stderr
    result = _cli("export-hf", path, "-o", str(tmp_path / "y.litertlm"), "--task", "text_embedding", "--cache", "64")
    assert result.returncode == 2 and "cache" in result.stderr
    assert not os.path.exists(tmp_path / "x.litertlm") and not os.path.exists(tmp_path / "y.litertlm")


def test_docs_examples_run_from_any_folder(tmp_path):
    """docs/EMBEDDINGS.md's Python blocks, run in order as one script from an unrelated folder (they build their
    own tiny models and import nothing from tests)."""
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "docs", "EMBEDDINGS.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2 and not any("from tests" in b or "import tests" in b for b in blocks)
    script = tmp_path / "example.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=root)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    floats = [float(v) for v in re.findall(r"^cosine ([\d.]+)$", result.stdout, re.M)]
    int8 = [float(v) for v in re.findall(r"^int8 cosine ([\d.]+)$", result.stdout, re.M)]
    assert len(floats) == 2 and min(floats) >= FLOAT_COSINE
    assert len(int8) == 2 and min(int8) >= INT8_COSINE
    engine_error = float(result.stdout.splitlines()[2])
    assert engine_error <= 1e-5


def test_pipeline_reads_bin_weights_and_checks_shapes(tmp_path):
    import torch
    from safetensors.torch import load_file

    from litert_torch.generative.embedding_source import read_pipeline

    path = tiny_embed.save(str(tmp_path / "model"), "bert", pooling={"pooling_mode_cls_token": True},
                           dense=[(8, TANH, True)], normalize=True, max_seq_length=32)
    dense = os.path.join(path, "2_Dense")
    weights = load_file(os.path.join(dense, "model.safetensors"))
    os.unlink(os.path.join(dense, "model.safetensors"))
    torch.save(weights, os.path.join(dense, "pytorch_model.bin"))  # an older sentence-transformers checkpoint
    pipeline = read_pipeline(path)
    assert pipeline.pooling == ["cls_token"] and pipeline.normalize and pipeline.max_seq_length == 32
    np.testing.assert_array_equal(pipeline.dense[0].weight, weights["linear.weight"].numpy())
    np.testing.assert_array_equal(pipeline.dense[0].bias, weights["linear.bias"].numpy())
    assert pipeline.dense[0].activation == "tanh"
    assert pipeline.describe() == "cls_token pooling, dense 32->8 (tanh), L2 normalisation"
    json.dump({"in_features": 32, "out_features": 9, "bias": True, "activation_function": TANH},
              open(os.path.join(dense, "config.json"), "w"))
    with pytest.raises(ModelFileError, match=r"linear.weight is \[8, 32\], its config says \[9, 32\]"):
        read_pipeline(path)
    os.unlink(os.path.join(dense, "pytorch_model.bin"))
    with pytest.raises(ModelFileError, match="holds no Dense weights"):
        read_pipeline(path)
