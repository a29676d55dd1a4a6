"""Checking a converted speech-to-text bundle against its Hugging Face model.

The report is an `LlmValidationReport` for the decoder (greedy tokens ours against `generate`'s, the first step
where they differ, and teacher-forced on Hugging Face's continuation: the max |logit error| per step and whether
the top-1 token agrees) plus the encoder's output: every decoder layer's cross-attention keys and values from the
bundle's `encode` signature against Hugging Face's (the layer's `k_proj` / `v_proj` of its encoder's output), max
|error| relative to the tensor's max |value|, and the first layer past the tolerance.

Both models get the same encoder inputs: the runner's own frontend output (asr_frontend.py, itself checked
against Hugging Face's feature extractors in tests/generative/test_asr.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from litert_torch.generative.validate import FLOAT_LAYER_RTOL, QUANTIZED_LAYER_RTOL, LlmValidationReport
from litert_torch.quantization.report import QUANTIZATION_KEY

__all__ = ["AsrValidationReport", "EncoderError", "validate_asr"]


@dataclass
class EncoderError:
    """One encoder output tensor against Hugging Face's."""

    name: str
    max_abs_error: float
    max_abs_reference: float

    @property
    def relative(self) -> float:
        return self.max_abs_error / max(self.max_abs_reference, 1e-12)


def _compare(name: str, ours: np.ndarray, reference: np.ndarray) -> EncoderError:
    ours = np.asarray(ours, np.float64)
    reference = np.asarray(reference, np.float64)
    if ours.shape != reference.shape:
        from litert_torch.errors import ModelFileError

        raise ModelFileError(f"the bundle's {name} has shape {list(ours.shape)}; Hugging Face's has "
                             f"{list(reference.shape)}: the bundle was not converted from this model")
    return EncoderError(name, float(np.abs(ours - reference).max(initial=0.0)),
                        float(np.abs(reference).max(initial=0.0)))


@dataclass
class AsrValidationReport(LlmValidationReport):
    """The decoder's tokens and logits (see `LlmValidationReport`; `prompt_ids` is the decoder's start) and each
    decoder layer's cross-attention keys and values (`cross_errors`, keys then values by layer)."""

    cross_errors: list[EncoderError] = field(default_factory=list)
    encoder_rtol: float = FLOAT_LAYER_RTOL
    quantized: bool = False

    @property
    def first_divergent_cross_layer(self) -> int | None:
        """The first decoder layer whose cross-attention keys or values depart from Hugging Face's by more than
        `encoder_rtol`, or None."""
        for e in self.cross_errors:
            if e.relative > self.encoder_rtol:
                return int(e.name.rsplit("_", 1)[1])
        return None

    def summary(self) -> str:
        errors = ", ".join(f"{e.name} {e.relative:.2g}" for e in self.cross_errors)
        first = self.first_divergent_cross_layer
        return (super().summary() + "\ncross-attention keys and values (relative error): " + errors
                + (f"; first beyond {self.encoder_rtol:g}: decoder layer {first}" if first is not None
                   else f"; none beyond {self.encoder_rtol:g}"))

    def to_json(self) -> dict[str, Any]:
        return {**_decoder_json(self), "quantized": self.quantized, "encoder_rtol": self.encoder_rtol,
                "cross_errors": [{"name": e.name, "max_abs_error": e.max_abs_error,
                                  "max_abs_reference": e.max_abs_reference, "relative": e.relative}
                                 for e in self.cross_errors],
                "first_divergent_cross_layer": self.first_divergent_cross_layer}


def _decoder_json(report: LlmValidationReport) -> dict[str, Any]:
    return {"prompt_ids": report.prompt_ids, "reference_tokens": report.reference_tokens, "tokens": report.tokens,
            "identical": report.identical, "first_divergence": report.first_divergence,
            "token_agreement": report.token_agreement, "step_max_abs_error": report.step_max_abs_error,
            "step_max_abs_reference": report.step_max_abs_reference, "step_top1_agrees": report.step_top1_agrees,
            "max_relative_error": report.max_relative_error}


def _teacher_forced(report: LlmValidationReport, reference_logits: np.ndarray, first: np.ndarray, step) -> None:
    """Fill the per-step figures: `first` our logits after the prompt, `step(token, i)` our logits after feeding
    Hugging Face's token `i`; `reference_logits[i]` Hugging Face's logits for generated token `i`."""
    logits = first
    for i, token in enumerate(report.reference_tokens):
        ref = reference_logits[i]
        report.step_max_abs_error.append(float(np.abs(logits - ref).max()))
        report.step_max_abs_reference.append(float(np.abs(ref).max()))
        report.step_top1_agrees.append(int(np.argmax(logits)) == int(np.argmax(ref)))
        if i + 1 < len(report.reference_tokens):
            logits = step(token, i)


