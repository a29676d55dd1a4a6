"""Arithmetic and comparisons on plain int8 / uint8 / int16 tensors: TFLite's kernels read those types as
quantized (wrong values, or an abort of the process), so the lowerings compute in int32 and cast back; every
result, overflow included, matches PyTorch's wrap-around arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "mul_overflow": lambda a, b: (a + 100) * 3,
    "gt": lambda a, b: a > b,
    "eq": lambda a, b: a == b,
    "le": lambda a, b: a <= b,
    "clamp": lambda a, b: torch.clamp(a, -5, 5),
    "floor_divide": lambda a, b: a // b,
    "trunc_divide": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: a % b,
    "maximum": lambda a, b: torch.maximum(a, b),
}


class Binary(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b):
        return self.fn(a, b)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16], ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_narrow_integer_arithmetic_matches_pytorch(name, dtype):
    g = torch.Generator().manual_seed(0)
    low = 0 if dtype == torch.uint8 else -100
    a = torch.randint(low, 120, (4, 6), generator=g).to(dtype)
    b = torch.randint(1, 90, (4, 6), generator=g).to(dtype)
    model = Binary(OPS[name])
    edge = litert_torch.convert(model, (a, b))
    for x, y in ((a, b), (b, b.flip(1))):  # divisors never 0 (PyTorch raises there)
        np.testing.assert_array_equal(np.asarray(edge(x, y)), model(x, y).numpy())
