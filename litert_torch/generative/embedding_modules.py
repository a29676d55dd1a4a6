"""The PyTorch modules a text-embedding model is converted from: the token-table lookup (`Lookup`) and the encoder
with sentence-transformers' pooling, Dense layers and normalisation after it (`TextEncoder`), written as
sentence-transformers computes them so that a converted model matches it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from litert_torch.generative.embedding_source import Pipeline, UnsupportedEmbeddingError

_ACTIVATIONS = {"identity": lambda x: x, "tanh": torch.tanh, "relu": torch.relu, "gelu": F.gelu,
                "sigmoid": torch.sigmoid}


class Lookup(torch.nn.Module):
    """`token` int32[1] -> the model's input embedding of it, float32[1, 1, H] (what `inputs_embeds` takes): a
    row of the table, times the module's `embed_scale` where it has one (Gemma's sqrt(hidden)). The row is read
    with one EMBEDDING_LOOKUP, which LiteRT runs on an int8 table (a GATHER would keep the table in float)."""

    def __init__(self, table: torch.nn.Module):
        super().__init__()
        import litert_torch.lower  # noqa: F401 - registers the litert_torch::embedding_lookup op

        if not isinstance(table, torch.nn.Embedding):
            raise UnsupportedEmbeddingError(f"the model's input embedding is a {type(table).__name__}, not a token "
                                            f"table (torch.nn.Embedding)")
        self.weight = table.weight
        scale = getattr(table, "embed_scale", None)
        self.scale = None if scale is None else float(torch.as_tensor(scale).to(table.weight.dtype))

    def forward(self, token: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = torch.ops.litert_torch.embedding_lookup(self.weight, token)[None]
        return {"embeddings": rows if self.scale is None else rows * self.scale}


class TextEncoder(torch.nn.Module):
    """`embeddings` float32[1, N, H] and `input_mask` float32[1, N] (1 for a real token, 0 for padding after the
    text) -> the text's embedding float32[1, D]."""

    def __init__(self, model: torch.nn.Module, pipeline: Pipeline):
        super().__init__()
        self.model = model
        self.pooling = list(pipeline.pooling)
        self.normalize = pipeline.normalize
        self.dense = torch.nn.ModuleList()
        self.activations = []
        for dense in pipeline.dense:
            layer = torch.nn.Linear(dense.weight.shape[1], dense.weight.shape[0], bias=dense.bias is not None)
            with torch.no_grad():
                layer.weight.copy_(torch.from_numpy(dense.weight))
                if dense.bias is not None:
                    layer.bias.copy_(torch.from_numpy(dense.bias))
            self.dense.append(layer)
            self.activations.append(dense.activation)

    def forward(self, embeddings: torch.Tensor, input_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        # the model's own masks from an integer attention mask, as its tokenizer gives it
        mask = (input_mask > 0.5).to(torch.int64)
        states = self.model(inputs_embeds=embeddings, attention_mask=mask).last_hidden_state
        pooled = torch.cat([pool(mode, states, input_mask) for mode in self.pooling], dim=-1)
        for layer, activation in zip(self.dense, self.activations):
            pooled = _ACTIVATIONS[activation](layer(pooled))
        if self.normalize:
            pooled = F.normalize(pooled, p=2, dim=1)
        return {"embedding": pooled}


def pool(mode: str, states: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
    """One sentence-transformers pooling mode over the real tokens of `states` [1, N, H]."""
    weights = input_mask[..., None]  # [1, N, 1]
    if mode == "cls_token":
        return states[:, 0]
    if mode == "max_tokens":
        return torch.where(weights > 0.5, states, torch.full_like(states, -1e9)).amax(dim=1)
    count = weights.sum(dim=1)
    if mode == "mean_tokens":
        return (states * weights).sum(dim=1) / count.clamp(min=1e-9)
    if mode == "mean_sqrt_len_tokens":
        return (states * weights).sum(dim=1) / torch.sqrt(count)
    positions = torch.arange(1, states.shape[1] + 1, dtype=states.dtype)[None, :, None]
    if mode == "weightedmean_tokens":  # token i (from 1) weighs i
        weighted = weights * positions
        return (states * weighted).sum(dim=1) / weighted.sum(dim=1).clamp(min=1e-9)
    if mode == "lasttoken":  # the last real token: the one whose position equals the count
        last = (positions == count[:, None]).to(states.dtype)
        return (states * last).sum(dim=1)
    raise UnsupportedEmbeddingError(f"pooling mode {mode!r} is not supported")
