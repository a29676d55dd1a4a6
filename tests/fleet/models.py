"""Small seeded models for the fleet tests (each builder returns (module, sample_args))."""

import os

import torch
from torch import nn


def _seeded(build):
    def wrapped():
        torch.manual_seed(0)
        return build()
    wrapped.__name__ = build.__name__
    return wrapped


@_seeded
def mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval(), (torch.randn(1, 16),)


@_seeded
def cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 5)).eval(), (torch.randn(1, 3, 16, 16),)


@_seeded
def depthwise():
    return nn.Sequential(nn.Conv2d(4, 4, 3, groups=4), nn.Hardswish(), nn.Conv2d(4, 6, 1)).eval(), \
        (torch.randn(1, 4, 12, 12),)


@_seeded
def gru():
    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(6, 8, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0][:, -1]

    return Last().eval(), (torch.randn(1, 5, 6),)


@_seeded
def attention():
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    return layer.eval(), (torch.randn(1, 6, 16),)


@_seeded
def norm():
    return nn.Sequential(nn.Linear(10, 10), nn.LayerNorm(10), nn.GELU()).eval(), (torch.randn(2, 10),)


def aborts():
    """A source that takes its process down (as a runtime abort would)."""
    os.abort()
