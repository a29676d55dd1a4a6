"""Speech to text: a Hugging Face Whisper or Moonshine model directory -> a .litertlm bundle that
`litert_torch.generative.load(bundle).transcribe(audio)` runs (asr_runner.py).

    from litert_torch.generative.export_hf import export
    bundle = export.export(model="whisper_dir", output_dir="out", task="automatic_speech_recognition")

The bundle's sections:

    system metadata         Authors, task: automatic_speech_recognition
    tokenizer               the Hugging Face tokenizer.json
    TFLite audio encoder    (model_type tf_lite_audio_encoder_hw) signature `encode`: Whisper's `input_features`
                            float32 [1, n_mels, frames] (or Moonshine's `input_values` float32 [1, N] and
                            `attention_mask` int32 [1, N]) -> per decoder layer `cross_k_i` [1, H, S, D] and
                            `cross_v_i` [1, H, D, S] (and Moonshine's `cross_mask` [1, 1, 1, S])
    TFLite decoder          (model_type tf_lite_prefill_decode) signatures `prefill_<N>` (N the prompt's length) and
                            `decode`: `tokens` int32 [1, T], `input_pos` int32 [T], the self-attention caches
                            `kv_cache_k_i` [1, H, C, D] / `kv_cache_v_i` [1, H, D, C] (C = max_target_positions,
                            Moonshine's max_position_embeddings) and the encoder's outputs -> `logits` [1, 1, V]
                            and the caches
    generic data            (name litert_torch_asr) JSON: the log-mel parameters, the prompt, the language tokens
                            to detect from, the end-of-text and suppressed tokens, the length limit, the cache and
                            encoder sizes (asr_runner.AsrConfig)

The generation config is read once, here: the prompt is what `generate` starts from (Whisper's:
decoder_start_token_id, then the forced or detected language and the task tokens, then <|notimestamps|>;
Moonshine's: decoder_start_token_id); a config
asking for what the runner does not reproduce (timestamps, beam search, sampling, other logits processors) is
refused by name. See docs/ASR.md.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

from litert_torch.errors import InvalidArgumentError, ModelFileError, one_line
from litert_torch.files import copies_kept_with, scratch_folder
from litert_torch.generative.asr_frontend import LogMelParameters, RawAudioParameters
from litert_torch.generative.asr_runner import (
    CONFIG_SECTION, DECODE_SIGNATURE, ENCODE_SIGNATURE, PREFILL_PREFIX, AsrConfig,
)
from litert_torch.generative.config import UnsupportedModelError

if TYPE_CHECKING:
    from litert_torch.converter import Converter

BUNDLE_NAME = "model.litertlm"
DEFAULT_INPUT_SEC = 30  # Moonshine's encoder window when input_sec is not given
ASR_ARCHITECTURES = {"WhisperForConditionalGeneration": "whisper", "MoonshineForConditionalGeneration": "moonshine"}


class UnsupportedAsrModelError(UnsupportedModelError):
    """A speech-to-text model, feature extractor or generation config the ASR exporter does not reproduce; the
    message names the file, the field and the value."""


def is_asr_config(config: dict) -> bool:
    """Whether a config.json describes a speech-to-text model (Whisper or Moonshine)."""
    architectures = config.get("architectures") or []
    return config.get("model_type") in ("whisper", "moonshine") or any(a in ASR_ARCHITECTURES for a in architectures)


def export_asr_task(model: Any, output_dir: str | os.PathLike, *, input_sec: float | None = None,
                    keep_temporary_files: bool = False,
                    trust_remote_code: bool = False, prefill_lengths: Sequence[int] | None = None,
                    cache_length: int | None = None, quantization_recipe: Any = None,
                    audio_encoder_quantization_recipe: Any = None, enable_dynamic_shape: bool | None = None, auto_model_override: str | None = None,
                    use_jinja_template: bool | None = None, bundle_litert_lm: bool | None = None,
                    tokenizer: Any = None, progress: Callable[[str], None] | None = None) -> str:
    """`export(..., task="automatic_speech_recognition")`: the official exporter's arguments that mean something
    for a speech model, the others refused by name."""
    refused = {"prefill_lengths": prefill_lengths is not None, "cache_length": cache_length is not None,
               "enable_dynamic_shape": bool(enable_dynamic_shape),
               "auto_model_override": auto_model_override is not None, "use_jinja_template": use_jinja_template is not None,
               "bundle_litert_lm=False": bundle_litert_lm is False, "tokenizer": tokenizer is not None,
               "trust_remote_code": bool(trust_remote_code)}
    from litert_torch.generative.export_options import check_output_dir, refuse_options

    refuse_options("automatic_speech_recognition", refused,
                   "the prompt length comes from the generation config, the cache length is the decoder's "
                   "max_target_positions, the tokenizer is the model directory's, and the model is always bundled")

    output_dir = os.fspath(output_dir)
    check_output_dir(output_dir)
    return export_asr(model, os.path.join(output_dir, BUNDLE_NAME), quantization_recipe=quantization_recipe,
                      audio_encoder_quantization_recipe=audio_encoder_quantization_recipe, keep_folder=output_dir if keep_temporary_files else None, input_sec=input_sec,
                      progress=progress)


def read_config(path: str) -> dict:
    """config.json of the model directory `path`, checked to be a Whisper model's."""
    config_file = os.path.join(path, "config.json")
    config = _read_json(path, config_file, "the model's configuration")
    model_type = config.get("model_type")
    if model_type not in ("whisper", "moonshine"):
        raise UnsupportedAsrModelError(f"{config_file}: model_type {model_type!r} is not a speech-to-text model "
                                       f"the ASR exporter takes (whisper, moonshine)")
    if model_type == "moonshine":
        heads = config.get("decoder_num_attention_heads")
        kv_heads = config.get("decoder_num_key_value_heads") or heads
        if kv_heads != heads:
            raise UnsupportedAsrModelError(
                f"{config_file}: decoder_num_key_value_heads {kv_heads} differs from decoder_num_attention_heads "
                f"{heads}; Hugging Face's Moonshine attention shapes its queries by the key/value heads, so only "
                f"equal counts are reproduced")
    return config


