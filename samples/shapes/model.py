"""The sample classifier: a small CNN over 64x64 RGB images with pixel values in [0, 1].

`build()` loads the trained weights shipped beside this file (made by `train.py`), for
`litert-convert convert samples/shapes/model.py:build --channel-last-io ...`.
"""

from __future__ import annotations

import json
import os

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = os.path.join(HERE, "shapes_cnn.pt")
LABELS = os.path.join(HERE, "labels.json")
MODEL = os.path.join(HERE, "shapes_cnn.tflite")


def block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class ShapesCNN(nn.Module):
    """Conv-BN-ReLU blocks down to 8x8, global average pooling, a linear head; softmax probabilities out."""

    def __init__(self, classes: int = 6):
        super().__init__()
        self.features = nn.Sequential(block(3, 16, 2), block(16, 32, 2), block(32, 64, 2), block(64, 64, 1))
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - 0.5) / 0.25
        logits = self.head(self.features(x).mean(dim=(2, 3)))
        return torch.softmax(logits, dim=1)


def labels() -> list[str]:
    with open(LABELS) as f:
        return json.load(f)


def build() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The trained model in eval mode and a sample input ([1, 3, 64, 64], values in [0, 1])."""
    model = ShapesCNN(len(labels()))
    model.load_state_dict(torch.load(WEIGHTS, weights_only=True))
    return model.eval(), (torch.rand(1, 3, 64, 64),)
