"""lgamma, digamma and polygamma (lower/aten/special.py) against mpmath over the whole float32 range: tiny, huge and
negative arguments, next to the poles and the roots, and the poles and infinities themselves. (PyTorch's own
float64 polygamma loses digits at negative arguments, -38.5 for one, so it is not the reference.)"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import litert_torch
from tests.ops.cases import Fn



def _grid() -> np.ndarray:
    rng = np.random.default_rng(5)
    magnitudes = np.concatenate([10.0 ** rng.uniform(-30, 30, 400), rng.uniform(0, 20, 400)])
    near_poles = np.concatenate([-np.arange(1, 40) + d for d in (1e-3, 0.5, 0.999, -1e-3)])
    near_roots = np.array([1.4616321, 1.0, 2.0, 1.0 + 1e-4, 2.0 - 1e-4, -0.5040830, -1.5734984, -2.6107208])
    return np.concatenate([magnitudes, -magnitudes[400:], near_poles, near_roots]).astype(np.float32)


def _mp(n):
    if n is None:
        return lambda v: mpmath.log(abs(mpmath.gamma(v)))
    return lambda v: mpmath.polygamma(n, v)


CASES = [("lgamma", torch.lgamma, None), ("digamma", torch.digamma, 0),
         *[(f"polygamma{n}", (lambda n: lambda x: torch.polygamma(n, x))(n), n) for n in (1, 2, 3, 6)]]


@pytest.mark.parametrize("name,fn,n", CASES, ids=[c[0] for c in CASES])
def test_gamma_family_is_accurate_everywhere(name, fn, n):
    x = torch.from_numpy(_grid())
    edge = litert_torch.convert(Fn(fn), (x,))
    got = np.asarray(edge(x.numpy())).astype(np.float64)
    exact_fn = _mp(n)
    truth = np.array([float(exact_fn(mpmath.mpf(float(v)))) for v in x.numpy()])
    # results float32 holds (neither overflowing nor within a few powers of ten of its smallest normal value,
    # where the powers of 1/x in the series go subnormal and LiteRT flushes them)
    finite = np.isfinite(truth) & (np.abs(truth) < 3e38) & ((np.abs(truth) > 1e-32) | (truth == 0))
    # relative to the result, or to the terms that cancel near a root (a few float32 units of log|x| or of 1)
    scale = np.maximum(np.abs(truth), 1.0 if n in (None, 0) else 0.0)
    err = np.abs(got - truth)[finite] / scale[finite]
    assert err.max() < 2e-5, (x.numpy()[finite][np.argmax(err)], got[finite][np.argmax(err)],
                              truth[finite][np.argmax(err)])


def test_poles_and_infinities():
    x = torch.tensor([0.0, -0.0, -1.0, -7.0, float("inf"), float("-inf"), float("nan")])
    for fn, want in ((torch.lgamma, [np.inf, np.inf, np.inf, np.inf, np.inf, np.inf, np.nan]),
                     (torch.digamma, [-np.inf, np.inf, np.nan, np.nan, np.inf, np.nan, np.nan]),
                     (lambda t: torch.polygamma(1, t), [np.inf, np.inf, np.inf, np.inf, 0.0, np.nan, np.nan]),
                     (lambda t: torch.polygamma(2, t), [-np.inf, -np.inf, -np.inf, -np.inf, 0.0, np.nan, np.nan])):
        edge = litert_torch.convert(Fn(fn), (x,))
        np.testing.assert_array_equal(np.asarray(edge(x.numpy())), np.array(want, np.float32))


def test_polygamma_of_a_high_order_is_refused():
    with pytest.raises(litert_torch.ConversionError, match="order 17"):
        litert_torch.convert(Fn(lambda t: torch.polygamma(17, t)), (torch.rand(3),))
