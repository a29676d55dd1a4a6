"""Checking a converted speech-to-text or image+text bundle against its Hugging Face model.

Each report is an `LlmValidationReport` for the decoder (greedy tokens ours against `generate`'s, the first step
where they differ, and teacher-forced on Hugging Face's continuation: the max |logit error| per step and whether
the top-1 token agrees) plus the encoder's output, max |error| relative to the tensor's max |value|:

- speech (`validate_asr`): every decoder layer's cross-attention keys and values from the bundle's `encode`
  signature against Hugging Face's (the layer's `k_proj` / `v_proj` of its encoder's output), and the first
  layer past the tolerance; both models get the runner's frontend output (asr_frontend.py, itself checked
  against Hugging Face's feature extractors in tests/generative/test_asr.py);
- image+text (`validate_vlm`): each image's features (vision encoder and adapter) against Hugging Face's
  `get_image_features` on its processor's pixel values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from litert_torch.generative.validate import (FLOAT_LAYER_RTOL, QUANTIZED_LAYER_RTOL, LlmValidationReport,
                                             hf_generate)
from litert_torch.quantization.report import QUANTIZATION_KEY

__all__ = ["AsrValidationReport", "EncoderError", "VlmValidationReport", "encoder_layer_errors", "validate_asr",
           "validate_vlm"]


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


_BLOCK = re.compile(r"(?:^|\.)layers\.\d+$")  # a transformer block of an encoder: `...layers.<i>`


def encoder_layer_errors(module: torch.nn.Module, section: bytes, inputs: dict[str, torch.Tensor]
                         ) -> list[EncoderError]:
    """Each transformer block of `module` (a submodule named `...layers.<i>`), its output in PyTorch against the
    tensor that holds it in the bundle `section` converted from `module` (LiteRT's reference kernels, every
    intermediate kept), both run on `inputs` (the signature's keyword inputs). The section's tensor is the
    output of the last op its source map places in the block; a block whose tensor has another shape, or a
    shape with two equal sizes (whose arrangement the shape would not tell), is left out. In block order."""
    from ai_edge_litert import schema_py_generated as schema

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.runtime.edge_model import EdgeModel
    from litert_torch.validation.validate import call_like_pytorch

    blocks = [name for name, _ in module.named_modules() if _BLOCK.search(name)]
    outputs: dict[str, torch.Tensor] = {}

    def keep(name: str):
        return lambda _module, _args, out: outputs.__setitem__(name, out[0] if isinstance(out, (tuple, list))
                                                                 else out)

    hooks = [module.get_submodule(name).register_forward_hook(keep(name)) for name in blocks]
    try:
        with torch.no_grad():
            module(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    last_op: dict[str, int] = {}
    for i, op in enumerate(read_model(section).subgraphs[0].ops):
        path = (op.source.module or "").split(" (")[0] if op.source is not None else ""
        for name in blocks:
            if path == name or path.startswith(name + "."):
                last_op[name] = i
    edge = EdgeModel(section).with_kernels("reference", keep_intermediates=True)
    call_like_pytorch(edge, (), inputs)
    fb = schema.Model.GetRootAs(section, 0).Subgraphs(0)
    errors = []
    for name in blocks:
        reference = outputs.get(name)
        if name not in last_op or not isinstance(reference, torch.Tensor):
            continue
        ours = edge.intermediate(fb.Operators(last_op[name]).Outputs(0))
        sizes = [d for d in reference.shape if d != 1]
        if ours.shape != tuple(reference.shape) or len(set(sizes)) < len(sizes):
            continue
        errors.append(_compare(name, ours, reference.float().numpy()))
    return errors


@dataclass
class AsrValidationReport(LlmValidationReport):
    """The decoder's tokens and logits (see `LlmValidationReport`; `prompt_ids` is the decoder's start) and each
    decoder layer's cross-attention keys and values (`cross_errors`, keys then values by layer)."""

    cross_errors: list[EncoderError] = field(default_factory=list)
    encoder_rtol: float = FLOAT_LAYER_RTOL
    quantized: bool = False
    # the encoder's blocks (`encoder_layer_errors`), when they were compared
    encoder_layers: list[EncoderError] = field(default_factory=list)

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
                   else f"; none beyond {self.encoder_rtol:g}") + _blocks_summary(self.encoder_layers, self.encoder_rtol))

    def to_json(self) -> dict[str, Any]:
        return {**_decoder_json(self), "quantized": self.quantized, "encoder_rtol": self.encoder_rtol,
                "cross_errors": [{"name": e.name, "max_abs_error": e.max_abs_error,
                                  "max_abs_reference": e.max_abs_reference, "relative": e.relative}
                                 for e in self.cross_errors],
                "first_divergent_cross_layer": self.first_divergent_cross_layer,
                "encoder_layers": _errors_json(self.encoder_layers),
                "first_divergent_encoder_layer": _first_beyond(self.encoder_layers, self.encoder_rtol)}


