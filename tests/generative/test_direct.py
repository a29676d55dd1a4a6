"""The direct LLM builder (generative/direct.py, generative/source.py) against the traced one: the same config,
tokenizer facts, ops and outputs for every architecture (routed experts included), and an export that never
imports PyTorch."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from litert_torch.flatbuffer.writer import constant_bytes, serialize
from litert_torch.generative import direct, hf, source
from litert_torch.generative.convert import lower_llm
from litert_torch.generative.export_hf import export
from litert_torch.generative.model import build
from litert_torch.generative.runner import LlmRunner
from litert_torch.generative.weights import numpy_weights
from litert_torch.metadata import IO_KEY, decode
from litert_torch.runtime.edge_model import EdgeModel
from tests.generative import tiny_lm

ARCHS = ("llama", "smollm3", "granite", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3", "qwen3_moe",
         "mixtral", "qwen2_moe")
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
    "yarn_rope": ("llama", dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                 "original_max_position_embeddings": 16})),
    "dynamic_rope": ("llama", dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})),
    "proportional_rope": ("llama", dict(rope_parameters={"rope_type": "proportional", "rope_theta": 10000.0,
                                                         "partial_rotary_factor": 0.5, "factor": 2.0})),
    "phi3_longrope": ("phi3", dict(rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                                    "partial_rotary_factor": 0.5,
                                                    "short_factor": [1.0 + i / 8 for i in range(4)],
                                                    "long_factor": [2.0 + i for i in range(4)]},
                                   original_max_position_embeddings=32, max_position_embeddings=128)),
}
# prefill_4 sorts a MoE toy's 8 (token, expert) pairs into first tiles only, prefill_7 overflows into a gathered
# tile; decode gathers its experts
CACHE, PREFILL = 24, (4, 7)


@pytest.fixture(scope="module", params=[*ARCHS, *VARIANTS])
def model_dir(request, tmp_path_factory):
    name = request.param
    arch, overrides = VARIANTS.get(name, (name, {}))
    return name, tiny_lm.save(str(tmp_path_factory.mktemp(name)), arch, **overrides)


def _traced(path):
    src = hf.load(path, need_tokenizer=True, cache_length=CACHE)
    lm = build(src.weights, src.config, direct.rope_tables(src.config, src.hf_config.rope_parameters, CACHE), CACHE)
    return src, lower_llm(lm, PREFILL)[0]


def _direct(path):
    read = source.read(path, need_tokenizer=True, cache_length=CACHE)
    assert not isinstance(read, str), read
    assert direct.can_build(read.config) is None
    weights = direct.Weights(read.weights, source.widen)
    return read, direct.build_llm(weights, read.config, read.rope_parameters, CACHE, PREFILL)[0]


def test_same_config_tokenizer_ops_and_outputs(model_dir):
    _compare_builders(*model_dir)


def test_older_config_form_builds_the_same_model(tmp_path):
    """A config.json as older transformers wrote it (rope_theta and rope_scaling at the top level, fields left to
    the class defaults) is read without transformers and built as transformers' reading of it is."""
    path = tiny_lm.save(str(tmp_path / "m"), "llama", rope_parameters=VARIANTS["llama3_rope"][1]["rope_parameters"])

    def older(cfg):
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = {**rope, "type": rope.pop("rope_type")}
        for name in ("pad_token_id", "mlp_bias", "head_dim", "pretraining_tp"):
            cfg.pop(name)

    _rewrite_config(path, older)
    assert not isinstance(source.read(path, need_tokenizer=True, cache_length=CACHE), str)
    _compare_builders("llama, older form", path)


def _compare_builders(name, path):
    src, traced = _traced(path)
    read, built = _direct(path)
    assert read.config == src.config
    assert read.info == hf.bundle_info(src, CACHE)
    _compare_models(name, traced, built)


def _compare_models(name, traced, built):
    for a, b in zip(traced.subgraphs, built.subgraphs):
        assert [op.opcode for op in a.ops] == [op.opcode for op in b.ops], a.name
    assert constant_bytes(built) == constant_bytes(traced)  # the same weights, each stored once, as stored
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


