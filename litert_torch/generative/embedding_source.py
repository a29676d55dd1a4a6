"""What a text-embedding model directory says: the architecture, and the sentence-transformers pipeline after it.

A sentence-transformers directory lists its modules in `modules.json` (the transformer, then `Pooling`, `Dense`
and `Normalize` modules, each in its own folder with a `config.json`); a plain Hugging Face encoder has none, and
is pooled by the mean of its token states over the attention mask. Everything is read and checked before a
weight is loaded: an architecture, module or option this exporter does not reproduce is refused naming it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from litert_torch.errors import InvalidArgumentError, ModelFileError
from litert_torch.generative.config import UnsupportedModelError

# config.json model_type -> the family of encoders it belongs to
ENCODERS = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "modernbert": "modernbert",
            "gemma3_text": "gemma3"}

# sentence-transformers' Pooling modes, in the order it concatenates them
POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens",
                 "lasttoken")

# Dense modules' activation_function values we reproduce
ACTIVATIONS = {"torch.nn.modules.linear.Identity": "identity", "torch.nn.modules.activation.Tanh": "tanh",
               "torch.nn.modules.activation.ReLU": "relu", "torch.nn.modules.activation.GELU": "gelu",
               "torch.nn.modules.activation.Sigmoid": "sigmoid"}

ST_TRANSFORMER = "sentence_transformers.models.Transformer"
ST_POOLING = "sentence_transformers.models.Pooling"
ST_DENSE = "sentence_transformers.models.Dense"
ST_NORMALIZE = "sentence_transformers.models.Normalize"


class UnsupportedEmbeddingError(UnsupportedModelError):
    """A text-embedding model whose architecture, sentence-transformers module or pooling option the exporter
    does not reproduce; the message names the file, the field and the value."""


@dataclass
class Dense:
    """A sentence-transformers Dense module: y = activation(x @ weight.T + bias)."""

    weight: np.ndarray  # [out, in]
    bias: np.ndarray | None
    activation: str  # a value of ACTIVATIONS


@dataclass
class Pipeline:
    """What follows the transformer: pooling over the real tokens, dense layers, L2 normalisation."""

    pooling: list[str] = field(default_factory=lambda: ["mean_tokens"])
    dense: list[Dense] = field(default_factory=list)
    normalize: bool = False
    max_seq_length: int | None = None  # sentence-transformers' limit, when it gives one
    sentence_transformers: bool = False  # read from modules.json (else the default: mean pooling)

    def describe(self) -> str:
        parts = ["+".join(self.pooling) + " pooling"]
        parts += [f"dense {d.weight.shape[1]}->{d.weight.shape[0]} ({d.activation})" for d in self.dense]
        if self.normalize:
            parts.append("L2 normalisation")
        return ", ".join(parts)


def _json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ModelFileError(f"{path} is missing") from None
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"{path} is not readable JSON: {exc}") from None


def read_config(path: str) -> dict:
    """config.json of the model directory `path`, checked to be an encoder this exporter takes."""
    if not os.path.isdir(path):
        raise InvalidArgumentError(f"{path} is not a model directory")
    config = _json(os.path.join(path, "config.json"))
    if not isinstance(config, dict):
        raise ModelFileError(f"{os.path.join(path, 'config.json')} is not a JSON object")
    check_architecture(config)
    return config


def check_architecture(config: dict) -> str:
    """The encoder family of `config` (a config.json dict), or UnsupportedEmbeddingError naming what is refused."""
    model_type = config.get("model_type")
    family = ENCODERS.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise UnsupportedEmbeddingError(
            f"model_type {model_type!r} is not supported for text_embedding; supported: "
            f"{', '.join(sorted(ENCODERS))} (gemma3_text with use_bidirectional_attention, as EmbeddingGemma)")
    if family == "gemma3" and not config.get("use_bidirectional_attention"):
        raise UnsupportedEmbeddingError(
            "a gemma3_text model without use_bidirectional_attention is a causal decoder: export it with "
            "task='text_generation'; text_embedding takes EmbeddingGemma-style models (use_bidirectional_attention: "
            "true)")
    return family


def is_embedding_config(config: dict) -> bool:
    """Whether a config.json dict describes a text encoder (the task `text_embedding` when none is given)."""
    model_type = config.get("model_type")
    if model_type == "gemma3_text":
        return bool(config.get("use_bidirectional_attention"))
    return model_type in ENCODERS


def read_pipeline(path: str) -> Pipeline:
    """The sentence-transformers modules after the transformer, from `modules.json` (mean pooling over the
    attention mask, nothing else, when the directory has none)."""
    modules_file = os.path.join(path, "modules.json")
    if not os.path.isfile(modules_file):
        return Pipeline()
    modules = _json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
        raise ModelFileError(f"{modules_file} is not a list of modules with a 'type'")
    pipeline = Pipeline(pooling=[], sentence_transformers=True)
    modules = sorted(modules, key=lambda m: int(m.get("idx", 0)))
    if not modules or modules[0]["type"] != ST_TRANSFORMER or modules[0].get("path", "") not in ("", "."):
        raise UnsupportedEmbeddingError(f"{modules_file}: the first module must be a {ST_TRANSFORMER} stored at the "
                                        f"top of the directory")
    st_config = os.path.join(path, "sentence_bert_config.json")
    if os.path.isfile(st_config):
        limit = _json(st_config).get("max_seq_length")
        pipeline.max_seq_length = int(limit) if limit else None
    pooled = False
    for module in modules[1:]:
        kind, folder = module["type"], os.path.join(path, module.get("path", ""))
        if kind == ST_POOLING:
            if pooled or pipeline.dense or pipeline.normalize:
                raise UnsupportedEmbeddingError(f"{modules_file}: a second Pooling module, or one after Dense or "
                                                f"Normalize, is not supported")
            pipeline.pooling, pooled = _pooling(os.path.join(folder, "config.json")), True
        elif kind == ST_DENSE:
            if not pooled or pipeline.normalize:
                raise UnsupportedEmbeddingError(f"{modules_file}: a Dense module before Pooling or after Normalize "
                                                f"is not supported")
            pipeline.dense.append(_dense(folder))
        elif kind == ST_NORMALIZE:
            if not pooled:
                raise UnsupportedEmbeddingError(f"{modules_file}: Normalize before Pooling is not supported")
            pipeline.normalize = True
        else:
            raise UnsupportedEmbeddingError(f"{modules_file}: sentence-transformers module {kind!r} is not "
                                            f"supported (only Transformer, Pooling, Dense and Normalize)")
    if not pooled:
        raise UnsupportedEmbeddingError(f"{modules_file} has no Pooling module: token embeddings are not a "
                                        f"text embedding")
    return pipeline


def _pooling(config_file: str) -> list[str]:
    config = _json(config_file)
    if config.get("include_prompt", True) is False:
        raise UnsupportedEmbeddingError(f"{config_file}: include_prompt false (pooling without the prompt's tokens) "
                                        f"is not supported")
    unknown = sorted(k for k, v in config.items() if k.startswith("pooling_mode_") and v
                     and k[len("pooling_mode_"):] not in POOLING_MODES)
    if unknown:
        raise UnsupportedEmbeddingError(f"{config_file}: {', '.join(unknown)} is not supported (supported: "
                                        f"{', '.join('pooling_mode_' + m for m in POOLING_MODES)})")
    modes = [m for m in POOLING_MODES if config.get("pooling_mode_" + m)]
    if not modes:
        raise UnsupportedEmbeddingError(f"{config_file} selects no pooling mode")
    return modes


def _dense(folder: str) -> Dense:
    config_file = os.path.join(folder, "config.json")
    config = _json(config_file)
    activation = ACTIVATIONS.get(config.get("activation_function", "torch.nn.modules.linear.Identity"))
    if activation is None:
        raise UnsupportedEmbeddingError(f"{config_file}: activation_function {config.get('activation_function')!r} "
                                        f"is not supported (supported: {', '.join(sorted(ACTIVATIONS))})")
    weights = _dense_weights(folder)
    try:
        weight = np.asarray(weights["linear.weight"], np.float32)
    except KeyError:
        raise ModelFileError(f"{folder}: the Dense weights have no linear.weight") from None
    out_features, in_features = int(config["out_features"]), int(config["in_features"])
    if weight.shape != (out_features, in_features):
        raise ModelFileError(f"{folder}: linear.weight is {list(weight.shape)}, its config says "
                             f"[{out_features}, {in_features}]")
    bias = weights.get("linear.bias") if config.get("bias", True) else None
    if config.get("bias", True) and bias is None:
        raise ModelFileError(f"{folder}: the Dense weights have no linear.bias, its config says bias: true")
    return Dense(weight, None if bias is None else np.asarray(bias, np.float32), activation)


def _dense_weights(folder: str) -> dict[str, np.ndarray]:
    safetensors_file = os.path.join(folder, "model.safetensors")
    if os.path.isfile(safetensors_file):
        from safetensors.torch import load_file  # bfloat16 weights too, which numpy cannot hold

        try:
            return {k: v.float().numpy() for k, v in load_file(safetensors_file).items()}
        except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types on a damaged file
            raise ModelFileError(f"{safetensors_file} is not readable: {exc}") from None
    bin_file = os.path.join(folder, "pytorch_model.bin")
    if os.path.isfile(bin_file):
        import torch

        try:
            state = torch.load(bin_file, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch.load raises many types on a damaged file
            raise ModelFileError(f"{bin_file} is not readable: {exc}") from None
        return {k: v.float().numpy() for k, v in state.items()}
    raise ModelFileError(f"{folder} holds no Dense weights (model.safetensors or pytorch_model.bin)")


def directory_task(model: Any) -> str:
    """The export task a model implies when none is given: text_embedding for a directory whose config.json is
    an encoder's (BERT-like, ModernBERT, EmbeddingGemma), text_generation otherwise (that path reports a missing
    or unreadable config)."""
    if isinstance(model, (str, os.PathLike)):
        config_file = os.path.join(os.fspath(model), "config.json")
        try:
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            return "text_generation"
        if isinstance(config, dict) and is_embedding_config(config):
            return "text_embedding"
    return "text_generation"
