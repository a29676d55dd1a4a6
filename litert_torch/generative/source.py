"""A Hugging Face model directory read without PyTorch or transformers: the config from config.json, the weights
mapped from safetensors files, the tokenizer from tokenizer.json with the `tokenizers` library.

transformers reads a config through its architecture's config class, which fills in defaults, computes some
fields from others and rewrites some (`use_sliding_window` clears `sliding_window` on Qwen; older files name RoPE
`rope_theta` and `rope_scaling`); importing any of that imports PyTorch. So `read_config` does the same for the
fields the exporter reads (`CONFIG_FIELDS`): the class defaults (`CONFIG_DEFAULTS`), the computed fields
(`_derive`), the older RoPE form as each class rewrites it (`_rope_parameters`). What it does not follow (an
architecture not in the table, a field given under both its names) `read` reports, and the caller reads the
directory with transformers; a tokenizer that transformers rebuilds (`tokenizer_reason`) the caller reads with
transformers alone.
The tables are generated from transformers; tests/generative/test_direct.py checks they still match it, and that
both readings agree on configs as the Hub holds them.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from litert_torch.generative.bundle import BundleInfo
from litert_torch.generative.config import (LlmConfig, UnsupportedModelError, check_cache_length, integer,
                                            token_ids)
from litert_torch.generative.weights import ModelSourceError, bfloat16, numpy_weights, read_weights, weight_files

# The fields of each architecture's transformers config class that `LlmConfig.from_hf` reads (generated from
# transformers: `config_fields()`; a test checks they still match).
CONFIG_FIELDS: dict[str, tuple[str, ...]] = {
    "llama": ("attention_bias", "bos_token_id", "eos_token_id", "head_dim", "hidden_act", "hidden_size",
              "intermediate_size", "max_position_embeddings", "mlp_bias", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "pad_token_id", "pretraining_tp", "rms_norm_eps", "rope_parameters",
              "tie_word_embeddings", "vocab_size"),
    "mistral": ("bos_token_id", "eos_token_id", "head_dim", "hidden_act", "hidden_size", "intermediate_size",
                "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
                "pad_token_id", "rms_norm_eps", "rope_parameters", "sliding_window", "tie_word_embeddings",
                "vocab_size"),
    "granite": ("attention_bias", "attention_multiplier", "bos_token_id", "embedding_multiplier", "eos_token_id",
                "hidden_act", "hidden_size", "intermediate_size", "logits_scaling", "max_position_embeddings",
                "mlp_bias", "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "pad_token_id",
                "residual_multiplier", "rms_norm_eps", "rope_parameters", "tie_word_embeddings", "vocab_size"),
    "smollm3": ("attention_bias", "bos_token_id", "eos_token_id", "hidden_act", "hidden_size", "intermediate_size",
                "layer_types", "max_position_embeddings", "mlp_bias", "no_rope_layers", "num_attention_heads",
                "num_hidden_layers", "num_key_value_heads", "pad_token_id", "rms_norm_eps", "rope_parameters",
                "sliding_window", "tie_word_embeddings", "use_sliding_window", "vocab_size"),
    "qwen2": ("bos_token_id", "eos_token_id", "hidden_act", "hidden_size", "intermediate_size", "layer_types",
              "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
              "pad_token_id", "rms_norm_eps", "rope_parameters", "sliding_window", "tie_word_embeddings",
              "use_sliding_window", "vocab_size"),
    "qwen3": ("attention_bias", "bos_token_id", "eos_token_id", "head_dim", "hidden_act", "hidden_size",
              "intermediate_size", "layer_types", "max_position_embeddings", "num_attention_heads",
              "num_hidden_layers", "num_key_value_heads", "pad_token_id", "rms_norm_eps", "rope_parameters",
              "sliding_window", "tie_word_embeddings", "use_sliding_window", "vocab_size"),
    "phi3": ("bos_token_id", "eos_token_id", "hidden_act", "hidden_size", "intermediate_size",
             "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
             "original_max_position_embeddings", "pad_token_id", "rms_norm_eps", "rope_parameters", "sliding_window",
             "tie_word_embeddings", "vocab_size"),
    "gemma": ("attention_bias", "bos_token_id", "eos_token_id", "head_dim", "hidden_act", "hidden_size",
              "intermediate_size", "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
              "num_key_value_heads", "pad_token_id", "rms_norm_eps", "rope_parameters", "tie_word_embeddings",
              "use_bidirectional_attention", "vocab_size"),
    "gemma2": ("attention_bias", "attn_logit_softcapping", "bos_token_id", "eos_token_id",
               "final_logit_softcapping", "head_dim", "hidden_activation", "hidden_size", "intermediate_size",
               "layer_types", "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
               "num_key_value_heads", "pad_token_id", "query_pre_attn_scalar", "rms_norm_eps", "rope_parameters",
               "sliding_window", "tie_word_embeddings", "use_bidirectional_attention", "vocab_size"),
    "gemma3_text": ("attention_bias", "attn_logit_softcapping", "bos_token_id", "eos_token_id",
                    "final_logit_softcapping", "head_dim", "hidden_activation", "hidden_size", "intermediate_size",
                    "layer_types", "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
                    "num_key_value_heads", "pad_token_id", "query_pre_attn_scalar", "rms_norm_eps",
                    "rope_parameters", "sliding_window", "tie_word_embeddings", "use_bidirectional_attention",
                    "vocab_size"),
    "qwen3_moe": ("attention_bias", "bos_token_id", "decoder_sparse_step", "eos_token_id", "hidden_act",
                  "hidden_size", "intermediate_size", "max_position_embeddings", "mlp_only_layers",
                  "moe_intermediate_size", "norm_topk_prob", "num_attention_heads", "num_experts_per_tok",
                  "num_hidden_layers", "num_key_value_heads", "num_local_experts", "pad_token_id", "rms_norm_eps",
                  "rope_parameters", "sliding_window", "tie_word_embeddings", "use_sliding_window", "vocab_size"),
    "qwen2_moe": ("bos_token_id", "decoder_sparse_step", "eos_token_id", "hidden_act", "hidden_size",
                  "intermediate_size", "layer_types", "max_position_embeddings", "mlp_only_layers",
                  "moe_intermediate_size", "norm_topk_prob", "num_attention_heads", "num_experts",
                  "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "pad_token_id", "rms_norm_eps",
                  "rope_parameters", "shared_expert_intermediate_size", "sliding_window", "tie_word_embeddings",
                  "use_sliding_window", "vocab_size"),
    "mixtral": ("bos_token_id", "eos_token_id", "head_dim", "hidden_act", "hidden_size", "intermediate_size",
                "max_position_embeddings", "num_attention_heads", "num_experts_per_tok", "num_hidden_layers",
                "num_key_value_heads", "num_local_experts", "pad_token_id", "rms_norm_eps", "rope_parameters",
                "sliding_window", "tie_word_embeddings", "vocab_size"),
}
# The class default of each field above that a config.json may leave out (the class keeps it as it is), and the
# RoPE base (`rope_theta`) of a config that names none. Generated with `config_defaults()`; a test checks it.
# Fields the classes compute from others when left out are handled in `_derive`.
CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"attention_bias": False, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
              "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 2048, "mlp_bias": False,
              "num_attention_heads": 32, "num_hidden_layers": 32, "pad_token_id": None, "pretraining_tp": 1,
              "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 32000},
    "mistral": {"bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
                "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
                "num_hidden_layers": 32, "num_key_value_heads": 8, "pad_token_id": None, "rms_norm_eps": 1e-06,
                "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000},
    "granite": {"attention_bias": False, "attention_multiplier": 1.0, "bos_token_id": 1, "embedding_multiplier": 1.0,
                "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 11008,
                "logits_scaling": 1.0, "max_position_embeddings": 2048, "mlp_bias": False, "num_attention_heads": 32,
                "num_hidden_layers": 32, "pad_token_id": None, "residual_multiplier": 1.0, "rms_norm_eps": 1e-06,
                "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 32000},
    "smollm3": {"attention_bias": False, "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
                "hidden_size": 2048, "intermediate_size": 11008, "max_position_embeddings": 32768, "mlp_bias": False,
                "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 4, "pad_token_id": 128004,
                "rms_norm_eps": 1e-06, "rope_theta": 2000000.0, "sliding_window": None, "tie_word_embeddings": True,
                "use_sliding_window": False, "vocab_size": 128256},
    "qwen2": {"bos_token_id": None, "eos_token_id": None, "hidden_act": "silu", "hidden_size": 4096,
              "intermediate_size": 22016, "max_position_embeddings": 32768, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": None, "rms_norm_eps": 1e-06,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936},
    "qwen3": {"attention_bias": False, "bos_token_id": None, "eos_token_id": None, "head_dim": 128,
              "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 22016, "max_position_embeddings": 32768,
              "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": None,
              "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": False, "use_sliding_window": False,
              "vocab_size": 151936},
    "phi3": {"bos_token_id": 1, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
             "intermediate_size": 8192, "max_position_embeddings": 4096, "num_attention_heads": 32,
             "num_hidden_layers": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
             "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": None, "tie_word_embeddings": False,
             "vocab_size": 32064},
    "gemma": {"attention_bias": False, "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256,
              "hidden_act": "gelu_pytorch_tanh", "hidden_size": 3072, "intermediate_size": 24576,
              "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 28,
              "num_key_value_heads": 16, "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "use_bidirectional_attention": None, "vocab_size": 256000},
    "gemma2": {"attention_bias": False, "attn_logit_softcapping": 50.0, "bos_token_id": 2, "eos_token_id": 1,
               "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
               "hidden_size": 2304, "intermediate_size": 9216, "max_position_embeddings": 8192,
               "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
               "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
               "tie_word_embeddings": True, "use_bidirectional_attention": None, "vocab_size": 256000},
    "gemma3_text": {"attention_bias": False, "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": 1,
                    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                    "hidden_size": 2304, "intermediate_size": 9216, "max_position_embeddings": 131072,
                    "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
                    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
                    "rope_theta": {"global": 1000000.0, "local": 10000.0}, "sliding_window": 4096,
                    "tie_word_embeddings": True, "use_bidirectional_attention": False, "vocab_size": 262208},
    "qwen3_moe": {"attention_bias": False, "bos_token_id": None, "decoder_sparse_step": 1, "eos_token_id": None,
                  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
                  "max_position_embeddings": 32768, "moe_intermediate_size": 768, "norm_topk_prob": False,
                  "num_attention_heads": 32, "num_experts_per_tok": 8, "num_hidden_layers": 24,
                  "num_key_value_heads": 4, "num_local_experts": 128, "pad_token_id": None, "rms_norm_eps": 1e-06,
                  "rope_theta": 10000.0, "tie_word_embeddings": False, "use_sliding_window": False,
                  "vocab_size": 151936},
    "qwen2_moe": {"bos_token_id": None, "decoder_sparse_step": 1, "eos_token_id": None, "hidden_act": "silu",
                  "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 32768,
                  "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16,
                  "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
                  "pad_token_id": None, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
                  "shared_expert_intermediate_size": 5632, "tie_word_embeddings": False, "use_sliding_window": False,
                  "vocab_size": 151936},
    "mixtral": {"bos_token_id": 1, "eos_token_id": 2, "head_dim": None, "hidden_act": "silu", "hidden_size": 4096,
                "intermediate_size": 14336, "max_position_embeddings": 131072, "num_attention_heads": 32,
                "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                "pad_token_id": None, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
                "tie_word_embeddings": False, "vocab_size": 32000},
}
# Fields a config class stores under another name (its `attribute_map`: the name read -> the name stored; a
# config.json may hold either). Generated with `config_aliases()`; a test checks it.
CONFIG_ALIASES: dict[str, dict[str, str]] = {
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "mixtral": {"num_experts": "num_local_experts"},
}
# The class defaults of the fields that only the rules computing other fields read (`_derive`); a test checks
# them.
_RULE_DEFAULTS = {"qwen2": {"max_window_layers": 28}, "qwen3": {"max_window_layers": 28},
                  "qwen2_moe": {"max_window_layers": 28}, "smollm3": {"no_rope_layer_interval": 4}}
# Architectures whose config class clears sliding_window unless use_sliding_window is set.
_WINDOW_SWITCHED = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
# The architectures whose config classes read the older RoPE fields their own way (`_rope_parameters` follows
# each; a test checks no other class does).
_OWN_ROPE_READING = ("phi3", "gemma3_text")
# Tokenizer config fields with which transformers rebuilds the tokenizer's post-processor.
_TOKENIZER_REWRITES = ("add_bos_token", "add_eos_token")
# Tokenizer classes that transformers runs as tokenizer.json has them (the others, such as Qwen2Tokenizer or
# GemmaTokenizer, rebuild the normalizer, pre-tokenizer and model from the vocabulary).
_TOKENIZERS_AS_SAVED = (None, "TokenizersBackend", "PreTrainedTokenizerFast")
_SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8",
                       "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool"}


def config_fields(model_types=tuple(CONFIG_FIELDS)) -> dict[str, tuple[str, ...]]:
    """`CONFIG_FIELDS` as computed from the installed transformers (imports it, and PyTorch with it)."""
    import transformers

    from litert_torch.generative import config as config_module

    read = set(_read_fields(config_module))
    out = {}
    for model_type in model_types:
        defaults = transformers.AutoConfig.for_model(model_type).to_dict()
        out[model_type] = tuple(sorted(k for k in read if k in defaults and k != "model_type"))
    return out


def config_defaults(model_types=tuple(CONFIG_FIELDS)) -> dict[str, dict[str, Any]]:
    """`CONFIG_DEFAULTS` as computed from the installed transformers (imports it, and PyTorch with it): per
    architecture, the class default of each of its `CONFIG_FIELDS` that the class keeps as it is when a config
    leaves the field out (a field its `__post_init__` computes from others is not listed), and under
    `rope_theta` the RoPE base of a config that names none."""
    import dataclasses

    import transformers

    out = {}
    for model_type in model_types:
        built = transformers.AutoConfig.for_model(model_type)
        as_built = built.to_dict()
        stored_as = CONFIG_ALIASES.get(model_type, {})
        defaults: dict[str, Any] = {}
        for field in dataclasses.fields(type(built)):
            name = stored_as.get(field.name, field.name)
            if name not in CONFIG_FIELDS[model_type] or name == "rope_parameters":
                continue
            if field.default is not dataclasses.MISSING:
                default = field.default
            elif field.default_factory is not dataclasses.MISSING:
                default = field.default_factory()
            else:
                continue
            if as_built.get(name) == default:
                defaults[name] = default
        defaults["rope_theta"] = type(built).default_theta
        out[model_type] = dict(sorted(defaults.items()))
    return out


def config_aliases(model_types=tuple(CONFIG_FIELDS)) -> dict[str, dict[str, str]]:
    """`CONFIG_ALIASES` as computed from the installed transformers (imports it, and PyTorch with it)."""
    import transformers

    out = {}
    for model_type in model_types:
        aliases = dict(type(transformers.AutoConfig.for_model(model_type)).attribute_map)
        if aliases:
            out[model_type] = aliases
    return out


def _read_fields(module) -> list[str]:
    import inspect
    import re

    text = inspect.getsource(module)
    return sorted(set(re.findall(r'(?:get|need|count)\("([a-z_]+)"', text)) | {"hidden_activation"})


@dataclass
class DirectSource:
    """A directory read without transformers: what the direct builder and the bundle need."""

    config: LlmConfig
    rope_parameters: Any
    weights: dict[str, np.ndarray]  # views of the mapped safetensors files, in their stored dtype
    tokenizer_json: str | None  # path of the directory's tokenizer.json
    info: BundleInfo | None
    # why the tokenizer is read with transformers (which rebuilds it), when it is; then tokenizer_json and info
    # are None
    tokenizer_reason: str | None = None


def config_json(path: str) -> dict:
    """The config.json of the model directory `path`, which must be one."""
    if not os.path.isdir(path):
        raise ModelSourceError(f"{path} is not a directory (a Hugging Face model saved with save_pretrained)")
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ModelSourceError(f"{path} has no config.json: not a Hugging Face model directory")
    return _json_file(config_path)


def read_config(path: str) -> tuple[LlmConfig, dict] | str:
    """The checked config of directory `path` read from its config.json alone, as its transformers config class
    reads it (class defaults, the fields the class computes, the RoPE in its current form), with the fields
    read; or why transformers must read it."""
    raw = config_json(path)
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_FIELDS:
        return f"model_type {model_type!r} is read by transformers"
    fields = CONFIG_FIELDS[model_type]
    fields_read = dict(raw)
    aliases = CONFIG_ALIASES.get(model_type, {})
    for name, stored in aliases.items():
        if name in raw and stored in raw:
            return f"config.json sets both {name} and {stored}"
        if name in raw:
            fields_read[stored] = fields_read.pop(name)
    for name, default in CONFIG_DEFAULTS[model_type].items():
        if name != "rope_theta" and name not in fields_read:
            fields_read[name] = copy.deepcopy(default)
    _derive(model_type, raw, fields_read)
    missing = [k for k in fields if k not in fields_read]
    if missing:
        return f"config.json leaves {', '.join(missing[:3])} for transformers to compute"
    for name, stored in aliases.items():
        fields_read[name] = fields_read[stored]
    return LlmConfig.from_hf(fields_read), fields_read


def _derive(model_type: str, raw: dict, fields_read: dict) -> None:
    """Set the fields that `model_type`'s config class computes from others, as it computes them, in
    `fields_read` (a rule not followed here leaves the field missing, which `read_config` reports); the RoPE in
    its current form."""
    fields = CONFIG_FIELDS[model_type]
    for name, default in CONFIG_DEFAULTS[model_type].items():
        if isinstance(default, bool) and not isinstance(fields_read.get(name, False), bool):
            raise ModelSourceError(f"config.{name} = {fields_read[name]!r}: expected true or false")
    for name in ("head_dim", "num_key_value_heads", "mlp_only_layers"):
        # left out, the class computes hidden_size // num_attention_heads, num_attention_heads and no layers:
        # what LlmConfig.from_hf reads from None
        if name in fields and fields_read.get(name) is None:
            fields_read[name] = None
    switched_off = model_type in _WINDOW_SWITCHED and not fields_read.get("use_sliding_window")
    if switched_off:
        fields_read["sliding_window"] = None
    layers = fields_read.get("num_hidden_layers")
    layers = layers if not isinstance(layers, bool) and isinstance(layers, int) and layers >= 1 else None
    if model_type == "smollm3" and fields_read.get("no_rope_layers") is None and layers is not None:
        # every layer rotates but each no_rope_layer_interval-th (1: the layer rotates)
        interval = _rule_input(model_type, raw, "no_rope_layer_interval", 1)
        fields_read["no_rope_layers"] = [int((i + 1) % interval != 0) for i in range(layers)]
    if "layer_types" in fields and fields_read.get("layer_types") is None:
        if layers is None:
            fields_read["layer_types"] = None  # LlmConfig.from_hf refuses num_hidden_layers, naming it
        elif switched_off:
            fields_read["layer_types"] = ["full_attention"] * layers
        elif model_type in ("gemma2", "gemma3_text"):  # every 2nd (Gemma 2) or pattern-th (Gemma 3) layer full
            pattern = 2 if model_type == "gemma2" else integer("sliding_window_pattern",
                                                                raw.get("sliding_window_pattern", 6))
            fields_read["layer_types"] = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                                          for i in range(layers)]
        elif model_type in ("qwen2", "qwen3", "qwen2_moe"):  # the window on: layers from max_window_layers on
            # (Qwen2, Qwen3), or the odd-numbered layers before it (Qwen2-MoE)
            first = _rule_input(model_type, raw, "max_window_layers", 0)
            sliding = [(i + 1) % 2 == 1 and i < first if model_type == "qwen2_moe"
                       else fields_read.get("sliding_window") is not None and i >= first for i in range(layers)]
            fields_read["layer_types"] = ["sliding_attention" if s else "full_attention" for s in sliding]
        elif model_type == "smollm3":  # the window, when on, on the layers without RoPE
            no_rope = fields_read["no_rope_layers"]
            window = fields_read.get("use_sliding_window") and fields_read.get("sliding_window") is not None
            fields_read["layer_types"] = ["sliding_attention" if window and not has_rope else "full_attention"
                                          for has_rope in no_rope]
        else:
            fields_read.pop("layer_types", None)
    if model_type == "gemma" and fields_read.get("hidden_act") == "gelu":
        fields_read["hidden_act"] = "gelu_pytorch_tanh"  # as GemmaConfig reads the official releases
    fields_read["rope_parameters"] = _rope_parameters(model_type, raw)
    fields_read["rope_parameters"] = _standard_rope(fields_read)


def _rule_input(model_type: str, raw: dict, name: str, minimum: int) -> int:
    """A config field that only a computed field's rule reads: config.json's value, else the class default."""
    return integer(name, raw.get(name, _RULE_DEFAULTS[model_type][name]), minimum)


def _rope_parameters(model_type: str, raw: dict) -> dict:
    """config.json's RoPE in the current form (`rope_parameters`, with its theta), as the config class of
    `model_type` reads the older form (`rope_theta`, `rope_scaling`, `partial_rotary_factor` at the top level)
    and fills in what is left out; `_standard_rope` completes it."""
    theta = CONFIG_DEFAULTS[model_type]["rope_theta"]
    for name in ("rope_scaling", "rope_parameters"):
        if raw.get(name) is not None and not isinstance(raw[name], dict):
            raise ModelSourceError(f"config.{name} = {raw[name]!r}: expected a mapping")
    scaling = copy.deepcopy(raw.get("rope_scaling"))
    if model_type == "gemma3_text":  # one RoPE per layer type: the global theta for full attention, the local
        params = copy.deepcopy(raw.get("rope_parameters")) or {"sliding_attention": {"rope_type": "default"},
                                                               "full_attention": {"rope_type": "default"}}
        for layer_type, key, default in (("full_attention", "rope_theta", theta["global"]),
                                         ("sliding_attention", "rope_local_base_freq", theta["local"])):
            if params.get(layer_type) is None:
                params[layer_type] = {"rope_type": "default"}
            if not isinstance(params[layer_type], dict):
                raise ModelSourceError(f"config.rope_parameters[{layer_type!r}] = {params[layer_type]!r}: "
                                       "expected a mapping")
            if layer_type == "full_attention" and scaling is not None:
                params[layer_type].update(scaling)
            params[layer_type].setdefault("rope_theta", raw.get(key, default))
        return params
    params = scaling or copy.deepcopy(raw.get("rope_parameters")) or {}
    if any(isinstance(v, dict) for v in params.values()):
        raise ModelSourceError(f"config.rope_parameters of a {model_type} model gives a RoPE per layer type")
    params.setdefault("rope_theta", raw.get("rope_theta", theta))
    if model_type == "phi3":  # Phi3Config: a partial factor always, and its older type names for LongRoPE
        params.setdefault("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
        if params.get("rope_type", params.get("type")) in ("su", "yarn"):
            params["rope_type"] = "longrope"
    elif raw.get("partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", raw["partial_rotary_factor"])
    return params


def _standard_rope(raw: dict) -> dict:
    """The rope_parameters of config fields `raw` (a mapping) as a config class standardises them: each RoPE's
    type named, and the pre-training length of the types that scale by it (llama3, yarn, longrope) in the RoPE's
    parameters, a top-level original_max_position_embeddings first. `raw` is left as it is."""
    params = raw["rope_parameters"]
    layer_types = raw.get("layer_types")
    layer_types = layer_types if isinstance(layer_types, list) else ()
    nested = [k for k in params if k in layer_types]
    out = {k: (dict(v) if k in nested and isinstance(v, dict) else v) for k, v in params.items()}
    for rope in ([out[k] for k in nested if isinstance(out[k], dict)] if nested else [out]):
        rope.setdefault("rope_type", rope.get("type", "default"))
        if rope["rope_type"] in ("llama3", "yarn", "longrope"):
            if not nested and "original_max_position_embeddings" in raw:
                rope["original_max_position_embeddings"] = raw["original_max_position_embeddings"]
            else:
                rope.setdefault("original_max_position_embeddings", raw.get("max_position_embeddings"))
    return out


def read(path: str, *, need_tokenizer: bool, cache_length: int | None, use_jinja_template: bool = True
         ) -> DirectSource | str:
    """Directory `path` read for the direct builder without transformers, or why it cannot be (the caller then
    reads it with transformers and traces it). Errors in the directory itself (no weights, no tokenizer,
    malformed files) raise."""
    from litert_torch.generative.direct import can_build

    read_cfg = read_config(path)
    if isinstance(read_cfg, str):
        return read_cfg
    cfg, fields_read = read_cfg
    reason = can_build(cfg)
    if reason is not None:
        return reason
    if cache_length is not None:
        check_cache_length(cfg, cache_length)
    files = weight_files(path)
    if not files:
        raise ModelSourceError(f"{path} has no weights (*.safetensors or *.bin)")
    tokenizer_path = os.path.join(path, "tokenizer.json")
    info: BundleInfo | None = None
    reason = None
    if need_tokenizer:
        if not os.path.isfile(tokenizer_path):
            raise ModelSourceError(f"{path} has no tokenizer.json: the LiteRT-LM bundle carries the Hugging Face "
                                   "tokenizer (save it with tokenizer.save_pretrained into the model directory)")
        tokenizer_config = _json_file(os.path.join(path, "tokenizer_config.json"))
        rewrites = [k for k in _TOKENIZER_REWRITES if k in tokenizer_config]
        tokenizer_class = tokenizer_config.get("tokenizer_class")
        if rewrites:
            reason = f"tokenizer_config.json sets {', '.join(rewrites)}"
        elif tokenizer_class not in _TOKENIZERS_AS_SAVED:
            reason = (f"tokenizer_config.json names tokenizer_class {tokenizer_class!r}, which transformers "
                      "rebuilds from the vocabulary its own way")
        else:
            got = _bundle_info(path, tokenizer_path, tokenizer_config, cfg, cache_length or 0, use_jinja_template)
            if isinstance(got, str):
                reason = got
            else:
                info = got
    weights = read_weights(files, read_safetensors)
    if not all(f.endswith(".safetensors") for f in files):  # a PyTorch checkpoint: loaded with torch (mapped)
        loaded = numpy_weights(weights)
        if isinstance(loaded, str):
            return loaded
        weights = loaded
    return DirectSource(cfg, fields_read.get("rope_parameters"), weights,
                        tokenizer_path if need_tokenizer and reason is None else None, info, reason)


def _json_file(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{path} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelSourceError(f"{path} does not hold a JSON object")
    return data


def generation_stop_ids(path: str) -> list[int]:
    """The eos_token_id of the directory's generation_config.json (none when it has no such file)."""
    file = os.path.join(path, "generation_config.json")
    if not os.path.isfile(file):
        return []
    try:
        with open(file, encoding="utf-8") as f:
            return token_ids(json.load(f).get("eos_token_id"))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ModelSourceError(f"{file} is not a readable generation config: {exc}") from exc