def read_raw_frontend(path: str, input_sec: Any) -> RawAudioParameters:
    """Moonshine's input: the raw samples of preprocessor_config.json's Wav2Vec2FeatureExtractor, in a window of
    `input_sec` seconds (default DEFAULT_INPUT_SEC)."""
    where = os.path.join(path, "preprocessor_config.json")
    pre = _read_json(path, where)
    kind = pre.get("feature_extractor_type")
    if kind != "Wav2Vec2FeatureExtractor":
        raise UnsupportedAsrModelError(f"{where}: feature_extractor_type {kind!r} is not Wav2Vec2FeatureExtractor")
    if pre.get("do_normalize"):
        raise UnsupportedAsrModelError(f"{where}: do_normalize true (zero-mean unit-variance audio) is not "
                                       f"reproduced; Moonshine's extractor leaves the samples as they are")
    if int(pre.get("feature_size", 1)) != 1:
        raise UnsupportedAsrModelError(f"{where}: feature_size {pre['feature_size']}: raw audio has one channel")
    seconds = DEFAULT_INPUT_SEC if input_sec is None else input_sec
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"input_sec must be a number of seconds, got {input_sec!r}") from None
    rate = int(pre.get("sampling_rate", 16000))
    samples = int(round(seconds * rate))
    if not 0 < seconds <= 600 or samples < 1 + 384:
        raise InvalidArgumentError(f"input_sec {seconds:g} must give the encoder at least 385 samples and at most "
                                   f"600 s")
    return RawAudioParameters(samples=samples, sampling_rate=rate, padding_value=float(pre.get("padding_value", 0.0)))


def _read_json(path: str, where: str, what: str = "the feature extractor's parameters") -> dict:
    """The JSON object in the file `where` of the model directory `path` (`what`: what it holds, for errors)."""
    try:
        with open(where, encoding="utf-8") as f:
            data = json.load(f)
    except OSError:
        raise ModelFileError(f"{path} has no readable {os.path.basename(where)} ({what})") from None
    except ValueError as exc:
        raise ModelFileError(f"{where} is not JSON: {one_line(exc)}") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{where} does not hold a JSON object")
    return data