def _first_beyond(errors: list[EncoderError], rtol: float) -> str | None:
    """The name of the first of `errors` past `rtol`, or None."""
    return next((e.name for e in errors if e.relative > rtol), None)


def _blocks_summary(errors: list[EncoderError], rtol: float) -> str:
    if not errors:
        return ""
    first = _first_beyond(errors, rtol)
    return ("\nencoder blocks (relative error): " + ", ".join(f"{e.name} {e.relative:.2g}" for e in errors)
            + (f"; first beyond {rtol:g}: {first}" if first is not None else f"; none beyond {rtol:g}"))


def _errors_json(errors: list[EncoderError]) -> list[dict[str, Any]]:
    return [{"name": e.name, "max_abs_error": e.max_abs_error, "max_abs_reference": e.max_abs_reference,
             "relative": e.relative} for e in errors]


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
                 max_new_tokens: int | None = None, encoder_layers: bool | None = None) -> AsrValidationReport:
    """Compare the speech-to-text `runner` (an `AsrRunner`) with `hf_model` (the Whisper or Moonshine
    `...ForConditionalGeneration` it was converted from) on one utterance `audio` (1-D float samples at
    `sampling_rate`, by default the model's): the greedy tokens of `transcribe_ids` against `generate`'s (both
    capped at `max_new_tokens`, by default the generation config's limit), the teacher-forced logits on
    `generate`'s continuation, and each decoder layer's cross-attention keys and values. `encoder_layers`: also
    compare each block inside the encoder section (`encoder_layer_errors`); by default only when some
    cross-attention keys or values depart."""
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
    if encoder_layers or (encoder_layers is None and report.first_divergent_cross_layer is not None):
        from litert_torch.generative import asr_modules

        module = (asr_modules.MoonshineCrossKV(hf_model) if cfg.model_type == "moonshine"
                  else asr_modules.WhisperCrossKV(hf_model)).eval()
        report.encoder_layers = encoder_layer_errors(
            module, runner.bundle.encoder, {k: torch.from_numpy(np.asarray(v)) for k, v in features.items()})
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


@dataclass
class VlmValidationReport(LlmValidationReport):
    """The decoder's tokens and logits on the prompt with its images (see `LlmValidationReport`; `prompt_ids`
    the prompt's tokens, each image's placeholder expanded as the processor expands it) and each image's
    features, the vision encoder and adapter output, against Hugging Face's `get_image_features`
    (`image_errors`, one per image)."""

    image_errors: list[EncoderError] = field(default_factory=list)
    encoder_rtol: float = FLOAT_LAYER_RTOL
    quantized: bool = False
    # the vision encoder's blocks on the first departing image (`encoder_layer_errors`), when they were compared
    encoder_layers: list[EncoderError] = field(default_factory=list)

    @property
    def first_divergent_image(self) -> int | None:
        """The first image whose features depart from Hugging Face's by more than `encoder_rtol`, or None."""
        return next((i for i, e in enumerate(self.image_errors) if e.relative > self.encoder_rtol), None)

    def summary(self) -> str:
        errors = ", ".join(f"image {i}: max |error| {e.max_abs_error:.3g} (relative {e.relative:.2g})"
                           for i, e in enumerate(self.image_errors)) or "no image"
        first = self.first_divergent_image
        return (super().summary() + "\nimage features (vision encoder and adapter): " + errors
                + (f"; first beyond {self.encoder_rtol:g}: image {first}" if first is not None
                   else f"; none beyond {self.encoder_rtol:g}") + _blocks_summary(self.encoder_layers, self.encoder_rtol))

    def to_json(self) -> dict[str, Any]:
        return {**_decoder_json(self), "quantized": self.quantized, "encoder_rtol": self.encoder_rtol,
                "image_errors": [{"name": e.name, "max_abs_error": e.max_abs_error,
                                  "max_abs_reference": e.max_abs_reference, "relative": e.relative}
                                 for e in self.image_errors],
                "first_divergent_image": self.first_divergent_image,
                "encoder_layers": _errors_json(self.encoder_layers),
                "first_divergent_encoder_layer": _first_beyond(self.encoder_layers, self.encoder_rtol)}


