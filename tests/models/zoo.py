"""Whole models for the model tests, with randomly initialised weights made numerically meaningful.

Random init makes some nets degenerate (activations shrinking towards 0, zero-initialised layers), which
would make any comparison pass. `calibrate` re-estimates BatchNorm statistics on random batches in train mode
and gives all-zero weights small random values, before switching to eval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


def calibrate(model: nn.Module, batch: Callable[[], torch.Tensor], passes: int = 2) -> nn.Module:
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)) and weight is not None and not weight.any():
                weight.normal_(0, 0.01)
        norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # cumulative average over the calibration passes
        if norms:
            model.train()
            for _ in range(passes):
                model(batch())
    return model.eval()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    """conv + batchnorm + relu + maxpool blocks with a global-average-pool head."""

    def __init__(self, classes: int = 10):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.MaxPool2d(2))

        self.features = nn.Sequential(block(3, 16), block(16, 32), block(32, 64))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


@dataclass
class ModelCase:
    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    slow: bool = False
    calibrate: bool = True


def torchvision_model(name: str) -> Callable[[], nn.Module]:
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None)
    return build


IMAGE = (1, 3, 224, 224)

MODELS: list[ModelCase] = [
    ModelCase("mlp", MLP, (4, 32)),
    ModelCase("convnet", ConvNet, (2, 3, 64, 64)),
    ModelCase("resnet18", torchvision_model("resnet18"), IMAGE),
    ModelCase("mobilenet_v2", torchvision_model("mobilenet_v2"), IMAGE),
    ModelCase("mobilenet_v3_small", torchvision_model("mobilenet_v3_small"), IMAGE),
    ModelCase("efficientnet_b0", torchvision_model("efficientnet_b0"), IMAGE),
    ModelCase("squeezenet1_1", torchvision_model("squeezenet1_1"), IMAGE),
    ModelCase("regnet_x_400mf", torchvision_model("regnet_x_400mf"), IMAGE),
]


def build(case: ModelCase) -> nn.Module:
    torch.manual_seed(0)
    model = case.build()
    shape = (4, *case.input_shape[1:])
    return calibrate(model, lambda: torch.randn(*shape)) if case.calibrate else model.eval()