@pytest.mark.parametrize("name", [*ARCHS, "phi3_longrope", "llama3_rope"])
def test_model_in_memory_is_built_directly(name):
    """A transformers model given in memory is built by the direct builder from its config object and its
    state dict (numpy views of its tensors): the model the traced builder gives."""
    arch, overrides = VARIANTS.get(name, (name, {}))
    tok = tiny_lm.tokenizer()
    model = tiny_lm.model(arch, len(tok), **overrides)
    src = hf.load(model, tok, cache_length=CACHE)
    traced = lower_llm(build(src.weights, src.config, direct.rope_tables(src.config, src.hf_config.rope_parameters,
                                                                       CACHE), CACHE), PREFILL)[0]
    read = export._read_in_memory(model, tok, True, CACHE, True)
    assert read is not None and not read.owned and read.tokenizer is tok
    assert read.config == src.config and read.info == hf.bundle_info(src, CACHE)
    weight = read.weights["model.embed_tokens.weight"]
    assert np.shares_memory(weight, model.model.embed_tokens.weight.detach().numpy())
    built = direct.build_llm(direct.Weights(read.weights, source.widen), read.config, read.rope_parameters, CACHE,
                             PREFILL)[0]
    _compare_models(name, traced, built)


def test_pytorch_checkpoint_is_built_directly(tmp_path):
    """A directory whose weights are a PyTorch .bin state dict (loaded with weights_only, mapped) is built by the
    direct builder from numpy views of the loaded tensors: the model the traced builder gives."""
    import torch
    from safetensors.torch import load_file

    path = tiny_lm.save(str(tmp_path / "m"), "qwen2_moe")
    file = os.path.join(path, "model.safetensors")
    torch.save(load_file(file), os.path.join(path, "pytorch_model.bin"))
    os.unlink(file)
    _compare_builders("qwen2_moe from .bin", path)


@pytest.fixture
def no_tracing(monkeypatch):
    """Fails a test that builds the decoder by tracing it."""
    from litert_torch.generative import convert

    def traced(*args, **kwargs):
        raise AssertionError("the decoder was traced")

    monkeypatch.setattr(convert, "lower_llm", traced)


