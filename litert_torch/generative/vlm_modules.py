"""The PyTorch modules an image+text model's vision sections are converted from: the vision tower
(`VisionTower`: pixels -> its last hidden state) and the adapter (`Adapter`: the tower's features -> one
input embedding per image token; Gemma 3's multimodal projector, Idefics3's pixel-shuffle connector), each the
Hugging Face module itself, called as the Hugging Face model calls it. LFM2-VL's SigLIP2 NaFlex tower
(`NaflexVisionTower`) takes the image cut into patches, with its position embeddings resized to the patch grid
once, at conversion."""

from __future__ import annotations

from typing import Any, Sequence

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
        return {"features": self.features(pixels)}

    def features(self, pixels: torch.Tensor) -> torch.Tensor:
        """The tower's output for the processor's `pixel_values` [1, 3, S, S]."""
        if self.output is None:
            return self.tower(pixel_values=pixels).last_hidden_state
        layer, drop_first = self.output
        states = self.tower(pixel_values=pixels, output_hidden_states=True).hidden_states[layer]
        return states[:, 1:] if drop_first else states


class NaflexVisionTower(VisionTower):
    """`VisionTower` for a SigLIP2 NaFlex tower (`Siglip2VisionModel`) on one patch grid: the normalised image is
    cut into `patch_size` patches, row by row, each flattened (rows, columns, channels) as the processor's
    `pixel_values` hold them; the patch embedding plus the position embeddings, which the tower resizes to the
    image's grid on every call, resized here once (its own `resize_positional_embeddings`); then the encoder
    layers over all patches (no padding) and the final norm."""

    positions: torch.Tensor

    def __init__(self, tower: Any, rescale_factor: float | None, mean: list[float] | None,
                 std: list[float] | None, grid: tuple[int, int], patch_size: int):
        super().__init__(tower, rescale_factor, mean, std)
        self.grid, self.patch_size = grid, patch_size
        embeddings = tower.embeddings
        table = embeddings.position_embedding.weight
        side = embeddings.position_embedding_size
        with torch.no_grad():
            resized = embeddings.resize_positional_embeddings(table.reshape(side, side, -1), torch.tensor([grid]),
                                                              max_length=grid[0] * grid[1])
        self.register_buffer("positions", resized.reshape(1, grid[0] * grid[1], -1).detach().clone())

    def features(self, pixels: torch.Tensor) -> torch.Tensor:
        (rows, cols), p = self.grid, self.patch_size
        patches = pixels.reshape(1, 3, rows, p, cols, p).permute(0, 2, 4, 3, 5, 1).reshape(1, rows * cols, -1)
        tower: Any = self.tower
        x = tower.embeddings.patch_embedding(patches) + self.positions
        return tower.post_layernorm(tower.encoder(inputs_embeds=x).last_hidden_state)


class Adapter(torch.nn.Module):
    """`features` float32[1, P, D] -> `embeddings` float32[1, T (+ E), H]: `Gemma3MultiModalProjector` (average
    pooling of the patch grid to T tokens, RMSNorm, projection to the text model's width) or `Idefics3Connector`
    (pixel shuffle, projection) or LLaVA's MLP projector, or, given the patch `grid`, LFM2-VL's projector (pixel
    unshuffle, LayerNorm, MLP) on the features laid out as that grid [1, rows, columns, D], as
    `get_image_features` gives it one image's; then the input embeddings of `end_tokens` (Gemma 3: its
    end-of-image token), as the model's embedding module gives them."""

    end_tokens: torch.Tensor

    def __init__(self, projector: torch.nn.Module, embeddings: torch.nn.Module | None = None,
                 end_tokens: Sequence[int] = (), grid: tuple[int, int] | None = None):
        super().__init__()
        self.projector = projector
        self.embeddings = embeddings if end_tokens else None
        self.grid = grid
        self.register_buffer("end_tokens", torch.tensor([list(end_tokens)], dtype=torch.long))

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.grid is not None:
            rows = self.projector(features.reshape(1, *self.grid, features.shape[-1]))
            rows = rows.reshape(1, -1, rows.shape[-1])
        else:
            rows = self.projector(features)
        if self.embeddings is not None:
            rows = torch.cat([rows, self.embeddings(self.end_tokens)], dim=1)
        return {"embeddings": rows}