def validate_asr(runner: Any, hf_model: torch.nn.Module, audio: Any, sampling_rate: int | None = None,
                 max_new_tokens: int | None = None) -> AsrValidationReport:
    """Compare the speech-to-text `runner` (an `AsrRunner`) with `hf_model` (the Whisper or Moonshine
    `...ForConditionalGeneration` it was converted from) on one utterance `audio` (1-D float samples at
    `sampling_rate`, by default the model's): the greedy tokens of `transcribe_ids` against `generate`'s (both
    capped at `max_new_tokens`, by default the generation config's limit), the teacher-forced logits on
    `generate`'s continuation, and each decoder layer's cross-attention keys and values."""
    hf_model = hf_model.eval()
    cfg = runner.config
    features = runner.features(audio, sampling_rate)
    inputs = {k: torch.from_numpy(np.asarray(v)) for k, v in features.items()}
    if cfg.model_type == "moonshine":
        inputs["attention_mask"] = inputs["attention_mask"].to(torch.int64)
    ours = runner.transcribe_ids(audio, sampling_rate, max_new_tokens=max_new_tokens)
    runner.encode(features)
    prompt = runner.prompt_ids()
    quantized = _quantized(runner.bundle.encoder, runner.bundle.decoder)
    report = AsrValidationReport(prompt, _asr_generate(hf_model, cfg, inputs, prompt, max_new_tokens), ours,
                                 encoder_rtol=QUANTIZED_LAYER_RTOL if quantized else FLOAT_LAYER_RTOL,
                                 quantized=quantized)
    with torch.no_grad():
        ids = torch.tensor([prompt + report.reference_tokens])
        full = hf_model(**inputs, decoder_input_ids=ids).logits[0].float().numpy()
        report.cross_errors = _cross_errors(runner, hf_model, inputs)
    _teacher_forced(report, full[len(prompt) - 1:], runner.prefill(prompt),
                    lambda token, i: runner.decode(token, len(prompt) + i))
    return report


def _quantized(*models: bytes) -> bool:
    """Whether any of the .tflite `models` carries the quantization report its quantizer writes."""
    from litert_torch.flatbuffer.reader import read_metadata

    return any(QUANTIZATION_KEY in read_metadata(m) for m in models)


def _asr_generate(hf_model: Any, cfg: Any, inputs: dict[str, torch.Tensor], prompt: list[int],
                  max_new_tokens: int | None) -> list[int]:
    """Hugging Face's greedy tokens after the prompt, without the end-of-text token (what `transcribe_ids`
    returns)."""
    options: dict[str, Any] = {"do_sample": False}
    if max_new_tokens is not None:
        options["max_new_tokens"] = int(max_new_tokens)
    with torch.no_grad():
        if cfg.model_type == "moonshine":
            out = hf_model.generate(inputs["input_values"], attention_mask=inputs["attention_mask"],
                                    **options)[0].tolist()
        else:
            out = hf_model.generate(inputs["input_features"], **options)[0].tolist()
    if out[:len(prompt)] == prompt:  # plain generate returns the decoder's start; Whisper's leaves it out
        out = out[len(prompt):]
    elif cfg.model_type == "moonshine" and out[:1] == prompt[:1]:
        out = out[1:]
    if out and out[-1] in cfg.eos_token_ids:
        out = out[:-1]
    return [int(t) for t in out]


def _cross_errors(runner: Any, hf_model: Any, inputs: dict[str, torch.Tensor]) -> list[EncoderError]:
    """Each decoder layer's cross-attention keys and values, ours (from the last `encode`) against the layer's
    `k_proj` / `v_proj` of Hugging Face's encoder output, keys and values interleaved by layer."""
    ours = runner.cross_attention()
    encoder = hf_model.model.encoder
    if runner.config.model_type == "moonshine":
        states = encoder(inputs["input_values"], attention_mask=inputs["attention_mask"]).last_hidden_state
    else:
        states = encoder(input_features=inputs["input_features"]).last_hidden_state
    length, head_dim = states.shape[1], runner.config.head_dim
    errors = []
    for i, layer in enumerate(hf_model.model.decoder.layers):
        k = layer.encoder_attn.k_proj(states).view(1, length, -1, head_dim).transpose(1, 2)  # [1, H, S, D]
        v = layer.encoder_attn.v_proj(states).view(1, length, -1, head_dim).transpose(1, 2)
        errors.append(_compare(f"cross_k_{i}", ours[f"cross_k_{i}"], k.float().numpy()))
        errors.append(_compare(f"cross_v_{i}", np.swapaxes(ours[f"cross_v_{i}"], 2, 3), v.float().numpy()))
    return errors
