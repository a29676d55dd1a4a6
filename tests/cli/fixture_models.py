"""Sources for the CLI tests."""

import time

import torch
from torch import nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def clock_seeded():
    """Small with new weights on every call, whatever the caller seeds."""
    torch.manual_seed(time.monotonic_ns())
    return Small().eval(), (torch.randn(1, 3, 8, 8),)


def with_inputs():
    torch.manual_seed(0)
    return Small().eval(), (torch.randn(1, 3, 8, 8),)


def other_weights():
    """Small with other (but always the same) weights: a different model from with_inputs'."""
    torch.manual_seed(1)
    return Small().eval(), (torch.randn(1, 3, 8, 8),)


small_instance = Small()
not_a_module = 42


def broken():
    raise RuntimeError("cannot build")


@torch.library.custom_op("litert_cli_test::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@opaque.register_fake
def _(x):
    return torch.empty_like(x)


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.ops.litert_cli_test.opaque(x) + 1  # OPAQUE_LINE


def unsupported():
    return Unsupported(), (torch.randn(3),)


def seeded():
    """The module of with_inputs() (same weights), without sample inputs."""
    return with_inputs()[0]


def two_signatures():
    """Encoder and decoder sharing a layer, as one model with two signatures."""
    import litert_torch

    torch.manual_seed(0)
    shared = nn.Linear(6, 6)
    encoder = nn.Sequential(shared, nn.ReLU()).eval()
    decoder = nn.Sequential(nn.Linear(6, 6), shared).eval()
    return (litert_torch.signature("encode", encoder, (torch.randn(1, 6),))
            .signature("decode", decoder, (torch.randn(1, 6),)))
