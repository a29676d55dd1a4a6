"""Checking a converted LLM against its Hugging Face model: greedy tokens and per-step logits.

Two comparisons on the same prompt:
- free-running: both generate `max_new_tokens` greedily; the report gives both sequences and the first step
  where they differ (none, for a float model: the converted model decodes exactly like Hugging Face);
- teacher-forced: the converted model is fed Hugging Face's tokens, so that every step compares logits for the
  same context: the max |error| per step, relative to the step's max |logit|, and whether the top-1 token agrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from litert_torch.generative.runner import LlmRunner
from litert_torch import logs
from litert_torch.errors import InvalidArgumentError
from litert_torch.quantization.report import QUANTIZATION_KEY


@dataclass
class LlmValidationReport:
    prompt_ids: list[int]
    reference_tokens: list[int]
    tokens: list[int]
    step_max_abs_error: list[float] = field(default_factory=list)
    step_max_abs_reference: list[float] = field(default_factory=list)
    step_top1_agrees: list[bool] = field(default_factory=list)
    # layer by layer at one step (the first whose token differs, else the one with the largest logit error):
    # each decoder layer's output against Hugging Face's, max |error| relative to the layer's max |value|
    layer_step: int | None = None
    layer_errors: list[float | None] = field(default_factory=list)
    layer_rtol: float = 1e-4

    @property
    def first_divergent_layer(self) -> int | None:
        """The first decoder layer whose output departs from Hugging Face's by more than `layer_rtol`."""
        return next((i for i, e in enumerate(self.layer_errors) if e is not None and e > self.layer_rtol), None)

    @property
    def first_divergence(self) -> int | None:
        """The first generated step (0-based) whose token differs from Hugging Face's, or None."""
        for i, (a, b) in enumerate(zip(self.tokens, self.reference_tokens)):
            if a != b:
                return i
        return None if len(self.tokens) == len(self.reference_tokens) else min(len(self.tokens),
                                                                                len(self.reference_tokens))

    @property
    def token_agreement(self) -> float:
        """The share of teacher-forced steps whose top-1 token is Hugging Face's."""
        return float(np.mean(self.step_top1_agrees)) if self.step_top1_agrees else 1.0

    @property
    def identical(self) -> bool:
        return self.first_divergence is None

    @property
    def max_relative_error(self) -> float:
        return max((e / max(r, 1e-12) for e, r in zip(self.step_max_abs_error, self.step_max_abs_reference)),
                   default=0.0)

    def summary(self) -> str:
        lines = [f"greedy tokens: {len(self.tokens)} generated, "
                 + ("identical to Hugging Face" if self.identical
                    else f"first differ at step {self.first_divergence}"),
                 f"teacher-forced top-1 agreement: {self.token_agreement:.1%} of {len(self.step_top1_agrees)} steps",
                 f"logits: max |error| {max(self.step_max_abs_error, default=0):.3g} "
                 f"(at most {self.max_relative_error:.3g} of a step's max |logit|)"]
        if self.layer_errors:
            errors = ", ".join("-" if e is None else f"{e:.2g}" for e in self.layer_errors)
            first = self.first_divergent_layer
            lines.append(f"layers at step {self.layer_step} (relative error of each decoder layer's output): {errors}"
                         + (f"; first beyond {self.layer_rtol:g}: layer {first}" if first is not None
                            else f"; none beyond {self.layer_rtol:g}"))
        return "\n".join(lines)


def validate_llm(runner: LlmRunner, hf_model: torch.nn.Module, prompt_ids: Sequence[int], max_new_tokens: int = 32,
                 *, layers: bool | None = None) -> LlmValidationReport:
    """Compare `runner` with `hf_model` (the model it was converted from) on `prompt_ids`. With `layers` (by
    default for a quantized model, or when the tokens differ), also compare each decoder layer's output with
    Hugging Face's at the first step whose token differs (or the step with the largest logit error), so that
    the report names the layer where the two depart (`first_divergent_layer`)."""
    prompt = [int(t) for t in prompt_ids]
    hf_model = hf_model.eval()
    generate = hf_generate(hf_model)
    with torch.no_grad():
        generated = generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
                                      eos_token_id=None, pad_token_id=0)
        reference = generated[0, len(prompt):].tolist()
        # One forward pass gives Hugging Face's logits at every step of its own continuation.
        full = hf_model(generated).logits[0].float().numpy()
    ours = list(runner.generate_ids(prompt, max_new_tokens, stop=False))
    report = LlmValidationReport(prompt, reference, ours)
    runner.reset()
    logits = runner.prefill(prompt)
    for step, token in enumerate(reference):
        ref = full[len(prompt) - 1 + step]
        report.step_max_abs_error.append(float(np.abs(logits - ref).max()))
        report.step_max_abs_reference.append(float(np.abs(ref).max()))
        report.step_top1_agrees.append(int(np.argmax(logits)) == int(np.argmax(ref)))
        if step + 1 < len(reference):
            logits = runner.decode(token)
    quantized = QUANTIZATION_KEY in runner.metadata
    if (quantized or not report.identical) if layers is None else layers:
        relative = [e / max(r, 1e-12) for e, r in zip(report.step_max_abs_error, report.step_max_abs_reference)]
        divergence = report.first_divergence
        layer_step = (divergence if divergence is not None and divergence < len(reference)
                      else int(np.argmax(relative)) if relative else 0)
        report.layer_step = layer_step
        report.layer_rtol = QUANTIZED_LAYER_RTOL if quantized else FLOAT_LAYER_RTOL
        report.layer_errors = layer_errors(runner, hf_model, prompt + reference[:layer_step])
    return report


