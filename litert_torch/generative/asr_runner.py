"""Running a speech-to-text bundle (Whisper, Moonshine) in LiteRT from Python: frontend, encoder once, greedy
decoding.

    from litert_torch import generative
    asr = generative.load("out/model.litertlm")
    text = asr.transcribe(audio, sampling_rate=16000)          # a 1-D float array of mono samples
    ids = asr.transcribe_ids(audio, sampling_rate=16000)       # the generated token ids

An utterance is turned into the encoder's input (asr_frontend.py, from the model's preprocessor parameters:
Whisper's log-mel features, Moonshine's raw samples padded to the encoder's window with their mask), the
`encode` signature runs once and gives every decoder layer's cross-attention keys and values, which stay bound to
the decoder's inputs for the whole utterance; the prompt (the start-of-transcript tokens the generation config
forces) goes through `prefill_<N>`, then `decode` runs once per token with the self-attention caches kept in LiteRT
buffers that are both input and output of every call. The logits are processed as Hugging Face's `generate`
processes them for the generation config the bundle carries (the suppressed tokens at every step, the
begin-suppressed tokens at the first), greedily, until the end-of-text token or the length limit `generate` uses
(Whisper's own rule for Whisper, max_length counting the prompt otherwise).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from litert_torch.errors import InvalidArgumentError, ModelFileError, ModelLoadError, one_line
from litert_torch.generative.asr_frontend import (
    AudioTooLongError, LogMelParameters, RawAudioParameters, frontend_from_json, log_mel, raw_window,
)

ENCODE_SIGNATURE = "encode"
DECODE_SIGNATURE = "decode"
PREFILL_PREFIX = "prefill_"
CONFIG_SECTION = "litert_torch_asr"  # the metadata item naming the bundle's ASR configuration section
ENCODER_SECTION_TYPE = "tf_lite_audio_encoder_hw"
DECODER_SECTION_TYPE = "tf_lite_prefill_decode"

__all__ = ["AsrConfig", "AsrRunner", "AudioTooLongError", "is_asr_bundle", "load_asr", "read_asr_bundle"]


@dataclass
class AsrConfig:
    """What the runner needs besides the models, stored as JSON in the bundle."""

    model_type: str  # "whisper" or "moonshine"
    frontend: LogMelParameters | RawAudioParameters
    prompt: list[int]  # the tokens the decoder starts from; -1 at index 1: the language, detected from the audio
    language_token_ids: list[int]  # the languages detection chooses from (empty: no detection)
    eos_token_ids: list[int]
    suppress_tokens: list[int]
    begin_suppress_tokens: list[int]
    max_length: int | None  # generation_config.max_length: new tokens + the prompt's (see `max_new_tokens`)
    max_target_positions: int  # the decoder's positions: the cache length
    num_layers: int
    num_heads: int
    head_dim: int
    encoder_length: int  # the encoder's output positions
    vocab_size: int  # the logits' width

    def to_json(self) -> str:
        data = dict(self.__dict__)
        data["frontend"] = self.frontend.to_json()
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "AsrConfig":
        try:
            data = json.loads(text)
            data["frontend"] = frontend_from_json(data["frontend"])
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelFileError(f"the bundle's ASR configuration is damaged: {one_line(exc)}") from None

    def max_new_tokens(self, requested: int | None = None) -> int:
        """How many tokens `generate` produces at most. Whisper: `requested` (max_new_tokens) or else the
        generation config's max_length plus the prompt (Whisper's generate extends max_length by the initial
        tokens, at most max_target_positions // 2 - 1 of them), never past the decoder's positions. Otherwise
        `requested`, or max_length minus the prompt; more than the cache holds is a CacheFullError."""
        room = self.max_target_positions - len(self.prompt)
        if self.model_type != "whisper":
            wanted = int(requested) if requested is not None else \
                (room if self.max_length is None else self.max_length - len(self.prompt))
            if wanted > room:
                from litert_torch.generative.runner import CacheFullError

                raise CacheFullError(f"{wanted} new tokens after a prompt of {len(self.prompt)} do not fit the "
                                      f"decoder's cache of {self.max_target_positions} positions "
                                      f"(max_position_embeddings)")
            return max(0, wanted)
        if requested is not None:
            return min(int(requested), room)
        if self.max_length is None:
            return room
        initial = min(self.max_target_positions // 2 - 1, len(self.prompt))
        total = min(self.max_length + initial, self.max_target_positions)
        return max(0, total - len(self.prompt))


@dataclass
class AsrBundle:
    """What a speech-to-text .litertlm bundle holds, read back."""

    encoder: bytes
    decoder: bytes
    tokenizer: str  # the tokenizer.json text
    config: AsrConfig


def _sections(path: str) -> list[tuple[int, dict[str, Any]]]:
    """Each section's data type and string items, read from the bundle's header; [] when the file is not a
    bundle this reader knows (load() then says why)."""
    from litert_torch.generative.bundle import header_sections

    return [(section.DataType(), items) for section, items in header_sections(path)]


def is_asr_bundle(path: str) -> bool:
    """Whether the .litertlm file at `path` carries our ASR configuration section (read from its header only)."""
    return any(items.get("name") == CONFIG_SECTION for _, items in _sections(os.fspath(path)))


def read_asr_bundle(path: str) -> AsrBundle:
    """Every section of a speech-to-text bundle; ModelFileError when one is missing or damaged."""
    from litert_torch.generative.bundle import BundleFileError, _builder, tokenizer_text, unpacked

    _builder()
    where = os.fspath(path)
    with unpacked(path) as scratch:
        found: dict[str, Any] = {}
        for name in sorted(os.listdir(scratch)):
            with open(os.path.join(scratch, name), "rb") as f:
                raw = f.read()
            if name.endswith(f"{ENCODER_SECTION_TYPE}.tflite"):
                found["encoder"] = raw
            elif name.endswith(f"{DECODER_SECTION_TYPE}.tflite"):
                found["decoder"] = raw
            elif "HF_Tokenizer" in name:
                found["tokenizer"] = tokenizer_text(raw, name, where)
            elif "GenericBinaryData" in name:
                try:
                    found["config"] = AsrConfig.from_json(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    continue
    names = {"config": "ASR configuration", "tokenizer": "tokenizer", "encoder": "audio encoder model",
             "decoder": "decoder model"}
    missing = [names[k] for k in names if k not in found]
    if missing:
        raise BundleFileError(f"{where} is not a speech-to-text bundle: it has no {', '.join(missing)}")
    return AsrBundle(found["encoder"], found["decoder"], found["tokenizer"], found["config"])


class AsrRunner:
    """A converted speech-to-text model: `transcribe(audio, sampling_rate=16000)` -> str."""

    def __init__(self, bundle: AsrBundle, *, num_threads: int | None = None):
        from tokenizers import Tokenizer

        from litert_torch.generative.asr_modules import cache_names, cross_names
        from litert_torch.generative.runner import _compiled_model

        self.bundle = bundle
        self.config = cfg = bundle.config
        if cfg.model_type not in ("whisper", "moonshine"):
            raise ModelFileError(f"the bundle's model type {cfg.model_type!r} is not one this runner runs "
                                 f"(whisper, moonshine)")
        try:
            self.tokenizer = Tokenizer.from_str(bundle.tokenizer)
        except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception type
            raise ModelFileError(f"the bundle's tokenizer.json cannot be read: {one_line(exc)}") from None
        self._cache_names = cache_names(cfg.num_layers)
        self._cross_names = cross_names(cfg.num_layers) + (["cross_mask"] if cfg.model_type == "moonshine" else [])
        self._encoder_inputs = ["input_values", "attention_mask"] if cfg.model_type == "moonshine" \
            else ["input_features"]
        self._prefill = f"{PREFILL_PREFIX}{len(cfg.prompt)}"
        try:
            self._encoder = _compiled_model(bundle.encoder, num_threads)
            self._decoder = _compiled_model(bundle.decoder, num_threads)
            self._encoder_out = {n: self._encoder.create_output_buffer_by_name(ENCODE_SIGNATURE, n)
                                 for n in self._cross_names}
            self._features = {n: self._encoder.create_input_buffer_by_name(ENCODE_SIGNATURE, n)
                              for n in self._encoder_inputs}
            self._state = {n: self._decoder.create_input_buffer_by_name(DECODE_SIGNATURE, n)
                           for n in self._cache_names + self._cross_names}
            self._io = {key: ({n: self._decoder.create_input_buffer_by_name(key, n) for n in ("tokens", "input_pos")},
                              {"logits": self._decoder.create_output_buffer_by_name(key, "logits")})
                        for key in (self._prefill, DECODE_SIGNATURE)}
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not load the bundle's models: {one_line(exc)}") from None
        d, c, s = cfg.head_dim, cfg.max_target_positions, cfg.encoder_length
        self._shapes = {}
        for i in range(cfg.num_layers):
            self._shapes.update({f"kv_cache_k_{i}": (1, cfg.num_heads, c, d), f"kv_cache_v_{i}": (1, cfg.num_heads, d, c),
                                 f"cross_k_{i}": (1, cfg.num_heads, s, d), f"cross_v_{i}": (1, cfg.num_heads, d, s)})
        self._shapes["cross_mask"] = (1, 1, 1, s)

    @property
    def sampling_rate(self) -> int:
        return self.config.frontend.sampling_rate

    def features(self, audio: Any, sampling_rate: int | None = None) -> dict[str, np.ndarray]:
        """The encoder's inputs for one utterance (see asr_frontend.py): Whisper's log-mel `input_features`
        [1, n_mels, frames], or Moonshine's `input_values` [1, samples] and `attention_mask` [1, samples]."""
        rate = self.sampling_rate if sampling_rate is None else int(sampling_rate)
        if rate != self.sampling_rate:
            raise InvalidArgumentError(f"the audio is sampled at {rate} Hz; the model takes {self.sampling_rate} "
                                       f"Hz (resample it first)")
        frontend = self.config.frontend
        if isinstance(frontend, RawAudioParameters):
            values, mask = raw_window(audio, frontend)
            return {"input_values": values, "attention_mask": mask}
        return {"input_features": log_mel(audio, frontend)}

    def encode(self, features: dict[str, np.ndarray]) -> None:
        """Run the encoder on its inputs `features` and bind the cross-attention keys and values to the decoder."""
        try:
            for name, buffer in self._features.items():
                buffer.write(np.ascontiguousarray(features[name]))
            self._encoder.run_by_name(ENCODE_SIGNATURE, self._features, self._encoder_out)
            for name in self._cross_names:
                size = int(np.prod(self._shapes[name]))
                self._state[name].write(self._encoder_out[name].read(size, np.float32).reshape(self._shapes[name]))
            for name in self._cache_names:
                self._state[name].write(np.zeros(self._shapes[name], np.float32))
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run the encoder: {one_line(exc)}") from None

    def _step(self, key: str, tokens: Sequence[int], start: int) -> np.ndarray:
        inputs, outputs = self._io[key]
        try:
            inputs["tokens"].write(np.asarray([tokens], np.int32))
            inputs["input_pos"].write(np.arange(start, start + len(tokens), dtype=np.int32))
            caches = {n: self._state[n] for n in self._cache_names}
            self._decoder.run_by_name(key, {**inputs, **self._state}, {**outputs, **caches})
            return outputs["logits"].read(self.config.vocab_size, np.float32)
        except (RuntimeError, ValueError) as exc:
            raise ModelLoadError(f"LiteRT could not run signature {key!r}: {one_line(exc)}") from None

    def cross_attention(self) -> dict[str, np.ndarray]:
        """The encoder's outputs of the last `encode`: each decoder layer's cross-attention keys `cross_k_i`
        [1, H, S, D] and transposed values `cross_v_i` [1, H, D, S] (and Moonshine's `cross_mask` [1, 1, 1, S])."""
        return {n: self._encoder_out[n].read(int(np.prod(self._shapes[n])), np.float32).reshape(self._shapes[n])
                for n in self._cross_names}

    def prompt_ids(self) -> list[int]:
        """The tokens the decoder starts from for the utterance of the last `encode` (the detected language in
        place of Whisper's language slot when the generation config does not force one)."""
        prompt = list(self.config.prompt)
        if self.config.language_token_ids:
            prompt[1] = self._detect_language()
        return prompt

    def prefill(self, prompt: Sequence[int]) -> np.ndarray:
        """Run `prompt` (as long as the bundle's, see `prompt_ids`) after `encode`: the raw logits [V] of its last
        token, the self-attention caches filled from position 0."""
        if len(prompt) != len(self.config.prompt):
            raise InvalidArgumentError(f"the prompt has {len(prompt)} tokens; the bundle's prefill takes "
                                       f"{len(self.config.prompt)}")
        return self._step(self._prefill, [int(t) for t in prompt], 0)

    def decode(self, token: int, position: int) -> np.ndarray:
        """Run one token at `position` (the prompt's length for the first generated token): its raw logits [V]."""
        if not 0 <= int(position) < self.config.max_target_positions:
            from litert_torch.generative.runner import CacheFullError

            raise CacheFullError(f"position {position} is outside the decoder's cache of "
                                 f"{self.config.max_target_positions} positions")
        return self._step(DECODE_SIGNATURE, [int(token)], int(position))

    def transcribe_ids(self, audio: Any, sampling_rate: int | None = None, *,
                       max_new_tokens: int | None = None) -> list[int]:
        """The greedy token ids for one utterance, as Hugging Face's `generate` gives them for the bundle's
        generation config: the generated tokens after the prompt, up to the end-of-text token, which is left out
        (Whisper's `generate` returns exactly these; the plain `generate` Moonshine uses returns the prompt
        before them and the end-of-text token after). `max_new_tokens` caps the tokens generated, the
        end-of-text token counted (default: the generation config's limit)."""
        if max_new_tokens is not None and int(max_new_tokens) < 0:
            raise InvalidArgumentError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        self.encode(self.features(audio, sampling_rate))
        cfg = self.config
        limit = cfg.max_new_tokens(max_new_tokens)
        if limit <= 0:
            return []
        prompt = list(cfg.prompt)
        if cfg.language_token_ids:
            prompt[1] = self._detect_language()
        logits = self._step(self._prefill, prompt, 0)
        out: list[int] = []
        position = len(cfg.prompt)
        stops = set(cfg.eos_token_ids)
        while True:
            scores = np.array(logits, np.float32)
            if cfg.suppress_tokens:
                scores[cfg.suppress_tokens] = -np.inf
            if not out and cfg.begin_suppress_tokens:
                scores[cfg.begin_suppress_tokens] = -np.inf
            token = int(np.argmax(scores))
            if token in stops:  # generate's output for an utterance leaves the end-of-text token out
                return out
            out.append(token)
            if len(out) >= limit:
                return out
            logits = self._step(DECODE_SIGNATURE, [token], position)
            position += 1

    def _detect_language(self) -> int:
        """The language token Whisper's `detect_language` picks: the most likely of the language tokens after
        the start-of-transcript token alone."""
        logits = self._step(DECODE_SIGNATURE, self.config.prompt[:1], 0)
        languages = self.config.language_token_ids
        return int(languages[int(np.argmax(logits[languages]))])

    def detect_language(self, audio: Any, sampling_rate: int | None = None) -> str:
        """The language token (e.g. "<|en|>") the model detects in `audio`; ModelFileError for a bundle whose
        generation config forces the language."""
        if not self.config.language_token_ids:
            raise ModelFileError("this bundle's generation config forces the language: it detects none")
        self.encode(self.features(audio, sampling_rate))
        return self.tokenizer.id_to_token(self._detect_language()) or ""

    def transcribe(self, audio: Any, sampling_rate: int | None = None, *, max_new_tokens: int | None = None) -> str:
        """The transcript of one utterance: `transcribe_ids` decoded without the special tokens."""
        return self.decode_text(self.transcribe_ids(audio, sampling_rate, max_new_tokens=max_new_tokens))

    def decode_text(self, ids: Sequence[int]) -> str:
        """Token ids to text, the special tokens left out."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)


def load_asr(path: str, *, num_threads: int | None = None) -> AsrRunner:
    """A runner for the speech-to-text bundle at `path`."""
    return AsrRunner(read_asr_bundle(path), num_threads=num_threads)