def read_frontend(path: str, config: dict) -> LogMelParameters:
    """The log-mel parameters of preprocessor_config.json, checked against what the runner computes and what the
    encoder takes."""
    where = os.path.join(path, "preprocessor_config.json")
    pre = _read_json(path, where)
    kind = pre.get("feature_extractor_type")
    if kind != "WhisperFeatureExtractor":
        raise UnsupportedAsrModelError(f"{where}: feature_extractor_type {kind!r} is not WhisperFeatureExtractor")
    if float(pre.get("dither", 0.0) or 0.0) != 0.0:
        raise UnsupportedAsrModelError(f"{where}: dither {pre['dither']} adds random noise to the features; only "
                                       f"dither 0 is reproduced")
    try:
        params = LogMelParameters(**{k: type(getattr(LogMelParameters, k))(pre[k])
                                     for k in LogMelParameters.__dataclass_fields__ if k in pre})
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{where}: {one_line(exc)}") from None
    expected = int(config.get("max_source_positions", 1500)) * 2  # conv2 has stride 2
    if params.frames != expected:
        raise UnsupportedAsrModelError(
            f"{where}: {params.chunk_length} s at hop {params.hop_length} gives {params.frames} frames, but the "
            f"encoder takes {expected} (config.json max_source_positions {config.get('max_source_positions')})")
    if int(config.get("num_mel_bins", params.feature_size)) != params.feature_size:
        raise UnsupportedAsrModelError(f"{where}: feature_size {params.feature_size} differs from config.json "
                                       f"num_mel_bins {config.get('num_mel_bins')}")
    return params


# generation-config fields whose non-default value asks for a search or logits processor the runner does not
# reproduce: field -> (the values that leave generate greedy and unprocessed, why)
_REFUSED_GENERATION = {
    "num_beams": ((None, 1), "beam search"),
    "do_sample": ((None, False), "sampling"),
    "return_timestamps": ((None, False), "timestamp prediction"),
    "repetition_penalty": ((None, 1.0), "a repetition penalty"),
    "no_repeat_ngram_size": ((None, 0), "n-gram blocking"),
    "bad_words_ids": ((None,), "banned word sequences"),
    "sequence_bias": ((None,), "sequence biases"),
    "min_length": ((None, 0), "a minimum length"),
    "min_new_tokens": ((None, 0), "a minimum length"),
    "forced_bos_token_id": ((None,), "a forced first token"),
    "forced_eos_token_id": ((None,), "a forced last token"),
    "no_speech_threshold": ((None,), "no-speech detection"),
    "logprob_threshold": ((None,), "temperature fallback"),
    "compression_ratio_threshold": ((None,), "temperature fallback"),
    "max_new_tokens": ((None,), "a max_new_tokens in the generation config (pass it to transcribe instead)"),
    "exponential_decay_length_penalty": ((None,), "a length penalty"),
    "renormalize_logits": ((None, False), "renormalized logits"),
}