# A float model's layers match Hugging Face's to float rounding; int8 weights move each layer's output by a few
# percent of its range (the dynamic-int8 tolerance).
FLOAT_LAYER_RTOL = 1e-4
QUANTIZED_LAYER_RTOL = 0.1


def layer_errors(runner: LlmRunner, hf_model: torch.nn.Module, context_ids: Sequence[int]) -> list[float | None]:
    """Each decoder layer's output at the last token of `context_ids` (the model fed them one at a time through
    its decode signature on LiteRT's reference kernels, every intermediate tensor kept) against Hugging Face's:
    max |error| relative to the layer's max |value|. None for a layer whose output tensor the model does not
    name (the converter's passes merged it away, or an older file)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from litert_torch.generative.convert import DECODE

    ids = [int(t) for t in context_ids]
    names = runner.layout.layer_outputs.get(DECODE) or []
    if not names or not ids:
        return []
    reference = _hf_layer_outputs(hf_model, ids)
    logs.apply_native()
    interpreter = Interpreter(model_content=runner.flatbuffer,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
                              experimental_preserve_all_tensors=True)
    decode = interpreter.get_signature_runner(DECODE)
    caches = {n: np.zeros(runner.layout.cache_shapes[n], np.float32) for n in runner.layout.cache_names}
    for position, token in enumerate(ids):
        out = decode(tokens=np.array([[token]], np.int32), input_pos=np.array([position], np.int32), **caches)
        caches = {n: out[n] for n in runner.layout.cache_names}
    subgraph = decode._subgraph_index
    index = {d["name"]: d["index"] for d in interpreter.get_tensor_details(subgraph)}
    errors: list[float | None] = []
    for i, name in enumerate(names):
        found = next((k for n, k in index.items() if name is not None and (n == name or n.endswith("/" + name))),
                     None)
        if found is None or i >= len(reference):
            errors.append(None)
            continue
        ours = np.asarray(interpreter.get_tensor(found, subgraph), np.float64).reshape(-1)
        ref = reference[i].reshape(-1)
        errors.append(float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-12))
                      if ours.shape == ref.shape else None)
    return errors


def _hf_layer_outputs(hf_model: torch.nn.Module, ids: list[int]) -> list[np.ndarray]:
    """Each decoder layer's output hidden state at the last of `ids`, from forward hooks on its layers."""
    layers = _decoder_layers(hf_model)
    captured: dict[int, torch.Tensor] = {}
    hooks = [layer.register_forward_hook(
        lambda module, args, out, k=k: captured.__setitem__(k, (out[0] if isinstance(out, tuple) else out).detach()))
        for k, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            hf_model.eval()(torch.tensor([ids]))
    finally:
        for hook in hooks:
            hook.remove()
    # a layer's output [1, T, H], or Gemma 3n's AltUp streams [N, 1, T, H]: each stream's last token
    return [(captured[k][:, 0, -1] if captured[k].dim() == 4 else captured[k][0, -1]).float().numpy()
            .astype(np.float64) for k in sorted(captured)]


def _decoder_layers(hf_model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers of a Hugging Face causal LM: the longest ModuleList named `layers`."""
    lists: list[torch.nn.ModuleList] = [m for name, m in hf_model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers"]
    if not lists:
        return []
    sizes = [len(m) for m in lists]
    return list(lists[sizes.index(max(sizes))])  # the first of the longest


def hf_generate(hf_model: Any) -> Callable[..., Any]:
    """The `generate` method of the Hugging Face model `hf_model`, which gives the reference continuation;
    InvalidArgumentError when it has none (not a generative Hugging Face model)."""
    generate = getattr(hf_model, "generate", None)
    if not callable(generate):
        raise InvalidArgumentError(f"hf_model ({type(hf_model).__name__}) is not a Hugging Face generative model: it "
                                   f"has no generate() to give the reference continuation")
    return generate
