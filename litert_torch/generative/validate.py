"""Checking a converted LLM against its Hugging Face model: greedy tokens and per-step logits.

Two comparisons on the same prompt:
- free-running: both generate `max_new_tokens` greedily; the report gives both sequences and the first step
  where they differ (none, for a float model: the converted model decodes exactly like Hugging Face);
- teacher-forced: the converted model is fed Hugging Face's tokens, so that every step compares logits for the
  same context: the max |error| per step, relative to the step's max |logit|, and whether the top-1 token agrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from litert_torch.generative.runner import LlmRunner


@dataclass
class LlmValidationReport:
    prompt_ids: list[int]
    reference_tokens: list[int]
    tokens: list[int]
    step_max_abs_error: list[float] = field(default_factory=list)
    step_max_abs_reference: list[float] = field(default_factory=list)
    step_top1_agrees: list[bool] = field(default_factory=list)

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
        return "\n".join(lines)


def validate_llm(runner: LlmRunner, hf_model: torch.nn.Module, prompt_ids: Sequence[int], max_new_tokens: int = 32
                 ) -> LlmValidationReport:
    """Compare `runner` with `hf_model` (the model it was converted from) on `prompt_ids`."""
    prompt = [int(t) for t in prompt_ids]
    hf_model = hf_model.eval()
    with torch.no_grad():
        generated = hf_model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
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
    return report

