"""Modified Bessel functions (lower/bessel.py) against mpmath over the float32 range, and their special values."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import torch

import litert_torch
from tests.ops.cases import Fn



def _exact(name, v):
    v = mpmath.mpf(v)
    order = 1 if "1" in name else 0
    if name.startswith("i"):
        value = mpmath.besseli(order, v)
        return value * mpmath.exp(-abs(v)) if name.endswith("e") else value
    value = mpmath.besselk(order, v)
    return value * mpmath.exp(v) if name.startswith("scaled") else value


CASES = {"i0": torch.special.i0, "i1": torch.special.i1, "i0e": torch.special.i0e, "i1e": torch.special.i1e,
         "k0": torch.special.modified_bessel_k0, "k1": torch.special.modified_bessel_k1,
         "scaled_k0": torch.special.scaled_modified_bessel_k0, "scaled_k1": torch.special.scaled_modified_bessel_k1}


@pytest.mark.parametrize("name", list(CASES))
def test_bessel_functions_are_accurate_everywhere(name):
    rng = np.random.default_rng(3)
    x = np.concatenate([10.0 ** rng.uniform(-6, 2.2, 300), rng.uniform(0, 12, 200), [1e-30, 2.0, 8.0, 7.999, 8.001,
                                                                                      80.0, 88.0, 90.0, 1e4]])
    if name.startswith("i"):
        x = np.concatenate([x, -x])
    x = torch.from_numpy(x.astype(np.float32))
    edge = litert_torch.convert(Fn(CASES[name]), (x,))
    got = np.asarray(edge(x.numpy())).astype(np.float64)
    truth = np.array([float(_exact(name, float(v))) for v in x.numpy()])
    keep = np.isfinite(truth) & (np.abs(truth) < 3e38) & ((np.abs(truth) > 1e-32) | (truth == 0))
    err = np.abs(got - truth)[keep] / np.maximum(np.abs(truth[keep]), 1e-30)
    assert err.max() < 2e-5, (x.numpy()[keep][np.argmax(err)], got[keep][np.argmax(err)], truth[keep][np.argmax(err)])
    # and PyTorch where its float32 result is a normal, finite number (its I0 and I1 overflow from about 89 on,
    # before the function does; LiteRT flushes subnormal results to zero)
    eager = CASES[name](x).numpy().astype(np.float64)
    normal = keep & np.isfinite(eager)
    np.testing.assert_allclose(got[normal], eager[normal], rtol=1e-4, atol=0)


def test_special_values():
    """At 0, at infinities and at NaN: the functions' limits (PyTorch's I0 and I1 give NaN at +-inf), NaN for K
    below 0."""
    x = torch.tensor([0.0, -1.0, float("inf"), float("-inf"), float("nan")])
    i0_1, i1_1 = float(mpmath.besseli(0, 1)), float(mpmath.besseli(1, 1))
    nan, inf = np.nan, np.inf
    want = {"i0": [1, i0_1, inf, inf, nan], "i1": [0, -i1_1, inf, -inf, nan],
            "i0e": [1, i0_1 / np.e, 0, 0, nan], "i1e": [0, -i1_1 / np.e, 0, 0, nan],
            **{k: [inf, nan, 0, nan, nan] for k in ("k0", "k1", "scaled_k0", "scaled_k1")}}
    for name, fn in CASES.items():
        edge = litert_torch.convert(Fn(fn), (x,))
        np.testing.assert_allclose(np.asarray(edge(x.numpy())), np.array(want[name], np.float32), rtol=1e-6,
                                   atol=0, err_msg=name)