def whisper_prompt(generation: Any, config: dict) -> tuple[list[int], list[int]]:
    """The tokens Whisper's `generate` starts decoding from for this generation config (transformers'
    `_retrieve_init_tokens` for one utterance): decoder_start_token_id; then the forced_decoder_ids that follow
    it (when neither `language` nor `task` is set) or the language and task tokens they name; then
    <|notimestamps|> when the config has it. When no language is given and the config has `lang_to_id`,
    `generate` detects the language from the audio: the prompt then holds -1 at index 1, and the second value
    returned is the language tokens detection chooses from (empty otherwise)."""
    where = "generation_config.json"
    start = getattr(generation, "decoder_start_token_id", None)
    if start is None:
        raise UnsupportedAsrModelError(f"{where} has no decoder_start_token_id")
    prompt: list[Any] = [int(start)]
    task = getattr(generation, "task", None)
    language = getattr(generation, "language", None)
    if task is None and language is None:
        forced = getattr(generation, "forced_decoder_ids", None) or config.get("forced_decoder_ids")
        if forced:
            forced = [list(pair) for pair in forced]
            index = 1
            while forced and forced[0][0] == index:
                prompt.append(forced.pop(0)[1])
                index += 1
            if forced:
                raise UnsupportedAsrModelError(f"{where}: forced_decoder_ids {forced} do not follow the prompt "
                                               f"(one entry for every index from 1)")
    lang_to_id = getattr(generation, "lang_to_id", None)
    if language is not None:
        if not lang_to_id:
            raise UnsupportedAsrModelError(f"{where}: language {language!r} is set but lang_to_id is missing")
        token = language if language in lang_to_id else f"<|{str(language).lower()}|>"
        if token not in lang_to_id:
            raise UnsupportedAsrModelError(f"{where}: language {language!r} is not in lang_to_id")
        if len(prompt) > 1:
            prompt[1] = lang_to_id[token]
        else:
            prompt.append(lang_to_id[token])
    detect: list[int] = []
    if language is None and lang_to_id and (len(prompt) <= 1 or prompt[1] is None):
        detect = sorted({int(t) for t in lang_to_id.values()})
        if len(prompt) > 1:
            prompt[1] = -1
        else:
            prompt.append(-1)
    task_to_id = getattr(generation, "task_to_id", None) or {}
    if task is not None:
        if task not in task_to_id:
            raise UnsupportedAsrModelError(f"{where}: task {task!r} is not in task_to_id")
        ids = set(task_to_id.values())
        if any(t in ids for t in prompt):
            prompt = [task_to_id[task] if t in ids else t for t in prompt]
        else:
            prompt.append(task_to_id[task])
    elif language is not None and task_to_id and not any(t in task_to_id.values() for t in prompt):
        prompt.append(task_to_id["transcribe"])
    no_timestamps = getattr(generation, "no_timestamps_token_id", None)
    if no_timestamps is not None and prompt[-1] != no_timestamps:
        prompt.append(no_timestamps)
    return [int(t) for t in prompt if t is not None], detect


def asr_config(hf: Any, generation: Any, frontend: LogMelParameters | RawAudioParameters) -> AsrConfig:
    """What the runner needs, from the model, its generation config and its frontend; refusals name the field."""
    for name, (defaults, what) in _REFUSED_GENERATION.items():
        value = getattr(generation, name, None)
        if value not in defaults:
            raise UnsupportedAsrModelError(f"generation_config.json: {name} = {value!r} asks for {what}, which the "
                                           f"ASR runner does not reproduce (it decodes greedily)")
    temperature = getattr(generation, "temperature", None)
    if isinstance(temperature, (list, tuple)):
        raise UnsupportedAsrModelError(f"generation_config.json: temperature {temperature!r} asks for temperature "
                                       f"fallback, which the ASR runner does not reproduce")
    config = hf.config
    if config.model_type == "whisper":
        prompt, languages = whisper_prompt(generation, config.to_dict())
        positions, layers = int(config.max_target_positions), int(config.decoder_layers)
        heads, width = int(config.decoder_attention_heads), int(config.d_model)
        encoder_length = int(config.max_source_positions)
    else:
        start = getattr(generation, "decoder_start_token_id", None)
        if start is None:
            raise UnsupportedAsrModelError("generation_config.json has no decoder_start_token_id")
        prompt, languages = [int(start)], []
        positions, layers = int(config.max_position_embeddings), int(config.decoder_num_hidden_layers)
        heads, width = int(config.decoder_num_attention_heads), int(config.hidden_size)
        if not isinstance(frontend, RawAudioParameters):
            raise UnsupportedAsrModelError("Moonshine's encoder takes raw samples, not log-mel features")
        encoder_length = int(hf.model.encoder._get_feat_extract_output_lengths(frontend.samples))
    if len(prompt) >= positions:
        raise UnsupportedAsrModelError(f"the prompt of {len(prompt)} tokens leaves no room in the decoder's "
                                       f"{positions} positions")
    eos = getattr(generation, "eos_token_id", None)
    eos_ids = [] if eos is None else [int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos])]
    return AsrConfig(
        model_type=config.model_type, frontend=frontend, prompt=prompt, language_token_ids=languages, eos_token_ids=eos_ids,
        suppress_tokens=[int(t) for t in (getattr(generation, "suppress_tokens", None) or [])],
        begin_suppress_tokens=[int(t) for t in (getattr(generation, "begin_suppress_tokens", None) or [])],
        max_length=None if getattr(generation, "max_length", None) is None else int(generation.max_length),
        max_target_positions=positions, num_layers=layers, num_heads=heads, head_dim=width // heads,
        encoder_length=encoder_length, vocab_size=int(config.vocab_size))


