"""The direct LLM builder (generative/direct.py, generative/source.py) against the traced one: the same config,
tokenizer facts, ops and outputs for every dense architecture, and an export that never imports PyTorch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from litert_torch.flatbuffer.writer import serialize
from litert_torch.generative import direct, hf, source
from litert_torch.generative.convert import lower_llm
from litert_torch.generative.model import build, rope_tables
from litert_torch.metadata import IO_KEY, decode
from litert_torch.runtime.edge_model import EdgeModel
from tests.generative import tiny_lm

DENSE = ("llama", "smollm3", "granite", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3")
# configs that exercise the rest of what the builder writes
VARIANTS = {
    "llama3_rope": ("llama", dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 16})),
    "linear_rope_bias": ("llama", dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                        "factor": 2.0}, attention_bias=True, mlp_bias=True,
                                       tie_word_embeddings=False)),
    "phi3_partial": ("phi3", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "partial_rotary_factor": 0.5})),
    "qwen2_window": ("qwen2", dict(use_sliding_window=True, sliding_window=5, max_window_layers=1,
                                   layer_types=["full_attention", "sliding_attention"])),
    "qwen2_window_off": ("qwen2", dict(use_sliding_window=False, sliding_window=5)),
}
CACHE, PREFILL = 24, (4, 7)


@pytest.fixture(scope="module", params=[*DENSE, *VARIANTS])
def model_dir(request, tmp_path_factory):
    name = request.param
    arch, overrides = VARIANTS.get(name, (name, {}))
    return name, tiny_lm.save(str(tmp_path_factory.mktemp(name)), arch, **overrides)


def _traced(path):
    src = hf.load(path, need_tokenizer=True, cache_length=CACHE)
    lm = build(src.weights, src.config, rope_tables(src.hf_config, src.config, CACHE), CACHE)
    return src, lower_llm(lm, PREFILL)[0]


def _direct(path):
    read = source.read(path, need_tokenizer=True, cache_length=CACHE)
    assert not isinstance(read, str), read
    assert direct.can_build(read.config, read.rope_parameters) is None
    weights = direct.DenseWeights(read.weights, source.widen)
    return read, direct.build_llm(weights, read.config, read.rope_parameters, CACHE, PREFILL)[0]


def test_same_config_tokenizer_ops_and_outputs(model_dir):
    name, path = model_dir
    src, traced = _traced(path)
    read, built = _direct(path)
    assert read.config == src.config
    assert read.info == hf.bundle_info(src, CACHE)
    for a, b in zip(traced.subgraphs, built.subgraphs):
        assert [op.opcode for op in a.ops] == [op.opcode for op in b.ops], a.name
    assert [s.key for s in traced.signatures] == [s.key for s in built.signatures]
    for key in (IO_KEY, "litert_torch.llm"):
        assert decode(built.metadata[key]) == decode(traced.metadata[key]), key
    runs = [EdgeModel(serialize(m), verify=False) for m in (traced, built)]
    rng = np.random.default_rng(0)
    layout = decode(built.metadata["litert_torch.llm"])
    for signature in built.signatures:
        length = 1 if signature.key == "decode" else int(signature.key.split("_")[1])
        start = 5
        feeds = {"tokens": rng.integers(0, layout["vocab_size"], (1, length)).astype(np.int32),
                 "input_pos": np.arange(start, start + length, dtype=np.int32)}
        for cache, shape in layout["cache_shapes"].items():
            feeds[cache] = rng.standard_normal(shape).astype(np.float32)
        outs = [r.signature_runner(signature.key)(**feeds) for r in runs]
        for key in outs[0]:
            np.testing.assert_allclose(outs[1][key], outs[0][key], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} {signature.key} {key}")


def test_config_fields_match_transformers():
    assert source.config_fields() == source.CONFIG_FIELDS


@pytest.mark.parametrize("change, reason", [
    (lambda c: c.pop("rms_norm_eps"), "defaults"),
    (lambda c: c.update(rope_theta=10000.0), "older form"),
    (lambda c: c.update(model_type="qwen3_moe"), "read by transformers"),
])
def test_configs_left_to_transformers_are_read_by_it(tmp_path, change, reason):
    path = tiny_lm.save(str(tmp_path / "m"), "llama")
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    change(cfg)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    got = source.read(path, need_tokenizer=True, cache_length=CACHE)
    assert isinstance(got, str) and reason in got


def test_bfloat16_checkpoint_is_widened_as_pytorch_widens_it(tmp_path):
    import torch

    path = tiny_lm.save(str(tmp_path / "m"), "llama")
    from safetensors.torch import load_file, save_file

    file = os.path.join(path, "model.safetensors")
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(file).items()}, file, metadata={"format": "pt"})
    read = source.read(path, need_tokenizer=False, cache_length=CACHE)
    expected = load_file(file)["model.embed_tokens.weight"].to(torch.float32).numpy()
    np.testing.assert_array_equal(source.widen("w", read.weights["model.embed_tokens.weight"]), expected)


def test_export_of_a_dense_directory_never_imports_torch(tmp_path):
    path = tiny_lm.save(str(tmp_path / "m"), "qwen3")
    code = ("import sys\nfrom litert_torch.generative.export_hf import export\n"
            f"export.export(model={path!r}, output_dir={str(tmp_path / 'out')!r}, prefill_lengths=[8], "
            "cache_length=32)\nprint('torch' in sys.modules, 'transformers' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False"]
    assert os.path.getsize(tmp_path / "out" / "model.litertlm") > 0
