"""Batch norm in each of its ATen forms: eval mode with statistics given as inputs, train mode by the batch's
own statistics with the saved mean / rstd and the updated running statistics PyTorch returns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch

aten = torch.ops.aten


class Functional(torch.nn.Module):
    def __init__(self, training, momentum=0.1, eps=1e-5):
        super().__init__()
        self.training_form, self.momentum, self.eps = training, momentum, eps

    def forward(self, x, w, b, mean, var):
        return aten._native_batch_norm_legit_functional(x, w, b, mean, var, self.training_form, self.momentum,
                                                        self.eps)


class WithUpdate(torch.nn.Module):
    def forward(self, x, mean, var):
        out, save_mean, save_rstd, reserve, new_mean, new_var = aten._batch_norm_with_update_functional(
            x, torch.ones_like(mean), torch.zeros_like(mean), mean, var, 0.3, 1e-3)
        return out, save_mean, save_rstd, reserve, new_mean, new_var


def _check(model, args):
    edge = litert_torch.convert(model, args)
    want = model(*args)
    got = edge(*[a.numpy() for a in args])
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == tuple(w.shape) and g.dtype == w.numpy().dtype
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("training", [True, False])
def test_functional_batch_norm_returns_every_result(shape, training):
    c = shape[1]
    args = (torch.randn(shape) * 3 + 1, torch.rand(c) + 0.5, torch.randn(c), torch.randn(c), torch.rand(c) + 0.1)
    _check(Functional(training, momentum=0.25), args)


def test_batch_norm_with_update_returns_an_empty_reserve():
    _check(WithUpdate(), (torch.randn(3, 4, 6), torch.randn(4), torch.rand(4) + 0.1))
