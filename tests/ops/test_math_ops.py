"""Math lowerings with no single builtin stay accurate over the whole input range: log1p and expm1 near 0 and at
the extremes, isnan on NaN and infinities, round with decimals, atan2 broadcasting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch

EDGE_VALUES = torch.tensor([0.0, 1e-30, -1e-30, 1e-7, -1e-7, 3e-4, -0.5, 1.0, 10.0, 80.0, 100.0, -100.0, -1.0,
                            float("inf"), float("-inf"), float("nan")])


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@pytest.mark.parametrize("name,fn,x", [
    ("log1p", torch.log1p, EDGE_VALUES[EDGE_VALUES > -1]),
    ("log1p_below_minus_one", torch.log1p, torch.tensor([-1.0, -2.0, 0.5])),
    ("expm1", torch.expm1, EDGE_VALUES),
    ("isnan", torch.isnan, EDGE_VALUES),
    ("exp", torch.exp, EDGE_VALUES),
    ("exp2", torch.exp2, torch.tensor([0.0, 1.0, -3.0, 10.5, 0.25])),
    ("round_2", lambda x: torch.round(x, decimals=2), torch.tensor([1.234, -5.675, 0.125, 99.995])),
    ("round_minus_1", lambda x: torch.round(x, decimals=-1), torch.tensor([15.0, 25.0, -34.0, 1234.5])),
])
def test_elementwise_math_is_accurate_everywhere(name, fn, x):
    edge = litert_torch.convert(Fn(fn), (x,))
    got, want = np.asarray(edge(x)), fn(x).numpy()
    assert got.shape == want.shape
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
    else:  # relative accuracy, also for values near 0 (where a plain LOG(1 + x) or EXP(x) - 1 has none)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1.2e-38, equal_nan=True)  # denormals may flush to 0


def test_atan2_and_tensor_clamp_broadcast():
    y, x = torch.randn(3, 1, 4), torch.randn(5, 1)
    edge = litert_torch.convert(Fn(torch.atan2), (y, x))
    np.testing.assert_allclose(np.asarray(edge(y, x)), torch.atan2(y, x).numpy(), rtol=1e-5, atol=1e-6)
    lo, hi = torch.full((4,), -0.5), torch.tensor(0.5)
    clamp = Fn(lambda v, a, b: torch.clamp(v, a, b))
    edge = litert_torch.convert(clamp, (y, lo, hi))
    np.testing.assert_array_equal(np.asarray(edge(y, lo, hi)), clamp(y, lo, hi).numpy())


def test_var_mean_gives_both():
    x = torch.randn(4, 6)
    fn = Fn(lambda v: torch.var_mean(v, dim=1, correction=0, keepdim=True))
    edge = litert_torch.convert(fn, (x,))
    for got, want in zip(edge.call_like_module(x), fn(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("offset,dim1,dim2", [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 2), (-2, 2, 0), (0, -1, -2),
                                              (5, 1, 2)])
def test_diagonal_matches_for_every_offset_and_axis_pair(offset, dim1, dim2):
    x = torch.randn(3, 4, 5)
    fn = Fn(lambda v: torch.diagonal(v, offset, dim1, dim2))
    edge = litert_torch.convert(fn, (x,))
    got, want = np.asarray(edge(x)), fn(x).numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
