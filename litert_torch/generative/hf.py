"""Reading a Hugging Face causal LM for export: a local directory (save_pretrained) or a model in memory.

The config is read and checked (`LlmConfig.from_hf`) before any weight is loaded, and the tokenizer is found
before any conversion work, so that an unsupported architecture, a missing tokenizer or a bad directory is an
error in the first second, with nothing written. A directory's weights are then mapped from its files by name
(`weights.read_weights`): the Hugging Face model itself is never built, so neither its modeling code nor a
copy of its weights costs time or memory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from litert_torch.generative.bundle import BundleInfo
from litert_torch.generative.config import LlmConfig, UnsupportedModelError, token_ids
from litert_torch.generative.source import config_json, generation_stop_ids
from litert_torch.generative.weights import ModelSourceError, read_weights, weight_files
from litert_torch.logs import third_party_output


@dataclass
class HfSource:
    weights: Mapping[str, torch.Tensor]  # parameters by name: a model's state dict, or a directory's checkpoint
    config: LlmConfig
    hf_config: Any  # the transformers config
    tokenizer: Any  # a transformers tokenizer, or None
    generation_stop_ids: list[int] = field(default_factory=list)  # the generation config's eos_token_id
    owned: bool = False  # read from a directory here: nothing else holds the weights


def _transformers():
    try:
        import transformers
    except ImportError as exc:
        raise ModelSourceError("exporting a Hugging Face model needs transformers: "
                               "pip install 'litert-torch-direct[llm]'") from exc
    return transformers


def read_config(path: str) -> LlmConfig:
    """The checked config of the model directory `path` (nothing else is read)."""
    return _read_config(path)[0]


def _read_config(path: str) -> tuple[LlmConfig, Any]:
    """The checked config of the model directory `path` and the transformers config it was read from."""
    raw = config_json(path)
    if raw.get("model_type") == "gemma3" and isinstance(raw.get("text_config"), dict):
        return LlmConfig.from_hf(raw), None  # refused with the reason
    try:
        config = _transformers().AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # transformers' and huggingface_hub's own errors for a malformed config
        raise ModelSourceError(f"could not read the config in {path}: {exc}") from exc
    checked = LlmConfig.from_hf(config)
    if raw.get("model_type") in ("qwen3_5", "qwen3_5_moe"):  # an image+text model: its language model's config
        config = config.text_config
    return checked, config


def _read_directory(path: str, cache_length: int | None) -> tuple[LlmConfig, Any, list[str]]:
    """The checked config of the model directory `path` (and `cache_length` against it, when given), the
    transformers config, and the weight files, which must exist."""
    from litert_torch.generative.config import check_cache_length

    config, hf_config = _read_config(path)
    if cache_length is not None:
        check_cache_length(config, cache_length)
    files = weight_files(path)
    if not files:
        raise ModelSourceError(f"{path} has no weights (*.safetensors or *.bin)")
    return config, hf_config, files


def load(model: Any, tokenizer: Any = None, *, need_tokenizer: bool = True, trust_remote_code: bool = False,
         cache_length: int | None = None) -> HfSource:
    """Read `model` (a directory or a transformers PreTrainedModel) and its tokenizer, checking the config
    first (and `cache_length` against it, when given). A directory's weights are mapped from its files by name;
    no Hugging Face model is built."""
    from litert_torch.generative.config import check_cache_length

    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        config, hf_config, files = _read_directory(path, cache_length)
        if tokenizer is None:
            tokenizer = _load_tokenizer(path, need_tokenizer, trust_remote_code)
        check_tokenizer(tokenizer, need_tokenizer)
        weights = read_weights(files)
        stops = generation_stop_ids(path)
    elif isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        config, hf_config = LlmConfig.from_hf(model.config), model.config
        if cache_length is not None:
            check_cache_length(config, cache_length)
        rotary = ("rotary_emb", "pos_emb")  # (LFM2-MoE names it pos_emb)
        if not hasattr(model, "model") or not any(hasattr(model.model, n) for n in rotary):
            raise UnsupportedModelError(f"{type(model).__name__} is not a causal LM of a supported architecture "
                                        "(expected *ForCausalLM with model.rotary_emb)")
        if tokenizer is None and need_tokenizer:
            raise ModelSourceError("a model given in memory needs its tokenizer: export(model=..., tokenizer=...)")
        check_tokenizer(tokenizer, need_tokenizer)
        weights = dict(model.state_dict())
        stops = token_ids(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    else:
        raise ModelSourceError(f"model must be a Hugging Face model directory or a transformers model, got "
                               f"{type(model).__name__}")
    return HfSource(weights, config, hf_config, tokenizer, stops, owned=isinstance(model, (str, os.PathLike)))


def reference_model(model: Any, trust_remote_code: bool = False) -> torch.nn.Module:
    """The Hugging Face model itself (float32, eval mode) of `model` (a directory or a model in memory), to run
    beside a converted one (validation); the config is checked first, as for an export."""
    if not isinstance(model, (str, os.PathLike)):
        load(model, need_tokenizer=False)  # the checks of an export
        return model.eval()
    path = os.fspath(model)
    _read_directory(path, None)
    try:
        with third_party_output():  # transformers' "Loading weights" progress bar
            hf = _transformers().AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.float32, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelSourceError(f"could not load the model in {path}: {exc}") from exc
    return hf.eval()


def check_tokenizer(tokenizer: Any, need: bool) -> None:
    """A tokenizer the bundle can carry (when one is needed): a fast one, backed by a tokenizer.json."""
    if need and not getattr(tokenizer, "is_fast", False):
        raise ModelSourceError("the tokenizer must be a fast (tokenizers-backed) tokenizer with a tokenizer.json; "
                               f"got {type(tokenizer).__name__}")


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
    return tokenizer_info(source.tokenizer, source.config, source.generation_stop_ids, cache_length,
                          use_jinja_template)


def load_tokenizer(path: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer of directory `path` as transformers builds it, which must be a fast one."""
    tokenizer = _load_tokenizer(path, True, trust_remote_code)
    check_tokenizer(tokenizer, True)
    return tokenizer


def tokenizer_info(tok: Any, cfg: LlmConfig, stop_ids: Sequence[int], cache_length: int,
                   use_jinja_template: bool = True) -> BundleInfo:
    """`bundle_info` of the transformers tokenizer `tok` of a model of config `cfg`, with the generation
    config's stop ids `stop_ids`."""
    start = None
    with_special = tok("a")["input_ids"]
    without = tok("a", add_special_tokens=False)["input_ids"]
    if len(with_special) > len(without) and with_special[1:] == without[:len(with_special) - 1] \
            and with_special[0] == tok.bos_token_id:
        start = int(tok.bos_token_id)
    stops = set(cfg.eos_token_ids)
    stops.update(stop_ids)
    if tok.eos_token_id is not None:
        stops.add(tok.eos_token_id)
    template = tok.chat_template if use_jinja_template and isinstance(tok.chat_template, str) else None
    return BundleInfo(start_token_id=start, stop_token_ids=sorted(int(s) for s in stops if s is not None),
                      chat_template=template, max_num_tokens=cache_length)
