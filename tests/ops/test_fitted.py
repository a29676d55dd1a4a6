"""Functions evaluated by fitted Chebyshev expansions (lower/aten/fitted.py): the Bessel functions J and Y, the
modified Bessel functions, erfinv, ndtri and erfcx, against mpmath over the float32 range, and their special
values."""

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


def _inverse_cases():
    rng = np.random.default_rng(8)
    near_one = 1 - 10.0 ** rng.uniform(-7, -1, 100)
    x = np.concatenate([rng.uniform(-1, 1, 300), near_one, -near_one, 10.0 ** rng.uniform(-30, -1, 100)])
    p = np.concatenate([10.0 ** rng.uniform(-38, 0, 300), 1 - 10.0 ** rng.uniform(-7, -0.5, 100)])
    e = np.concatenate([10.0 ** rng.uniform(-6, 6, 300), rng.uniform(-9, 9, 300)])
    return [("erfinv", torch.erfinv, mpmath.erfinv, x[np.abs(x.astype(np.float32)) < 1]),
            ("ndtri", torch.special.ndtri, lambda v: mpmath.sqrt(2) * mpmath.erfinv(2 * v - 1), p[(p < 1)]),
            ("erfcx", torch.special.erfcx, lambda v: mpmath.exp(v * v) * mpmath.erfc(v), e)]


@pytest.mark.parametrize("name,fn,exact_fn,values", _inverse_cases(), ids=["erfinv", "ndtri", "erfcx"])
def test_erfinv_ndtri_and_erfcx_are_accurate_everywhere(name, fn, exact_fn, values):
    """erfinv next to +-1 and at tiny x, ndtri down to p = 1e-38 (where 2p - 1 is -1 in float32), erfcx where it
    falls like 1/x and where e**(x**2) grows."""
    x = torch.from_numpy(values.astype(np.float32))
    edge = litert_torch.convert(Fn(fn), (x,))
    got = np.asarray(edge(x.numpy())).astype(np.float64)
    with mpmath.workdps(100):
        truth = np.array([float(exact_fn(mpmath.mpf(float(v)))) for v in x.numpy()])
    err = np.abs(got - truth) / np.maximum(np.abs(truth), 1e-30)
    assert err.max() < 1e-5, (x.numpy()[np.argmax(err)], got[np.argmax(err)], truth[np.argmax(err)])


def test_erfinv_ndtri_and_erfcx_at_their_edges():
    cases = [(torch.erfinv, [-1.0, 1.0, 1.5, -2.0, 0.0, float("nan")], [-np.inf, np.inf, np.nan, np.nan, 0, np.nan]),
             (torch.special.ndtri, [0.0, 1.0, -0.5, 1.5, 0.5, float("nan")], [-np.inf, np.inf, np.nan, np.nan, 0, np.nan]),
             (torch.special.erfcx, [0.0, float("inf"), float("-inf"), -30.0, float("nan")],
              [1.0, 0.0, np.inf, np.inf, np.nan])]
    for fn, x, want in cases:
        x = torch.tensor(x)
        edge = litert_torch.convert(Fn(fn), (x,))
        np.testing.assert_allclose(np.asarray(edge(x.numpy())), np.array(want, np.float32), rtol=1e-6, atol=1e-7)


JY = {"j0": (torch.special.bessel_j0, lambda v: mpmath.besselj(0, v)),
      "j1": (torch.special.bessel_j1, lambda v: mpmath.besselj(1, v)),
      "y0": (torch.special.bessel_y0, lambda v: mpmath.bessely(0, v)),
      "y1": (torch.special.bessel_y1, lambda v: mpmath.bessely(1, v))}


@pytest.mark.parametrize("name", list(JY))
def test_bessel_j_and_y_against_mpmath_and_at_their_edges(name):
    """Accurate to float32 in absolute terms against mpmath on both sides of the switch at 8 (near the
    functions' zeros a relative error means little); PyTorch's values at 0, below 0 and at the infinities."""
    fn, exact = JY[name]
    g = np.random.default_rng(1)
    x = np.concatenate([g.uniform(-30, 30, 400), g.uniform(0, 2000, 100), [7.999, 8.0, 8.001, 1e-6, 0.5]])
    x = x.astype(np.float32)
    if name.startswith("y"):
        x = np.abs(x) + np.float32(1e-3)
    edge = litert_torch.convert(Fn(fn), (torch.from_numpy(x),))
    got = np.asarray(edge(torch.from_numpy(x)), np.float64)
    want = np.array([float(exact(mpmath.mpf(float(v)))) for v in x])
    scale = np.maximum(np.abs(want), 1.0)
    assert np.max(np.abs(got - want) / scale) < 2e-6

    edges = torch.tensor([0.0, -0.0, -2.0, float("inf"), float("-inf"), float("nan"), 1e-30])
    edge = litert_torch.convert(Fn(fn), (edges,))
    got, want = np.asarray(edge(edges)), fn(edges).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)
