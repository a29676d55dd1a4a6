"""The PyTorch modules an image+text model's vision sections are converted from: the vision tower
(`VisionTower`: normalised pixels -> its last hidden state) and the adapter (`Adapter`: the tower's features -> one
input embedding per image token; Gemma 3's multimodal projector, Idefics3's pixel-shuffle connector), each the
Hugging Face module itself, called as the Hugging Face model calls it."""

from __future__ import annotations

import torch


class VisionTower(torch.nn.Module):
    """`pixel_values` float32[1, 3, S, S] -> `features` float32[1, P, D]: the tower's `last_hidden_state`, as
    `get_image_features` takes it (for Idefics3, of an image with no padding)."""

    def __init__(self, tower: torch.nn.Module):
        super().__init__()
        self.tower = tower

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"features": self.tower(pixel_values=pixel_values).last_hidden_state}


class Adapter(torch.nn.Module):
    """`features` float32[1, P, D] -> `embeddings` float32[1, T, H]: `Gemma3MultiModalProjector` (average
    pooling of the patch grid to T tokens, RMSNorm, projection to the text model's width) or `Idefics3Connector`
    (pixel shuffle, projection)."""

    def __init__(self, projector: torch.nn.Module):
        super().__init__()
        self.projector = projector

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"embeddings": self.projector(features)}