@pytest.mark.parametrize("given", ["bfloat16 model", "directory and tokenizer"])
def test_export_with_a_tokenizer_object_is_built_directly(tmp_path, no_tracing, given):
    """A bfloat16 model in memory (its weights widened as PyTorch widens them), and a directory given with a
    tokenizer object, are exported without tracing and generate what Hugging Face generates."""
    import torch

    tok = tiny_lm.tokenizer()
    model = tiny_lm.model("qwen3", len(tok))
    if given == "bfloat16 model":
        model = model.to(torch.bfloat16)
        argument = model
    else:
        argument = tiny_lm.save(str(tmp_path / "m"), "qwen3")
    out = export.export(model=argument, tokenizer=tok, output_dir=str(tmp_path / "out"), prefill_lengths=[8],
                        cache_length=CACHE, quantization_recipe="none", bundle_litert_lm=False)
    ids = tok("the cat sat on the mat").input_ids[:12]
    llm = LlmRunner(open(out, "rb").read(), tok)
    reference = model.float().eval()
    expected = reference.generate(torch.tensor([ids]), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert list(llm.generate_ids(ids, 8, stop=False)) == expected[0, len(ids):].tolist()


def test_model_in_memory_without_its_weights_is_refused(tmp_path):
    tok = tiny_lm.tokenizer()
    model = tiny_lm.model("llama", len(tok)).to("meta")
    with pytest.raises(hf.ModelSourceError, match="meta device"):
        export.export(model=model, tokenizer=tok, output_dir=str(tmp_path / "out"), prefill_lengths=[8],
                      cache_length=CACHE)
    assert not os.path.exists(tmp_path / "out")


def test_weights_numpy_cannot_hold_are_traced():
    import torch

    assert isinstance(numpy_weights({"w": torch.zeros(2, dtype=torch.float8_e4m3fn)}), str)
    weights = numpy_weights({"w": torch.ones(2, 3, dtype=torch.bfloat16).t()})
    np.testing.assert_array_equal(weights["w"].astype(np.float32), np.ones((3, 2), np.float32))


def _assert_tables_close(ours, theirs, what):
    """RoPE tables computed with numpy (`rope.rope_tables`) against transformers' (`tiny_lm.hf_rope_tables`):
    PyTorch's float32 pow, cos and sin are within an ulp or two of the correctly rounded values numpy gives, so
    an entry may differ by a few units in the last place, and an inverse frequency's last bit by as much per
    position."""
    assert sorted(ours) == sorted(theirs), what
    for layer_type, (cos, sin) in theirs.items():
        half = cos.shape[-1] // 2
        for a, b in zip(ours[layer_type], (cos[:, :half].numpy(), sin[:, :half].numpy())):
            assert a.shape == b.shape and a.dtype == b.dtype, what
            bound = 2.0 ** -23 * (2 + np.arange(len(a)))[:, None]
            assert (np.abs(a - b) <= bound).all(), (what, layer_type, np.abs(a - b).max())


def test_rope_tables_are_transformers_within_float32_rounding(model_dir):
    """The RoPE tables computed with numpy (which both builders take) are transformers' own to float32
    rounding."""
    name, path = model_dir
    src = hf.load(path, need_tokenizer=False, cache_length=CACHE)
    read = source.read(path, need_tokenizer=False, cache_length=CACHE)
    _assert_tables_close(direct.rope_tables(read.config, read.rope_parameters, CACHE),
                         tiny_lm.hf_rope_tables(src.hf_config, src.config, CACHE), name)


def test_config_fields_match_transformers():
    import dataclasses

    import transformers

    assert source.config_fields() == source.CONFIG_FIELDS
    assert source.config_aliases() == source.CONFIG_ALIASES
    assert source.config_defaults() == source.CONFIG_DEFAULTS
    for model_type, defaults in source._RULE_DEFAULTS.items():
        fields = {f.name: f.default for f in dataclasses.fields(type(transformers.AutoConfig.for_model(model_type)))}
        assert {name: fields[name] for name in defaults} == defaults, model_type


def test_older_rope_form_read_here_where_the_base_class_reads_it():
    """The older RoPE fields are rewritten here as the base config class rewrites them; the architectures whose
    classes do it their own way are left to transformers."""
    import transformers
    from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin

    own = {t for t in source.CONFIG_FIELDS
           if type(transformers.AutoConfig.for_model(t)).convert_rope_params_to_dict
           is not RotaryEmbeddingConfigMixin.convert_rope_params_to_dict}
    assert own == set(source._OWN_ROPE_READING)


@pytest.mark.parametrize("arch, change, reason", [
    ("llama", lambda c: c.update(model_type="olmo2"), "read by transformers"),
    ("qwen3_moe", lambda c: c.update(num_experts=4), "sets both num_experts and num_local_experts"),
])
def test_configs_left_to_transformers_are_read_by_it(tmp_path, arch, change, reason):
    path = tiny_lm.save(str(tmp_path / "m"), arch)
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


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_export_of_a_directory_never_imports_torch(tmp_path, arch):
    path = tiny_lm.save(str(tmp_path / "m"), arch)
    code = ("import sys\nfrom litert_torch.generative.export_hf import export\n"
            f"export.export(model={path!r}, output_dir={str(tmp_path / 'out')!r}, prefill_lengths=[8], "
            "cache_length=32)\nprint('torch' in sys.modules, 'transformers' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False"]
    assert os.path.getsize(tmp_path / "out" / "model.litertlm") > 0


def _rewrite_config(path, change):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    change(cfg)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


def test_expert_count_under_either_name(tmp_path):
    """Qwen3-MoE's config class stores num_experts as num_local_experts; a config.json may hold either name, and
    one holding both is left to transformers."""
    path = tiny_lm.save(str(tmp_path / "m"), "qwen3_moe")
    stored = source.read_config(path)[0]
    _rewrite_config(path, lambda c: c.update(num_experts=c.pop("num_local_experts")))
    assert source.read_config(path)[0] == stored
    _rewrite_config(path, lambda c: c.update(num_local_experts=c["num_experts"]))
    assert "both" in source.read_config(path)


def test_fused_expert_tables_build_the_same_model(tmp_path):
    """A checkpoint holding each layer's experts fused (`mlp.experts.gate_up_proj` [E, 2I, H], `down_proj`
    [E, H, I], as transformers holds them in memory) gives the same tables as one holding each expert's
    projections."""
    from safetensors.numpy import load_file, save_file

    path = tiny_lm.save(str(tmp_path / "m"), "qwen3_moe")
    per_expert = _direct(path)[1]
    file = os.path.join(path, "model.safetensors")
    tensors, fused = load_file(file), {}
    for name, array in tensors.items():
        head, sep, tail = name.partition(".mlp.experts.")
        if not sep:
            fused[name] = array
            continue
        expert, proj = int(tail.split(".")[0]), tail.split(".")[1]
        fused.setdefault((head, proj), {})[expert] = array
    out = {k: v for k, v in fused.items() if isinstance(k, str)}
    for head in {k[0] for k in fused if isinstance(k, tuple)}:
        stack = {proj: np.stack([fused[(head, proj)][e] for e in sorted(fused[(head, proj)])])
                 for proj in ("gate_proj", "up_proj", "down_proj")}
        out[f"{head}.mlp.experts.gate_up_proj"] = np.concatenate([stack["gate_proj"], stack["up_proj"]], axis=1)
        out[f"{head}.mlp.experts.down_proj"] = stack["down_proj"]
    save_file(out, file, metadata={"format": "pt"})
    built = _direct(path)[1]
    tables = lambda m: sorted((t.name, np.asarray(t.data).tobytes()) for g in m.subgraphs  # noqa: E731
                              for t in g.tensors() if t.is_constant and t.rank == 3 and "_w_" in t.name)
    assert tables(built) and tables(built) == tables(per_expert)


def test_rope_parameters_standardised_as_config_classes_do():
    """A scaled RoPE's pre-training length comes from a top-level original_max_position_embeddings first (Phi-3
    keeps it there), else from the RoPE's own parameters, else max_position_embeddings; each RoPE names its
    type; per-layer-type RoPEs take their own."""
    llama3 = {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0}
    raw = {"max_position_embeddings": 64, "rope_parameters": dict(llama3)}
    assert source._standard_rope(raw)["original_max_position_embeddings"] == 64
    raw["rope_parameters"]["original_max_position_embeddings"] = 16
    assert source._standard_rope(raw)["original_max_position_embeddings"] == 16
    raw["original_max_position_embeddings"] = 32
    assert source._standard_rope(raw)["original_max_position_embeddings"] == 32
    nested = {"max_position_embeddings": 64, "original_max_position_embeddings": 32,
              "layer_types": ["full_attention", "sliding_attention"],
              "rope_parameters": {"full_attention": dict(llama3), "sliding_attention": {"rope_theta": 1e4}}}
    out = source._standard_rope(nested)
    assert out["full_attention"]["original_max_position_embeddings"] == 64
    assert out["sliding_attention"]["rope_type"] == "default"
    assert "rope_type" not in nested["rope_parameters"]["sliding_attention"]  # the config itself is left alone


def _config_variants(arch: str):
    """Configs of `arch` as the Hub holds them: as saved, in the older RoPE form, and with each field the class
    defaults or computes left out."""
    import transformers

    base = tiny_lm.config(arch, 260).to_dict()
    model_type = base["model_type"]
    yield "as saved", base
    if model_type == "gemma":  # the official Gemma releases' activation, which GemmaConfig reads as tanh GELU
        yield "hidden_act gelu", {**base, "hidden_act": "gelu"}
    rope = copy.deepcopy(base.get("rope_parameters") or {})
    legacy = {k: v for k, v in base.items() if k != "rope_parameters"}
    if model_type == "gemma3_text":  # Gemma 3's older form: a global and a local theta, scaling for the global
        full, local = rope["full_attention"], rope["sliding_attention"]
        legacy["rope_theta"], legacy["rope_local_base_freq"] = full.pop("rope_theta"), local["rope_theta"]
        if full.get("rope_type") != "default" or set(full) != {"rope_type"}:
            legacy["rope_scaling"] = full
        legacy_fields = ("rope_theta", "rope_local_base_freq", "rope_scaling")
    else:
        legacy["rope_theta"] = rope.pop("rope_theta")
        if "partial_rotary_factor" in rope:
            legacy["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
        if set(rope) != {"rope_type"} or rope.get("rope_type") != "default":
            legacy["rope_scaling"] = {**rope, "type": rope.pop("rope_type")}
        legacy_fields = ("rope_theta", "rope_scaling", "partial_rotary_factor")
    yield "older RoPE form", legacy
    yield "no RoPE fields", {k: v for k, v in legacy.items() if k not in legacy_fields}
    if model_type == "gemma3_text":  # as Gemma 3 4B has it: the global RoPE scaled
        yield "older form, scaled", {**legacy, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    if model_type == "phi3":  # LongRoPE under its older type names
        long = {"rope_theta": 10000.0, "short_factor": [1.0 + i / 8 for i in range(8)],
                "long_factor": [2.0 + i for i in range(8)]}
        yield "su", {**legacy, "rope_scaling": {**long, "type": "su"}, "original_max_position_embeddings": 256}
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):  # the window on, the layer types computed
        window = {k: v for k, v in base.items() if k != "layer_types"}
        window.update(use_sliding_window=True, sliding_window=4)
        yield "window on, no layer_types", {**window, "max_window_layers": 1}
        yield "window on, no layer_types or max_window_layers", \
            {k: v for k, v in window.items() if k != "max_window_layers"}
        yield "window on, none given", {**window, "max_window_layers": 1, "sliding_window": None}
    if model_type == "smollm3":  # the layers without RoPE computed, and from them the windowed ones
        bare = {k: v for k, v in base.items() if k not in ("layer_types", "no_rope_layers")}
        yield "no layer_types or no_rope_layers", bare
        yield "interval 2", {**bare, "no_rope_layer_interval": 2}
        yield "interval 1, window on", {**bare, "no_rope_layer_interval": 1, "use_sliding_window": True,
                                        "sliding_window": 4}
        yield "window on, no layer_types", {**base, "use_sliding_window": True, "sliding_window": 4,
                                            "layer_types": None}
    computed = ("head_dim", "num_key_value_heads", "mlp_only_layers", "layer_types", "sliding_window", "no_rope_layers")
    for name in [*source.CONFIG_DEFAULTS[model_type], *computed]:
        stored = source.CONFIG_ALIASES.get(model_type, {}).get(name, name)
        if stored in base and name != "rope_theta":
            yield f"without {stored}", {k: v for k, v in base.items() if k != stored}
    assert transformers  # the reference reading below


@pytest.mark.parametrize("arch", ARCHS)
def test_hub_configs_read_as_transformers_reads_them(tmp_path, arch):
    """config.json files as they are found (older RoPE fields, fields left to the class) read without
    transformers give the config and the RoPE tables that transformers' reading gives; the few that are left to
    transformers say why."""
    read, left = 0, []
    for i, (what, cfg) in enumerate(_config_variants(arch)):
        path = tmp_path / str(i)
        path.mkdir()
        (path / "config.json").write_text(json.dumps(cfg))
        try:
            theirs, hf_config = hf._read_config(str(path))
        except Exception as exc:  # noqa: BLE001 (transformers refuses it: so may we, or read it as it would)
            theirs, hf_config = exc, None
        try:
            ours = source.read_config(str(path))
        except Exception as exc:  # noqa: BLE001
            ours = exc
        if isinstance(ours, str):
            left.append((what, ours))
            continue
        if isinstance(theirs, Exception):
            assert isinstance(ours, Exception) or hf_config is None, (what, theirs)
            continue
        assert not isinstance(ours, Exception), (what, ours)
        cfg_ours, fields = ours
        assert cfg_ours == theirs, what
        _assert_tables_close(direct.rope_tables(cfg_ours, fields["rope_parameters"], CACHE),
                             tiny_lm.hf_rope_tables(hf_config, theirs, CACHE), f"{arch} {what}")
        read += 1
    assert left == []
    assert read > 10


@pytest.mark.parametrize("change, field", [
    ({"num_hidden_layers": "abc"}, "num_hidden_layers"),
    ({"hidden_size": 64.5}, "hidden_size"),
    ({"num_attention_heads": True}, "num_attention_heads"),
    ({"layer_types": 5}, "layer_types"),
    ({"layer_types": [1, 2]}, "layer_types"),
    ({"rope_parameters": "x"}, "rope_parameters"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": "big"}}, "rope_theta"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, "factor"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": [1],
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, "low_freq_factor"),
    ({"rms_norm_eps": "tiny"}, "rms_norm_eps"),
    ({"eos_token_id": "two"}, "eos_token_id"),
    ({"use_sliding_window": "yes"}, "use_sliding_window"),
])
def test_malformed_config_values_are_refused_naming_the_field(tmp_path, change, field):
    """A config.json whose values have the wrong type or range is bad input: refused before any work, with an
    error that names the field (the CLI's exit 2), and nothing is written."""
    from litert_convert.main import main

    from litert_torch.generative.export_hf import export
    from litert_torch.generative.weights import ModelSourceError

    path = tiny_lm.save(str(tmp_path / "m"), "qwen3")
    _rewrite_config(path, lambda c: c.update(change))
    with pytest.raises(ModelSourceError, match=field):
        export.export(model=path, output_dir=str(tmp_path / "out"), prefill_lengths=[8], cache_length=32)
    assert main(["export-hf", path, "-o", str(tmp_path / "out" / "m.litertlm"), "--quiet"]) == 2
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("tokenizer_config", [{"tokenizer_class": "Qwen2Tokenizer"}, {"add_bos_token": True}])
def test_tokenizer_transformers_rebuilds_is_read_by_it_beside_a_direct_build(tmp_path, tokenizer_config):
    """A tokenizer that transformers rebuilds (a tokenizer class of its own, or a post-processor rewritten by
    add_bos_token) is read by transformers, as the reference model runs it, and bundled as it builds it; the
    graph is still built directly."""
    import transformers

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.generative.bundle import unpack_bundle
    from litert_torch.generative.export_hf import export

    path = tiny_lm.save(str(tmp_path / "m"), "qwen3")
    file = os.path.join(path, "tokenizer_config.json")
    with open(file) as f:
        saved = json.load(f)
    with open(file, "w") as f:
        json.dump({**saved, **tokenizer_config}, f)
    read = source.read(path, need_tokenizer=True, cache_length=32)
    assert not isinstance(read, str) and read.tokenizer_reason and read.info is None
    stages = []
    out = export.export(model=path, output_dir=str(tmp_path / "out"), prefill_lengths=[8], cache_length=32,
                        progress=stages.append)
    assert "trace" not in stages
    tok = transformers.AutoTokenizer.from_pretrained(path)
    assert json.loads(unpack_bundle(out)[1]) == json.loads(tok.backend_tokenizer.to_str())
    src = hf.load(path, need_tokenizer=True, cache_length=32)
    model = read_model(unpack_bundle(out)[0])
    assert decode(model.metadata["litert_torch.llm"])["start_token_id"] == hf.bundle_info(src, 32).start_token_id
