"""A small image classifier that ships with the repo, used by the README's first command and the samples."""

import torch
from torch import nn


class TinyCNN(nn.Module):
    """Three conv-bn-relu blocks (the middle one depthwise-separable), global average pooling, a linear head."""

    def __init__(self, classes: int = 8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
            nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.Hardswish(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def build() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The model in eval mode with batch-norm statistics estimated on random images, and a sample input."""
    torch.manual_seed(0)
    model = TinyCNN()
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.rand(8, 3, 64, 64))
    return model.eval(), (torch.rand(1, 3, 64, 64),)
