"""What a converted LLM's signatures and caches look like: the names both builders of its graph
(`litert_torch.generative.convert`, `litert_torch.generative.direct`) and the runner agree on, and the layout
stored in the model's metadata. Nothing here needs PyTorch, so a runner or a torch-free export imports only this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DECODE = "decode"
LAYOUT_KEY = "litert_torch.llm"


def prefill_signature(length: int) -> str:
    return f"prefill_{length}"


def kv_names(num_layers: int) -> list[str]:
    """The cache tensors' names, layer by layer: kv_cache_k_<i>, kv_cache_v_<i>."""
    names = []
    for i in range(num_layers):
        names += [f"kv_cache_k_{i}", f"kv_cache_v_{i}"]
    return names


def cache_shapes(num_layers: int, kv_heads: int, cache_length: int, head_dim: int
                 ) -> dict[str, tuple[int, int, int, int]]:
    """Each cache's shape: keys and values [1, KV, C, D]."""
    return {n: (1, kv_heads, cache_length, head_dim) for n in kv_names(num_layers)}


def conv_state_name(layer: int) -> str:
    """The name of LFM2 convolution layer `layer`'s state: its convolution inputs by position [1, 1, C, hidden],
    laid out as a key cache of one head. LiteRT-LM (0.18.1) carries a state buffer between calls only when its
    tensor's name starts with `kv_cache_`, whatever ExecutorMetadata says of it (docs/LLM.md)."""
    return f"kv_cache_conv_{layer}"


def recurrent_state_name(layer: int) -> str:
    """The name of gated DeltaNet layer `layer`'s recurrent state [1, value heads, key dim, value dim] (Qwen3-Next,
    Qwen 3.5)."""
    return f"kv_cache_rec_{layer}"


def window_state_name(layer: int) -> str:
    """The name of gated DeltaNet layer `layer`'s convolution window: the q, k, v projections of its last
    `linear_conv_kernel - 1` tokens [1, K - 1, channels], oldest first."""
    return f"kv_cache_win_{layer}"


# States that hold no positions (a gated DeltaNet's recurrent state and convolution window): no sequence axis
UNPOSITIONED = ("kv_cache_rec_", "kv_cache_win_")


def sequence_axis(name: str) -> int:
    """The axis of cache `name` that runs over positions (-1 for a state that holds none, `UNPOSITIONED`)."""
    if name.startswith(UNPOSITIONED):
        return -1
    return 2


def layer_output_name(layer: int) -> str:
    """The name of decoder layer `layer`'s output tensor (the writer puts its signature's name before it)."""
    return f"layers.{layer}/output"


@dataclass
class LlmLayout:
    """What a runner needs to know of the converted model (stored in its metadata as `litert_torch.llm`)."""

    prefill_lengths: list[int]
    cache_length: int
    num_layers: int
    cache_shapes: dict[str, list[int]]
    vocab_size: int
    cache_names: list[str]
    sequence_axes: dict[str, int]
    start_token_id: int | None = None  # prepended to a prompt by the runtime (the tokenizer's BOS), if any
    stop_token_ids: list[int] = field(default_factory=list)
    # per signature, the name of each decoder layer's output tensor (the hidden state after its residual
    # additions), None where the passes merged it away: what layer-by-layer validation compares
    layer_outputs: dict[str, list[str | None]] = field(default_factory=dict)
    # the decoder of an image+text model: its signatures take `embeddings` [1, N, hidden_size] instead of
    # `tokens`, and their attention masks (`direct.build_llm`)
    embeddings_input: bool = False
    hidden_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LlmLayout":
        return cls(**data)
