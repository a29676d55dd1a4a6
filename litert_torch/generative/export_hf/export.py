"""`export`: a Hugging Face causal LM -> OUT/model.litertlm that the LiteRT-LM runtime runs.

    from litert_torch.generative.export_hf import export
    export.export(model="path/to/hf_model_dir", output_dir="out", prefill_lengths=[32, 128], cache_length=1024,
                  quantization_recipe="dynamic_wi8_afp32")

The call and its defaults are those of the official litert-torch exporter, so existing scripts run unchanged.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import logging

from litert_torch.errors import InvalidArgumentError
from litert_torch.files import atomic_file, scratch_folder
from litert_torch.generative import bundle, direct, direct_gemma
from litert_torch.generative.config import ARCHITECTURES, DIRECT_ONLY, PLE_GEMMA
from litert_torch.generative import source as direct_source
from litert_torch.generative.export_options import (  # noqa: F401 (re-exported)
    DEFAULT_RECIPE, FLOAT_RECIPES, INT8_WEIGHTS, check_output_dir as _check_output_dir, check_recipe as _check_recipe,
)
from litert_torch.generative.decoder_file import (  # noqa: F401 (re-exported)
    check_lengths as _check_lengths, int8_model as _int8_model, write_decoder,
)
from litert_torch.generative.weights import ModelSourceError, numpy_weights
from litert_torch.memory import FilePages, collections_for_large_graphs

log = logging.getLogger("litert_torch")

BUNDLE_NAME = "model.litertlm"
TFLITE_NAME = "model.tflite"



TEXT_GENERATION = "text_generation"
TEXT_EMBEDDING = "text_embedding"  # ours: the official exporter has no embedding task
AUTOMATIC_SPEECH_RECOGNITION = "automatic_speech_recognition"
IMAGE_TEXT_TO_TEXT = "image_text_to_text"


def resolve_task(task: Any, model: Any) -> str:
    """`task` checked, or when None the task the model directory's config.json implies (an encoder such as
    BERT or EmbeddingGemma: text_embedding; Whisper or Moonshine: automatic_speech_recognition; an image+text
    model: image_text_to_text, except one whose language model alone the text exporter takes (Qwen 3.5);
    anything else: text_generation)."""
    from litert_torch.generative.embedding_source import directory_task

    if task is None:
        if _is_asr_directory(model):
            return AUTOMATIC_SPEECH_RECOGNITION
        return IMAGE_TEXT_TO_TEXT if _is_vlm_directory(model) else directory_task(model)
    name = str(getattr(task, "value", task)).lower()
    if name not in (TEXT_GENERATION, TEXT_EMBEDDING, AUTOMATIC_SPEECH_RECOGNITION, IMAGE_TEXT_TO_TEXT):
        raise InvalidArgumentError(f"task {task!r} is not supported: use text_generation, text_embedding, "
                                   f"automatic_speech_recognition or image_text_to_text")
    if name != AUTOMATIC_SPEECH_RECOGNITION and _is_asr_directory(model):
        from litert_torch.generative.config import UnsupportedModelError

        raise UnsupportedModelError(f"the config.json of {os.fspath(model)} describes a speech-to-text model, "
                                    f"which has no {name} export: use task='automatic_speech_recognition'")
    if name == IMAGE_TEXT_TO_TEXT:
        return name
    if name == TEXT_GENERATION and directory_task(model) == TEXT_EMBEDDING:
        from litert_torch.generative.config import UnsupportedModelError

        raise UnsupportedModelError(f"the config.json of {os.fspath(model)} describes a text encoder, which has no "
                                    f"text_generation export: use task='text_embedding'")
    return name


def _is_asr_directory(model: Any) -> bool:
    """Whether `model` is a directory whose config.json describes a speech-to-text model."""
    from litert_torch.generative.asr import is_asr_config

    config = _directory_config(model)
    return config is not None and is_asr_config(config)


def _is_vlm_directory(model: Any) -> bool:
    """Whether `model` is a directory whose config.json describes an image+text model to export as one: a family
    the image+text task converts, or any other image+text model but those whose language model the text exporter
    takes (Qwen 3.5's checkpoints), which export their language model by default."""
    from litert_torch.generative.vlm import FAMILIES, is_vlm_config

    config = _directory_config(model)
    if config is None or not is_vlm_config(config):
        return False
    return config.get("model_type") in FAMILIES or config.get("model_type") not in ARCHITECTURES


def _directory_config(model: Any) -> dict | None:
    """The config.json of the directory `model`, or None (not a directory, no readable config)."""
    import json

    if not isinstance(model, (str, os.PathLike)):
        return None
    try:
        with open(os.path.join(os.fspath(model), "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _task_export(task: str) -> Callable[..., str]:
    """The export function of a task other than text generation; each takes `export`'s arguments (refusing by
    name those that mean nothing for it) and its own options."""
    if task == AUTOMATIC_SPEECH_RECOGNITION:
        from litert_torch.generative.asr import export_asr_task

        return export_asr_task
    if task == IMAGE_TEXT_TO_TEXT:
        from litert_torch.generative.vlm import export_vlm_task

        return export_vlm_task
    from litert_torch.generative.embedding import export_embedding_task

    return export_embedding_task


def export(
    model: Any,
    output_dir: str | os.PathLike,
    task: str | None = None,
    keep_temporary_files: bool = False,
    trust_remote_code: bool = False,
    prefill_lengths: Sequence[int] | None = None,
    cache_length: int | None = None,
    quantization_recipe: str | None = None,
    enable_dynamic_shape: bool | None = None,
    auto_model_override: str | None = None,
    use_jinja_template: bool | None = None,
    bundle_litert_lm: bool | None = None,
    *,
    tokenizer: Any = None,
    progress: Callable[[str], None] | None = None,
    **official_options: Any,
) -> str:
    """Convert `model` (a Hugging Face model directory, or a transformers *ForCausalLM with `tokenizer=`) and
    write `output_dir/model.litertlm`. `task`: "text_generation", "text_embedding" for an encoder (see
    docs/EMBEDDINGS.md), "automatic_speech_recognition" for Whisper or Moonshine (docs/ASR.md) or
    "image_text_to_text" for an image+text model (docs/VLM.md, where `vision_encoder_quantization_recipe` sets
    the vision sections' recipe); None reads it from the directory's config.json. For automatic_speech_recognition (Whisper, Moonshine) the official exporter's
    `input_sec` sets Moonshine's encoder window (default 30 s), and `audio_encoder_quantization_recipe` the
    speech encoder section's recipe (None: `quantization_recipe`'s). For text_generation it writes
    `model.tflite` and `tokenizer.json` beside the bundle when `keep_temporary_files`, or only `model.tflite`
    when `bundle_litert_lm` is False. Returns the path of the bundle (or of the .tflite).

    The arguments are the official exporter's, in its order, with its defaults: `prefill_lengths` (256,), one
    `prefill_<N>` signature per length; `cache_length` 4096, the KV cache size (the longest prompt + generated
    text); `quantization_recipe` "dynamic_wi8_afp32" when None (int8 weights per channel, embeddings included);
    "none" for float, "fp16", "dynamic-int8", any ai-edge-quantizer recipe name (e.g. "dynamic_wi4b32_afp32",
    int4 weights in blocks of 32) or a JSON recipe file. The official exporter's other options are refused by
    name when given a value (this exporter does not implement them). Everything is checked before any work,
    and nothing is written unless the whole export succeeds."""
    task = resolve_task(task, model)
    # each task's own options, taken out before the check of the rest
    own = {AUTOMATIC_SPEECH_RECOGNITION: ("input_sec", "audio_encoder_quantization_recipe"),
           IMAGE_TEXT_TO_TEXT: ("vision_encoder_quantization_recipe",)}.get(task, ())
    extra = {name: official_options.pop(name, None) for name in own}
    given = sorted(k for k, v in official_options.items() if v not in (None, False))
    if given:
        raise InvalidArgumentError(f"export option(s) {', '.join(given)} are not supported by this exporter")
    if task != TEXT_GENERATION:
        return _task_export(task)(model, output_dir, keep_temporary_files=keep_temporary_files,
                                  trust_remote_code=trust_remote_code, prefill_lengths=prefill_lengths,
                                  cache_length=cache_length, quantization_recipe=quantization_recipe,
                                  enable_dynamic_shape=enable_dynamic_shape, auto_model_override=auto_model_override,
                                  use_jinja_template=use_jinja_template, bundle_litert_lm=bundle_litert_lm,
                                  tokenizer=tokenizer, progress=progress, **extra)
    if enable_dynamic_shape:
        raise InvalidArgumentError("enable_dynamic_shape is not supported: the exporter writes one static "
                                   "prefill_<N> signature per length in prefill_lengths")
    if auto_model_override is not None:
        raise InvalidArgumentError("auto_model_override is not supported: the architecture is read from "
                                   "config.json")
    prefill_lengths = (256,) if prefill_lengths is None else prefill_lengths
    cache_length = 4096 if cache_length is None else cache_length
    quantization_recipe = DEFAULT_RECIPE if quantization_recipe is None else quantization_recipe
    use_jinja_template = True if use_jinja_template is None else use_jinja_template
    bundle_litert_lm = True if bundle_litert_lm is None else bundle_litert_lm
    output_dir = os.fspath(output_dir)
    _check_output_dir(output_dir)
    bundle_path = os.path.join(output_dir, BUNDLE_NAME) if bundle_litert_lm else None
    tflite_path = os.path.join(output_dir, TFLITE_NAME) if keep_temporary_files or not bundle_litert_lm else None
    tokenizer_path = os.path.join(output_dir, "tokenizer.json") if keep_temporary_files and bundle_litert_lm \
        else None
    export_files(model, bundle_path=bundle_path, tflite_path=tflite_path, tokenizer_path=tokenizer_path,
                 prefill_lengths=prefill_lengths, cache_length=cache_length, quantization_recipe=quantization_recipe,
                 tokenizer=tokenizer, trust_remote_code=trust_remote_code, use_jinja_template=use_jinja_template,
                 progress=progress)
    return bundle_path if bundle_path is not None else os.path.join(output_dir, TFLITE_NAME)


@collections_for_large_graphs()
def export_files(model: Any, *, bundle_path: str | None, tflite_path: str | None = None,
                 tokenizer_path: str | None = None, prefill_lengths: Sequence[int] = (256,), cache_length: int = 4096,
                 quantization_recipe: Any = DEFAULT_RECIPE, tokenizer: Any = None,
                 trust_remote_code: bool = False, use_jinja_template: bool = True,
                 progress: Callable[[str], None] | None = None) -> None:
    """The work of `export`, writing the bundle, the .tflite and the tokenizer.json to the paths given (each
    optional, one of the first two required). Arguments, the config and the tokenizer are checked before any
    conversion; every file is written atomically, and none unless the whole export succeeds."""
    report = progress or (lambda stage: None)
    if bundle_path is None and tflite_path is None:
        raise InvalidArgumentError("nothing to write: give bundle_path or tflite_path")
    lengths = _check_lengths(prefill_lengths, cache_length)
    recipe = _check_recipe(quantization_recipe)
    for path in (bundle_path, tflite_path, tokenizer_path):
        if path is not None:
            _check_output_dir(os.path.dirname(os.path.abspath(path)))
    report("read")
    need_tokenizer = bundle_path is not None or tokenizer_path is not None
    read = _read_direct(model, tokenizer, need_tokenizer, cache_length, use_jinja_template, trust_remote_code)
    if read is not None:
        # built op by op from the config and the weights, without tracing (generative/direct.py); a directory
        # with its own tokenizer is read without PyTorch or transformers
        owned, tokenizer_file, info = read.owned, read.tokenizer, read.info
        weights = direct.Weights(read.weights, direct_source.widen)
        build_direct = direct_gemma.build_llm if read.config.family in PLE_GEMMA else direct.build_llm
        model, layout = build_direct(weights, read.config, read.rope_parameters, cache_length, lengths,
                                     start_token_id=info.start_token_id if info else None,
                                     stop_token_ids=info.stop_token_ids if info else (), progress=report)
    else:
        report("trace")  # PyTorch and transformers are imported from here on
        from litert_torch.generative import hf
        from litert_torch.generative.convert import lower_llm
        from litert_torch.generative.model import build
        from litert_torch.generative.rope import rope_tables

        source = hf.load(model, tokenizer, need_tokenizer=need_tokenizer, trust_remote_code=trust_remote_code,
                         cache_length=cache_length)
        info = hf.bundle_info(source, cache_length, use_jinja_template) if source.tokenizer is not None else None
        owned, tokenizer_file = source.owned, source.tokenizer
        lm = build(source.weights, source.config,
                   rope_tables(source.config, source.hf_config.rope_parameters, cache_length), cache_length)
        model, layout = lower_llm(lm, lengths, start_token_id=info.start_token_id if info else None,
                                  stop_token_ids=info.stop_token_ids if info else (), progress=report)

    written: list[str] = []
    created: list[str] = []
    with scratch_folder("litert_export_") as scratch:
        try:
            model_file = os.path.join(scratch, "model.tflite")
            # A model read from a directory is ours alone: the pages of its weights, mapped from safetensors,
            # are handed back as soon as they are written or quantized.
            release = FilePages().release if owned else None
            report("write" if recipe is None else "quantize")
            write_decoder(model, model_file, recipe, release)
            report("bundle" if bundle_path is not None else "write")
            for path in (bundle_path, tflite_path, tokenizer_path):
                folder = os.path.dirname(os.path.abspath(path)) if path is not None else None
                if folder is not None and not os.path.isdir(folder):
                    os.makedirs(folder)
                    created.append(folder)
            scratch_tokenizer = _tokenizer_json(tokenizer_file, scratch) if tokenizer_file is not None else None
            if scratch_tokenizer is None and (bundle_path is not None or tokenizer_path is not None):
                raise ModelSourceError("the bundle and the tokenizer.json carry the model's tokenizer, and none "
                                       "was read")
            if bundle_path is not None and scratch_tokenizer is not None:
                bundle.write_bundle(bundle_path, model_file, scratch_tokenizer, layout, info)
                written.append(bundle_path)
            if tflite_path is not None:
                _copy_atomic(model_file, tflite_path)
                written.append(tflite_path)
            if tokenizer_path is not None and scratch_tokenizer is not None:
                _copy_atomic(scratch_tokenizer, tokenizer_path)
                written.append(tokenizer_path)
        except BaseException:
            for path in written:
                if os.path.exists(path):
                    os.unlink(path)
            for folder in reversed(created):
                if os.path.isdir(folder) and not os.listdir(folder):
                    os.rmdir(folder)
            raise


@dataclass
class _DirectRead:
    """What the direct builder and the bundle take, however the model was given."""

    config: Any  # LlmConfig
    rope_parameters: Any
    weights: Any  # numpy arrays by checkpoint name
    tokenizer: Any  # the path of a tokenizer.json, a transformers tokenizer, or None
    info: Any  # BundleInfo, or None without a tokenizer
    owned: bool  # the weights are mapped from files here and nothing else holds them


def _read_direct(model: Any, tokenizer: Any, need_tokenizer: bool, cache_length: int, use_jinja_template: bool,
                 trust_remote_code: bool) -> _DirectRead | None:
    """`model` read for the direct builder, or None when it is traced instead (an architecture, config or weights
    the direct builder does not take; the reason is logged). A directory is read without transformers unless
    its tokenizer is one transformers rebuilds, or a tokenizer is given; a model in memory is read as it is,
    its weights taken as numpy arrays sharing their memory."""
    if not isinstance(model, (str, os.PathLike)):
        return _read_in_memory(model, tokenizer, need_tokenizer, cache_length, use_jinja_template)
    path = os.fspath(model)
    read = direct_source.read(path, need_tokenizer=need_tokenizer and tokenizer is None, cache_length=cache_length,
                              use_jinja_template=use_jinja_template)
    if isinstance(read, str):
        model_type = direct_source.config_json(path).get("model_type")
        if isinstance(model_type, str) and ARCHITECTURES.get(model_type) in DIRECT_ONLY:
            # read with transformers and built directly: the traced builder does not build it
            return _read_in_memory(path, tokenizer, need_tokenizer, cache_length, use_jinja_template)
        log.info("building the decoder by tracing it: %s", read)
        return None
    tokenizer_file, info = read.tokenizer_json, read.info
    if need_tokenizer and (tokenizer is not None or read.tokenizer_reason is not None):
        from litert_torch.generative import hf

        if tokenizer is None:  # the tokenizer as transformers rebuilds it, as the reference model runs
            log.info("reading the tokenizer with transformers: %s", read.tokenizer_reason)
            tokenizer = hf.load_tokenizer(path, trust_remote_code)
        hf.check_tokenizer(tokenizer, True)
        tokenizer_file = tokenizer
        info = hf.tokenizer_info(tokenizer, read.config, direct_source.generation_stop_ids(path), cache_length,
                                 use_jinja_template)
    return _DirectRead(read.config, read.rope_parameters, read.weights, tokenizer_file, info, owned=True)


def _read_in_memory(model: Any, tokenizer: Any, need_tokenizer: bool, cache_length: int,
                    use_jinja_template: bool) -> _DirectRead | None:
    from litert_torch.generative import hf

    source = hf.load(model, tokenizer, need_tokenizer=need_tokenizer, cache_length=cache_length)
    reason = direct.can_build(source.config)
    arrays = numpy_weights(source.weights) if reason is None else None
    if isinstance(arrays, str):
        reason, arrays = arrays, None
    if reason is not None:
        log.info("building the decoder by tracing it: %s", reason)
        return None
    info = hf.bundle_info(source, cache_length, use_jinja_template) if source.tokenizer is not None else None
    return _DirectRead(source.config, source.hf_config.rope_parameters, arrays, source.tokenizer, info,
                       owned=False)


def _tokenizer_json(tokenizer: Any, directory: str) -> str:
    """The tokenizer.json of `tokenizer` (a transformers tokenizer, or the path of the directory's file) written
    into `directory`; its path."""
    if isinstance(tokenizer, str):
        path = os.path.join(directory, "tokenizer.json")
        shutil.copyfile(tokenizer, path)
        return path
    from litert_torch.generative import hf

    return hf.tokenizer_json(tokenizer, directory)


def _copy_atomic(source: str, target: str) -> None:
    with open(source, "rb") as src, atomic_file(target) as out:
        shutil.copyfileobj(src, out, 1 << 20)
