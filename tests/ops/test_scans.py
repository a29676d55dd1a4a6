"""Running reductions by doubling scans (lower/aten/reduce.py): cummax / cummin with PyTorch's index rules (ties and
repeated NaNs give the last index, a NaN sticks), logcumsumexp without overflow or lost small terms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch
from tests.ops.cases import Fn

NAN, INF = float("nan"), float("inf")


class Scan(torch.nn.Module):
    def __init__(self, fn, dim):
        super().__init__()
        self.fn, self.dim = fn, dim

    def forward(self, x):
        return self.fn(x, self.dim)


def _run(fn, x, dim):
    model = Scan(fn, dim)
    edge = litert_torch.convert(model, (x,))
    want = model(x)
    got = edge(x.numpy())
    return (got if isinstance(got, (list, tuple)) else [got]), (want if isinstance(want, tuple) else [want])


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
def test_running_extremes_follow_pytorch_for_ties_and_nan(fn):
    x = torch.tensor([[1.0, 3.0, 3.0, -2.0, NAN, 5.0, NAN, -INF, 2.0],
                      [-1.0, -1.0, INF, INF, 0.0, -5.0, -5.0, 7.0, 7.0]])
    got, want = _run(fn, x, 1)
    np.testing.assert_array_equal(np.asarray(got[0]), want[0].numpy())
    np.testing.assert_array_equal(np.asarray(got[1]), want[1].numpy())


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_running_extremes_of_integers_along_each_axis(dim):
    x = torch.randint(-5, 5, (4, 7, 3))
    for fn in (torch.cummax, torch.cummin):
        got, want = _run(fn, x, dim)
        np.testing.assert_array_equal(np.asarray(got[0]), want[0].numpy())
        np.testing.assert_array_equal(np.asarray(got[1]), want[1].numpy().astype(np.asarray(got[1]).dtype))


def test_logcumsumexp_keeps_large_small_and_infinite_values():
    x = torch.tensor([[-INF, -INF, 0.0, 200.0, -300.0, 1e-3, INF, 5.0],
                      [80.0, 80.0, -80.0, NAN, 1.0, 2.0, 3.0, 4.0],
                      [1e-8, -1e-8, 3e-8, 0.0, -INF, 88.0, 89.0, -200.0]])
    got, want = _run(torch.logcumsumexp, x, 1)
    np.testing.assert_allclose(np.asarray(got[0]), want[0].numpy(), rtol=1e-6, atol=1e-6)
    x = torch.randn(5, 33) * 30
    got, want = _run(torch.logcumsumexp, x, 1)
    np.testing.assert_allclose(np.asarray(got[0]), want[0].numpy(), rtol=1e-6, atol=1e-5)



@pytest.mark.parametrize("name,fn", [
    ("amax", lambda x: torch.amax(x, 1)), ("amin_keepdim", lambda x: torch.amin(x, (0, 1), keepdim=True)),
    ("max_all", torch.max), ("min_all", torch.min), ("argmax", lambda x: torch.argmax(x, 1)),
    ("argmin_flat", torch.argmin), ("max_dim", lambda x: torch.max(x, 1)), ("min_dim", lambda x: torch.min(x, 0)),
])
def test_extremes_treat_nan_as_pytorch_does(name, fn):
    """A NaN among the reduced values makes the maximum / minimum NaN and is where argmax / argmin point (its
    first position), as in PyTorch; rows without one are unchanged."""
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [-INF, 2.0, 2.0, 0.5], [4.0, -1.0, NAN, INF]])
    model = Fn(fn)
    edge = litert_torch.convert(model, (x,))
    got = edge(x.numpy())
    want = model(x)
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, tuple) else [want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w.numpy().astype(np.asarray(g).dtype))