def _token(tokenizer, value: Any) -> int | None:
    """The id of a special token as a tokenizer config names it (a string, or an added-token object)."""
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str):
        return None
    return tokenizer.token_to_id(value)


def _bundle_info(path: str, tokenizer_path: str, tokenizer_config: dict, cfg: LlmConfig, cache_length: int,
                 use_jinja_template: bool) -> BundleInfo | str:
    """`hf.bundle_info` from the tokenizer files: the start token (what the tokenizer prepends to a text), the
    stop tokens, the chat template."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(tokenizer_path)
    except Exception as exc:  # the tokenizers library's own errors
        raise ModelSourceError(f"could not load the tokenizer in {path}: {exc}") from exc
    bos = _token(tokenizer, tokenizer_config.get("bos_token"))
    eos = _token(tokenizer, tokenizer_config.get("eos_token"))
    with_special = tokenizer.encode("a").ids
    without = tokenizer.encode("a", add_special_tokens=False).ids
    start = None
    if len(with_special) > len(without) and with_special[1:] == without[:len(with_special) - 1] \
            and bos is not None and with_special[0] == bos:
        start = int(bos)
    stops = set(cfg.eos_token_ids)
    stops.update(generation_stop_ids(path))
    if eos is not None:
        stops.add(eos)
    template_file = os.path.join(path, "chat_template.jinja")
    template = tokenizer_config.get("chat_template")
    if os.path.isfile(template_file):
        with open(template_file, encoding="utf-8") as f:
            template = f.read()
    elif template is not None and not isinstance(template, str):
        return "tokenizer_config.json holds several chat templates"
    return BundleInfo(start_token_id=start, stop_token_ids=sorted(int(s) for s in stops),
                      chat_template=template if use_jinja_template else None, max_num_tokens=cache_length)


def read_safetensors(file: str) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as a view of the file's mapping (bfloat16 as ml_dtypes.bfloat16)."""
    size = os.path.getsize(file)
    try:
        with open(file, "rb") as f:
            header_size = int.from_bytes(f.read(8), "little")
            if header_size <= 0 or 8 + header_size > size:
                raise ModelSourceError(f"could not read the weights in {file}: its header size {header_size} does "
                                       f"not fit the file ({size} bytes)")
            header = json.loads(f.read(header_size))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ModelSourceError(f"could not read the weights in {file}: {exc}") from exc
    if not isinstance(header, dict):
        raise ModelSourceError(f"could not read the weights in {file}: its header is not a JSON object")
    body = 8 + header_size
    mapped = np.memmap(file, dtype=np.uint8, mode="r") if size > body else np.zeros(0, np.uint8)
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype_name = _SAFETENSORS_DTYPES.get(entry["dtype"])
            shape = [int(d) for d in entry["shape"]]
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelSourceError(f"could not read the weights in {file}: malformed entry {name!r}") from exc
        if dtype_name is None:
            raise ModelSourceError(f"could not read the weights in {file}: tensor {name!r} has dtype "
                                   f"{entry['dtype']!r}, which the reader does not know")
        dtype = np.dtype(bfloat16() if dtype_name == "bfloat16" else dtype_name)
        count = int(np.prod(shape, dtype=np.int64))
        if any(d < 0 for d in shape) or not 0 <= begin <= end or body + end > size \
                or end - begin != count * dtype.itemsize:
            raise ModelSourceError(f"could not read the weights in {file}: tensor {name!r} ({entry['dtype']} "
                                   f"{shape}) does not fit its bytes [{begin}, {end}) of the file")
        out[name] = mapped[body + begin: body + end].view(dtype).reshape(shape)
    return out


def widen(name: str, array: np.ndarray) -> np.ndarray:
    """A weight as float32: float32 views as they are, other float types converted (as PyTorch's
    .to(torch.float32) converts them)."""
    if array.dtype == np.float32:
        return array
    if array.dtype.kind == "f" or array.dtype == np.dtype(bfloat16()):
        return array.astype(np.float32)
    raise UnsupportedModelError(f"weight {name} is {array.dtype}: the exporter reads floating-point weights "
                                "(quantize with quantization_recipe instead of exporting a quantized checkpoint)")
