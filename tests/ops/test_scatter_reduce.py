"""Scatter products, maxima and minima (lower/aten/scatter.py): NaN among the updates or in the tensor written into
propagates as in PyTorch, each reduction with and without the tensor's own values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch

NAN = float("nan")


class ScatterReduce(torch.nn.Module):
    def __init__(self, index, reduce, include_self):
        super().__init__()
        self.register_buffer("index", index)
        self.reduce, self.include_self = reduce, include_self

    def forward(self, x, src):
        return x.scatter_reduce(0, self.index, src, self.reduce, include_self=self.include_self)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
def test_nan_in_updates_or_in_the_tensor_propagates(reduce, include_self):
    x = torch.tensor([0.5, NAN, -1.0, 2.0, 7.0])
    src = torch.tensor([1.0, NAN, 2.0, -3.0, 4.0, -np.inf])
    index = torch.tensor([0, 0, 1, 2, 2, 3])
    model = ScatterReduce(index, reduce, include_self)
    edge = litert_torch.convert(model, (x, src))
    for args in ((x, src), (x.nan_to_num(), src.nan_to_num()), (x, src.flip(0))):
        want = model(*args).numpy()
        got = np.asarray(edge(*[a.numpy() for a in args]))
        np.testing.assert_array_equal(got, want)
