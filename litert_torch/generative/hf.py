"""Reading a Hugging Face causal LM for export: a local directory (save_pretrained) or a model in memory.

The config is read and checked (`LlmConfig.from_hf`) before any weight is loaded, and the tokenizer is found
before any conversion work, so that an unsupported architecture, a missing tokenizer or a bad directory is an
error in the first second, with nothing written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch

from litert_torch.errors import ModelFileError
from litert_torch.generative.bundle import BundleInfo
from litert_torch.generative.config import LlmConfig, UnsupportedModelError


class ModelSourceError(ModelFileError):
    """The model to export cannot be read: a missing or malformed directory, no weights, no tokenizer."""


@dataclass
class HfSource:
    model: torch.nn.Module
    config: LlmConfig
    tokenizer: Any  # a transformers tokenizer, or None
    owned: bool = False  # read from a directory here: nothing else holds the model


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise ModelSourceError("exporting a Hugging Face model needs transformers: "
                               "pip install 'litert-torch-direct[llm]'") from exc
    return transformers


def read_config(path: str) -> LlmConfig:
    """The checked config of the model directory `path` (nothing else is read)."""
    if not os.path.isdir(path):
        raise ModelSourceError(f"{path} is not a directory (a Hugging Face model saved with save_pretrained)")
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ModelSourceError(f"{path} has no config.json: not a Hugging Face model directory")
    try:
        with open(config_path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{config_path} is not readable JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelSourceError(f"{config_path} does not hold a JSON object")
    if raw.get("model_type") == "gemma3" and isinstance(raw.get("text_config"), dict):
        return LlmConfig.from_hf(raw)  # refused with the reason
    config = _transformers().AutoConfig.from_pretrained(path, local_files_only=True)
    return LlmConfig.from_hf(config)


def _has_weights(path: str) -> bool:
    names = os.listdir(path)
    return any(n.endswith((".safetensors", ".bin")) or n.endswith(".safetensors.index.json") for n in names)


def load(model: Any, tokenizer: Any = None, *, need_tokenizer: bool = True, trust_remote_code: bool = False,
         cache_length: int | None = None) -> HfSource:
    """Read `model` (a directory or a transformers PreTrainedModel) and its tokenizer, checking the config
    first (and `cache_length` against it, when given)."""
    from litert_torch.generative.model import check_cache_length

    transformers = _transformers()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        config = read_config(path)
        if cache_length is not None:
            check_cache_length(config, cache_length)
        if not _has_weights(path):
            raise ModelSourceError(f"{path} has no weights (*.safetensors or *.bin)")
        if tokenizer is None:
            tokenizer = _load_tokenizer(path, need_tokenizer, trust_remote_code)
        try:
            hf = transformers.AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.float32, local_files_only=True, trust_remote_code=trust_remote_code)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelSourceError(f"could not load the model in {path}: {exc}") from exc
    elif isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        config = LlmConfig.from_hf(model.config)
        if cache_length is not None:
            check_cache_length(config, cache_length)
        hf = model
        if tokenizer is None and need_tokenizer:
            raise ModelSourceError("a model given in memory needs its tokenizer: export(model=..., tokenizer=...)")
    else:
        raise ModelSourceError(f"model must be a Hugging Face model directory or a transformers model, got "
                               f"{type(model).__name__}")
    if not hasattr(hf, "model") or not hasattr(hf.model, "rotary_emb"):
        raise UnsupportedModelError(f"{type(hf).__name__} is not a causal LM of a supported architecture "
                                    "(expected *ForCausalLM with model.rotary_emb)")
    if need_tokenizer and not getattr(tokenizer, "is_fast", False):
        raise ModelSourceError("the tokenizer must be a fast (tokenizers-backed) tokenizer with a tokenizer.json; "
                               f"got {type(tokenizer).__name__}")
    return HfSource(hf.eval(), config, tokenizer, owned=isinstance(model, (str, os.PathLike)))


def _load_tokenizer(path: str, need: bool, trust_remote_code: bool) -> Any:
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        if need:
            raise ModelSourceError(f"{path} has no tokenizer.json: the LiteRT-LM bundle carries the Hugging Face "
                                   "tokenizer (save it with tokenizer.save_pretrained into the model directory)")
        return None
    try:
        return _transformers().AutoTokenizer.from_pretrained(path, local_files_only=True,
                                                             trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelSourceError(f"could not load the tokenizer in {path}: {exc}") from exc


def tokenizer_json(tokenizer: Any, directory: str) -> str:
    """Write the tokenizer's tokenizer.json into `directory` and return its path."""
    path = os.path.join(directory, "tokenizer.json")
    tokenizer.backend_tokenizer.save(path)
    return path


def bundle_info(source: HfSource, cache_length: int, use_jinja_template: bool = True) -> BundleInfo:
    """Start token (what the tokenizer prepends to a text: LiteRT-LM prepends it itself), stop tokens (the
    generation config's and the config's end-of-sequence ids, and the tokenizer's), the chat template."""
    tok, cfg = source.tokenizer, source.config
    start = None
    with_special = tok("a")["input_ids"]
    without = tok("a", add_special_tokens=False)["input_ids"]
    if len(with_special) > len(without) and with_special[1:] == without[:len(with_special) - 1] \
            and with_special[0] == tok.bos_token_id:
        start = int(tok.bos_token_id)
    stops = set(cfg.eos_token_ids)
    gen = getattr(source.model, "generation_config", None)
    gen_eos = getattr(gen, "eos_token_id", None)
    if gen_eos is not None:
        stops.update(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos])
    if tok.eos_token_id is not None:
        stops.add(tok.eos_token_id)
    template = tok.chat_template if use_jinja_template and isinstance(tok.chat_template, str) else None
    return BundleInfo(start_token_id=start, stop_token_ids=sorted(int(s) for s in stops if s is not None),
                      chat_template=template, max_num_tokens=cache_length)
