"""A Hugging Face causal LM -> one .tflite model with `prefill_<N>` signatures and a `decode` signature.

Each signature is the same `DecoderLM` traced at its own token count: `prefill_<N>` takes N tokens and returns the
updated caches, `decode` takes one token and returns its logits and the updated caches. As in LiteRT-LM, a
runner prefills all prompt tokens but the last and decodes the last one for the first logits, so prefill never
computes logits (and a padded last chunk needs none). The weights are shared between signatures (stored once). The caches are named `kv_cache_k_<i>` /
`kv_cache_v_<i>` on both sides of every signature, so a runtime can keep one buffer per cache between calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from litert_torch import converter
from litert_torch.generative.config import LlmConfig
from litert_torch.generative.model import DecoderLM, kv_names

DECODE = "decode"


def prefill_signature(length: int) -> str:
    return f"prefill_{length}"


class _Entry(nn.Module):
    """One signature of the decoder: its own forward arity, the shared weights."""

    def __init__(self, lm: DecoderLM, logits: bool):
        super().__init__()
        self.lm, self.logits = lm, logits

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor, *caches: torch.Tensor) -> dict[str, Any]:
        return self.lm(tokens, input_pos, list(caches), logits=self.logits)


@dataclass
class LlmLayout:
    """What a runner needs to know of the converted model (stored in its metadata as `litert_torch.llm`)."""

    prefill_lengths: list[int]
    cache_length: int
    num_layers: int
    cache_shape: list[int]
    vocab_size: int
    cache_names: list[str]
    sequence_axis: int = 2
    start_token_id: int | None = None  # prepended to a prompt by the runtime (the tokenizer's BOS), if any
    stop_token_ids: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LlmLayout":
        return cls(**data)


def sample_inputs(lm: DecoderLM, length: int) -> tuple:
    tokens = torch.zeros((1, length), dtype=torch.int32)
    positions = torch.arange(length, dtype=torch.int32)
    caches = tuple(torch.zeros(lm.cache_shape()) for _ in range(2 * lm.cfg.num_layers))
    return (tokens, positions, *caches)


def convert_llm(lm: DecoderLM, prefill_lengths: Sequence[int], *, num_threads: int | None = None,
                progress: Callable[[str], None] | None = None):
    """The EdgeModel of `lm` with one prefill signature per length and a decode signature."""
    report = progress or (lambda stage: None)
    names = ["tokens", "input_pos", *kv_names(lm.cfg.num_layers)]
    parts = []
    for key, length in [*((prefill_signature(n), n) for n in prefill_lengths), (DECODE, 1)]:
        entry = _Entry(lm, logits=key == DECODE).eval()
        part = converter._convert_signature(key, entry, sample_inputs(lm, length), None, False, ("cpu",),
                                            lambda stage, key=key: report(f"{stage} {key}"))
        part.input_names = list(names)
        part.io["inputs"] = list(names)
        parts.append(part)
    layout = LlmLayout(sorted(prefill_lengths), lm.cache_length, lm.cfg.num_layers, list(lm.cache_shape()),
                       lm.cfg.vocab_size, kv_names(lm.cfg.num_layers))
    report("assemble")
    model = converter._assemble(parts)
    model.metadata[LAYOUT_KEY] = _json_bytes(layout.to_json())
    return converter._write(model, num_threads), layout


LAYOUT_KEY = "litert_torch.llm"


def _json_bytes(data: Any) -> bytes:
    import json

    return json.dumps(data, sort_keys=True).encode()


__all__ = ["convert_llm", "LlmLayout", "LAYOUT_KEY", "DECODE", "prefill_signature", "LlmConfig"]