def export_asr(model: Any, bundle_path: str, *, quantization_recipe: Any = None,
               audio_encoder_quantization_recipe: Any = None, keep_folder: str | None = None,
               input_sec: float | None = None, progress: Callable[[str], None] | None = None) -> str:
    """Convert the Whisper or Moonshine model in the directory `model` and write the bundle `bundle_path`
    atomically (with `keep_folder`, also `encoder.tflite`, `decoder.tflite`, `tokenizer.json` and
    `asr_config.json` there). `input_sec`: Moonshine's encoder window in seconds (default 30; Whisper's is its
    feature extractor's 30 s). `quantization_recipe` quantizes the decoder section and
    `audio_encoder_quantization_recipe` the encoder section (None: the decoder's recipe). Config, feature extractor, generation config and tokenizer are checked before any
    conversion. Returns `bundle_path`."""
    report = progress or (lambda stage: None)
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidArgumentError("task automatic_speech_recognition takes a model directory (save_pretrained, "
                                   "with its tokenizer, preprocessor_config.json and generation_config.json), not a "
                                   "model in memory")
    path = os.fspath(model)
    report("read")
    config = read_config(path)
    frontend: LogMelParameters | RawAudioParameters
    if config["model_type"] == "whisper":
        frontend = read_frontend(path, config)
        if input_sec is not None and float(input_sec) != frontend.chunk_length:
            raise InvalidArgumentError(f"input_sec {input_sec}: Whisper's encoder takes {frontend.chunk_length} s "
                                       f"windows (its feature extractor's chunk_length)")
    else:
        frontend = read_raw_frontend(path, input_sec)
    from litert_torch.generative.export_options import check_recipe

    recipe = check_recipe(quantization_recipe)
    encoder_recipe = recipe if audio_encoder_quantization_recipe is None \
        else check_recipe(audio_encoder_quantization_recipe)

    import torch
    import transformers

    try:
        tok = transformers.AutoTokenizer.from_pretrained(path)
        model_class = transformers.WhisperForConditionalGeneration if config["model_type"] == "whisper" \
            else transformers.MoonshineForConditionalGeneration
        hf = model_class.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
        generation = transformers.GenerationConfig.from_pretrained(path) \
            if os.path.isfile(os.path.join(path, "generation_config.json")) else hf.generation_config
    except (OSError, ValueError, KeyError) as exc:
        raise ModelFileError(f"transformers could not load the model in {path}: {one_line(exc)}") from None
    if not getattr(tok, "is_fast", False) or not hasattr(tok, "backend_tokenizer"):
        raise ModelFileError(f"the tokenizer of {path} is not a fast (tokenizer.json) tokenizer")
    hf.eval()
    cfg = asr_config(hf, generation, frontend)
    report("convert")
    encoder, decoder = convert_asr(hf, cfg)
    folder = os.path.dirname(os.path.abspath(bundle_path))
    created = not os.path.isdir(folder)
    try:
        os.makedirs(folder, exist_ok=True)
        _write_files(bundle_path, (encoder, encoder_recipe), (decoder, recipe), tok.backend_tokenizer.to_str(),
                     cfg, keep_folder, report)
    except BaseException:
        if created and os.path.isdir(folder) and not os.listdir(folder):  # a failed export leaves nothing behind
            os.rmdir(folder)
        raise
    return bundle_path


