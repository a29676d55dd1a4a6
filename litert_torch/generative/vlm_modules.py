"""The PyTorch modules an image+text model's vision sections are converted from: the vision tower
(`VisionTower`: pixels -> its last hidden state) and the adapter (`Adapter`: the tower's features -> one
input embedding per image token; Gemma 3's multimodal projector, Idefics3's pixel-shuffle connector), each the
Hugging Face module itself, called as the Hugging Face model calls it."""

from __future__ import annotations

from typing import Sequence

import torch


class VisionTower(torch.nn.Module):
    """`images` float32[1, S, S, 3], the pixels divided by 255 and channels last (what LiteRT-LM's image
    preprocessor gives an encoder) -> `features` float32[1, P, D]: rescaled and normalised as the processor
    does, then the tower's `last_hidden_state`, as `get_image_features` takes it (for Idefics3, of an image with
    no padding; for LLaVA, a chosen layer's hidden states, without the class token by default)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, tower: torch.nn.Module, rescale_factor: float | None, mean: list[float] | None,
                 std: list[float] | None, output: tuple[int, bool] | None = None):
        super().__init__()
        self.tower = tower
        self.output = output  # LLaVA: the layer whose hidden states are taken, and whether the class token goes
        # the processor's pixel values are the 0..255 values times rescale_factor
        self.scale = 255.0 * (rescale_factor if rescale_factor is not None else 1.0)
        self.normalize = mean is not None and std is not None
        self.register_buffer("mean", torch.tensor(mean if mean is not None else [0.0] * 3).reshape(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std if std is not None else [1.0] * 3).reshape(1, 3, 1, 1))

    def forward(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        pixels = images.permute(0, 3, 1, 2)
        if self.scale != 1.0:
            pixels = pixels * self.scale
        if self.normalize:
            pixels = (pixels - self.mean) / self.std
        if self.output is None:
            return {"features": self.tower(pixel_values=pixels).last_hidden_state}
        layer, drop_first = self.output
        states = self.tower(pixel_values=pixels, output_hidden_states=True).hidden_states[layer]
        return {"features": states[:, 1:] if drop_first else states}


class Adapter(torch.nn.Module):
    """`features` float32[1, P, D] -> `embeddings` float32[1, T (+ E), H]: `Gemma3MultiModalProjector` (average
    pooling of the patch grid to T tokens, RMSNorm, projection to the text model's width) or `Idefics3Connector`
    (pixel shuffle, projection) or LLaVA's MLP projector; then the input embeddings of `end_tokens` (Gemma 3: its end-of-image token), as
    the model's embedding module gives them."""

    end_tokens: torch.Tensor

    def __init__(self, projector: torch.nn.Module, embeddings: torch.nn.Module | None = None,
                 end_tokens: Sequence[int] = ()):
        super().__init__()
        self.projector = projector
        self.embeddings = embeddings if end_tokens else None
        self.register_buffer("end_tokens", torch.tensor([list(end_tokens)], dtype=torch.long))

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        rows = self.projector(features)
        if self.embeddings is not None:
            rows = torch.cat([rows, self.embeddings(self.end_tokens)], dim=1)
        return {"embeddings": rows}