def validate_vlm(runner: Any, hf_model: torch.nn.Module, processor: Any, prompt: str, images: Sequence[Any],
                 max_new_tokens: int = 16, encoder_layers: bool | None = None) -> VlmValidationReport:
    """Compare the image+text `runner` (a `VlmRunner`) with `hf_model` (the `...ForConditionalGeneration` it was
    converted from) and its `processor` on `prompt`, whose image placeholders mark where each of `images` (uint8
    H x W x 3 arrays or PIL images) goes: the greedy tokens of both (`max_new_tokens`, not stopping at the end
    token), the teacher-forced logits on Hugging Face's continuation, and each image's features.
    `encoder_layers`: also compare each block inside the vision encoder section on the first departing image
    (`encoder_layer_errors`); by default only when some image's features depart."""
    from litert_torch.errors import InvalidArgumentError

    hf_model = hf_model.eval()
    images = list(images)
    ids = runner.prompt_ids(prompt, len(images))
    inputs = _processor_inputs(processor, prompt, images, ids, runner.layout.start_token_id)
    if inputs["input_ids"][0].tolist() != ids:
        raise InvalidArgumentError("the processor's tokens for the prompt differ from the bundle's: the bundle was "
                                   "not converted from this model's tokenizer")
    if len(ids) + max_new_tokens - 1 > runner.cache_length:
        raise InvalidArgumentError(f"the prompt ({len(ids)} tokens, images expanded) and {max_new_tokens} new "
                                   f"tokens do not fit the model's cache of {runner.cache_length}")
    quantized = _quantized(runner.bundle.decoder, runner.bundle.vision_encoder,
                           runner.bundle.vision_adapter)
    with torch.no_grad():
        # generate's raw logits at each step (before any logits processor): Hugging Face's logits on its own
        # continuation, with the images seen only in the prompt (a generated image token is text, as in ours)
        out = hf_generate(hf_model)(**inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None,
                                    output_logits=True, return_dict_in_generate=True)
        reference = out.sequences[0, len(ids):].tolist()
        full = torch.cat([step[:1] for step in out.logits]).float().numpy()
    ours = list(runner.generate_ids(ids, max_new_tokens, images=images, stop=False))
    report = VlmValidationReport(ids, reference, ours, quantized=quantized,
                                 encoder_rtol=QUANTIZED_LAYER_RTOL if quantized else FLOAT_LAYER_RTOL)
    runner.reset()
    _teacher_forced(report, full, runner.prefill(ids, images), lambda token, i: runner.decode(token))
    report.image_errors = [_compare(f"image_{i}", runner.encode_image(image),
                                    _hf_image_features(hf_model, processor, image, runner.spec.tokens_per_image))
                           for i, image in enumerate(images)]
    first = report.first_divergent_image
    if images and (encoder_layers or (encoder_layers is None and first is not None)):
        from litert_torch.generative.vlm import FAMILIES, vision_tower

        pixels = torch.from_numpy(np.ascontiguousarray(runner.preprocess(images[first or 0]), np.float32))
        report.encoder_layers = encoder_layer_errors(vision_tower(hf_model, FAMILIES[runner.spec.family],
                                                                  runner.spec),
                                                     runner.bundle.vision_encoder, {"images": pixels})
    return report


def _processor_inputs(processor: Any, prompt: str, images: list, ids: list[int], start: int | None) -> dict:
    """The processor's inputs for `prompt` and `images`; where it tokenizes without the start token that the
    runner, as LiteRT-LM, puts first (LFM2-VL's processor: its chat template writes the token), those of the
    prompt after the start token's text."""
    inputs = dict(processor(text=prompt, images=images or None, return_tensors="pt"))
    if start is not None and inputs["input_ids"][0].tolist() == ids[1:] and ids[:1] == [start]:
        text = processor.tokenizer.convert_ids_to_tokens(start) + prompt
        inputs = dict(processor(text=text, images=images or None, return_tensors="pt"))
    return inputs


def _hf_image_features(hf_model: Any, processor: Any, image: Any, tokens: int) -> np.ndarray:
    """Hugging Face's features of one image (`get_image_features` on the processor's pixel values): the rows
    that take the place of its image tokens, float32 [tokens, H]."""
    import inspect

    pixels = dict(processor.image_processor(images=[image], return_tensors="pt"))
    model = hf_model.model if hasattr(hf_model.model, "get_image_features") else hf_model
    accepted = inspect.signature(model.get_image_features).parameters
    kwargs = {k: v for k, v in pixels.items() if k != "pixel_values" and k in accepted}
    with torch.no_grad():
        out = model.get_image_features(pixels["pixel_values"], **kwargs)
    if getattr(out, "pooler_output", None) is not None:
        out = out.pooler_output
    if isinstance(out, (tuple, list)):
        out = out[0]
    rows = out.float().numpy()
    return rows.reshape(-1, rows.shape[-1])[:tokens]