def convert_asr(hf: Any, cfg: AsrConfig) -> tuple[Converter, Converter]:
    """The encoder (`encode`) and the decoder (`prefill_<N>`, `decode`) as Converters, ready to be lowered
    and written (`decoder_file.write_section`)."""
    import torch

    import litert_torch
    from litert_torch.generative import asr_modules

    frontend = cfg.frontend
    if isinstance(frontend, RawAudioParameters):
        inputs = {"input_values": torch.zeros(1, frontend.samples),
                  "attention_mask": torch.ones(1, frontend.samples, dtype=torch.int32)}
        cross_kv: torch.nn.Module = asr_modules.MoonshineCrossKV(hf).eval()
    else:
        inputs = {"input_features": torch.zeros(1, frontend.feature_size, frontend.frames)}
        cross_kv = asr_modules.WhisperCrossKV(hf).eval()
    encoder = litert_torch.signature(ENCODE_SIGNATURE, cross_kv, sample_kwargs=inputs)
    with torch.no_grad():
        cross = {k: v.detach().contiguous() for k, v in cross_kv(**inputs).items()}
    h, d, c = cfg.num_heads, cfg.head_dim, cfg.max_target_positions
    caches = {name: torch.zeros((1, h, c, d) if "_k_" in name else (1, h, d, c))
              for name in asr_modules.cache_names(cfg.num_layers)}
    decoder_class = asr_modules.MoonshineDecoder if cfg.model_type == "moonshine" else asr_modules.WhisperDecoder
    decoder = decoder_class(hf, c).eval()
    n = len(cfg.prompt)
    converter = litert_torch.signature(f"{PREFILL_PREFIX}{n}", decoder, sample_kwargs={
        "tokens": torch.zeros(1, n, dtype=torch.int32), "input_pos": torch.arange(n, dtype=torch.int32),
        **caches, **cross})
    converter = converter.signature(DECODE_SIGNATURE, decoder, sample_kwargs={
        "tokens": torch.zeros(1, 1, dtype=torch.int32), "input_pos": torch.zeros(1, dtype=torch.int32),
        **caches, **cross})
    return encoder, converter


def _write_files(bundle_path: str, encoder: tuple[Converter, Any], decoder: tuple[Converter, Any],
                 tokenizer_json: str, cfg: AsrConfig, keep_folder: str | None, report: Callable[[str], None]
                 ) -> None:
    """Lower and write the encoder and the decoder, each (Converter, checked recipe), then the bundle."""
    from litert_torch.generative.decoder_file import write_section
    from litert_torch.memory import FilePages

    with scratch_folder("litert_asr_") as scratch:
        files = {name: os.path.join(scratch, name)
                 for name in ("encoder.tflite", "decoder.tflite", "tokenizer.json", "asr_config.json")}
        release = FilePages().release  # the weights' pages mapped from safetensors, handed back once written
        for (converter, recipe), name in ((encoder, "encoder.tflite"), (decoder, "decoder.tflite")):
            write_section(converter, files[name], recipe, release)
        report("bundle")
        with open(files["tokenizer.json"], "w", encoding="utf-8") as f:
            f.write(tokenizer_json)
        with open(files["asr_config.json"], "w", encoding="utf-8") as f:
            f.write(cfg.to_json())
        with copies_kept_with(files, keep_folder):  # all the files or none
            write_asr_bundle(bundle_path, files)


def write_asr_bundle(path: str, files: dict[str, str]) -> None:
    """Assemble the .litertlm bundle at `path` atomically from its files (keys as in `_write_files`)."""
    from litert_torch.generative.bundle import _builder, build

    lb = _builder()[0]
    builder = lb.LitertLmFileBuilder()
    builder.add_system_metadata(lb.Metadata(key="Authors", value="litert_torch", dtype=lb.DType.STRING))
    builder.add_system_metadata(lb.Metadata(key="task", value="automatic_speech_recognition", dtype=lb.DType.STRING))
    builder.add_hf_tokenizer(files["tokenizer.json"])
    builder.add_tflite_model(files["encoder.tflite"], lb.TfLiteModelType.AUDIO_ENCODER_HW)
    builder.add_tflite_model(files["decoder.tflite"], lb.TfLiteModelType.PREFILL_DECODE)
    builder.add_generic_binary_data(files["asr_config.json"], additional_metadata=[
        lb.Metadata(key="name", value=CONFIG_SECTION, dtype=lb.DType.STRING)])
    build(builder, path)
