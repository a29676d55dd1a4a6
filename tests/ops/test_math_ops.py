"""Math lowerings stay accurate over the whole input range: log1p and expm1 near 0 and at the extremes, isnan on
NaN and infinities, round with decimals, atan2 broadcasting; LOG, SQRT, RSQRT, EXP and erf also where some CPUs'
XNNPACK kernels are wrong (the top of the float32 range, zeros, infinities, NaN: lower/common/exact.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch.flatbuffer.reader import read_model
from tests.ops.cases import Fn

EDGE_VALUES = torch.tensor([0.0, 1e-30, -1e-30, 1e-7, -1e-7, 3e-4, -0.5, 1.0, 10.0, 80.0, 100.0, -100.0, -1.0,
                            float("inf"), float("-inf"), float("nan")])


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


# The ends of the float32 range, where the kernels of some CPUs are wrong (lower/common/exact.py), and ordinary values.
RANGE_VALUES = torch.tensor([0.0, -0.0, 1.5e-38, 3e-36, 1e-20, 1e-7, 0.5, 1.0, 1.001, 2.0, 7.5, 1e10, 1e30, 1.3e36,
                             8e37, 8.6e37, 2e38, 2.5e38, 3.4e38, float(np.finfo(np.float32).max), float("inf"),
                             float("-inf"), float("nan"), -1e-37, -2.0, -3e38])
ALL_FLOATS = torch.from_numpy(np.random.default_rng(0).integers(0, 2**32, 50000, dtype=np.uint64)
                              .astype(np.uint32).view(np.float32))


@pytest.mark.parametrize("name,fn,x", [
    ("log", torch.log, RANGE_VALUES), ("sqrt", torch.sqrt, RANGE_VALUES), ("rsqrt", torch.rsqrt, RANGE_VALUES),
    ("sqrt_pow", lambda v: v ** 0.5, RANGE_VALUES), ("rsqrt_pow", lambda v: v ** -0.5, RANGE_VALUES),
    ("exp", torch.exp, torch.tensor([88.0, 88.4, 88.5, 88.7, 88.73, 89.0, -87.0, -80.0, 0.0, 1.0])),
    ("erf", torch.erf, torch.cat([RANGE_VALUES, -RANGE_VALUES, torch.linspace(-7, 7, 141)])),
    ("sign", torch.sign, RANGE_VALUES),
    ("log_bits", torch.log, ALL_FLOATS), ("sqrt_bits", torch.sqrt, ALL_FLOATS), ("rsqrt_bits", torch.rsqrt, ALL_FLOATS),
    ("exp_bits", torch.exp, ALL_FLOATS), ("erf_bits", torch.erf, ALL_FLOATS),
])
def test_kernels_are_right_over_the_whole_float32_range(name, fn, x):
    edge = litert_torch.convert(Fn(fn), (x,))
    got, want = np.asarray(edge(x)).astype(np.float64), fn(x.double()).numpy()
    tiny = (np.abs(x.numpy()) < np.finfo(np.float32).tiny) & (x.numpy() != 0)  # denormal inputs may read as zero
    want32 = want.astype(np.float32).astype(np.float64)  # overflow to inf as float32 would
    # absolute slack: LOG's kernel is good to 2 ulp of 1 near x = 1 (not relative to the tiny result there), erf's
    # GELU-based branch to 1e-6; denormal results may flush to zero
    atol = {"log": 3e-7, "erf": 1e-6}.get(name.split("_")[0], float(np.finfo(np.float32).tiny))
    close = np.isclose(got, want32, rtol=4e-6, atol=atol, equal_nan=True)
    bad = ~close & ~tiny
    assert not bad.any(), f"{name}: x={x.numpy()[bad][:5]} got={got[bad][:5]} want={want32[bad][:5]}"


WIDE = torch.cat([RANGE_VALUES, -RANGE_VALUES, torch.linspace(-20, 20, 401), torch.tensor([0.999, -0.999, 1.0001])])


@pytest.mark.parametrize("name,fn,atol", [
    ("log2", torch.log2, 3e-7), ("log10", torch.log10, 3e-7), ("trunc", torch.trunc, 0.0),
    ("atan", torch.atan, 2e-7), ("asin", torch.asin, 2e-7), ("acos", torch.acos, 4e-7),
    ("sinh", torch.sinh, 0.0), ("cosh", torch.cosh, 0.0), ("asinh", torch.asinh, 2e-7),
    ("acosh", torch.acosh, 3e-7), ("atanh", torch.atanh, 2e-7), ("erfc", torch.erfc, 5e-7),
    ("signbit", torch.signbit, 0.0), ("isinf", torch.isinf, 0.0),
])
def test_new_math_is_right_over_the_whole_float32_range(name, fn, atol):
    """Zeros, infinities, NaN, the top of the range, and a sweep of ordinary values, against float64."""
    x = WIDE[~torch.isnan(WIDE)] if name == "signbit" else WIDE  # a NaN's sign bit is not read (documented)
    edge = litert_torch.convert(Fn(fn), (x,))
    got, want = np.asarray(edge(x)), fn(x.double()).numpy()
    if want.dtype == np.bool_:
        np.testing.assert_array_equal(got, want)
        return
    want32 = want.astype(np.float32).astype(np.float64)
    tiny = (np.abs(x.numpy()) < np.finfo(np.float32).tiny) & (x.numpy() != 0)
    close = np.isclose(got.astype(np.float64), want32, rtol=4e-6, atol=max(atol, float(np.finfo(np.float32).tiny)),
                       equal_nan=True)
    bad = ~close & ~tiny
    assert not bad.any(), f"{name}: x={x.numpy()[bad][:5]} got={got[bad][:5]} want={want32[bad][:5]}"


def test_normalisation_rsqrt_is_the_short_form_inside_xnnpack():
    """rsqrt(var + eps): the input is known positive, so three ops XNNPACK takes (no SELECT, no DIV)."""
    edge = litert_torch.convert(torch.nn.LayerNorm(16).eval(), (torch.randn(2, 5, 16),))
    ops = [op.opcode for op in read_model(edge.flatbuffer).subgraphs[0].ops]
    assert ops.count("RSQRT") == 1 and "SELECT_V2" not in ops and "DIV" not in ops, ops
    x = torch.randn(2, 5, 16) * 1e18  # a variance past 2**126
    want = torch.nn.functional.layer_norm(x, (16,))
    np.testing.assert_allclose(np.asarray(edge(x)), want.numpy(), rtol=1e-4, atol=1e-4)


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


def test_tan_keeps_its_digits_next_to_every_pole():
    """The float32 neighbours of each pole (k + 1/2) * pi for |x| < 3.8e3, where sin x / cos x is off by up to a
    fifth: relative error within 1e-4 of float64's tan on both kernel sets."""
    from litert_torch.runtime.edge_model import EdgeModel

    class Tan(torch.nn.Module):
        def forward(self, x):
            return torch.tan(x)

    pole = ((np.arange(-1200, 1200) + 0.5) * np.pi).astype(np.float32)
    x = np.concatenate([pole, np.nextafter(pole, np.float32(np.inf)), np.nextafter(pole, -np.float32(np.inf)),
                        np.linspace(-3.7e3, 3.7e3, 20001, dtype=np.float32), np.float32([0.0, -0.0, 1e-30])])
    edge = litert_torch.convert(Tan(), (torch.from_numpy(x),))
    want = np.tan(x.astype(np.float64))
    for kernels in ("xnnpack", "reference"):
        got = np.asarray(EdgeModel(edge.flatbuffer, kernels=kernels)(x), np.float64)
        assert np.all(np.abs(got - want) <= 1e-4 * np.abs(want) + 1e-37), kernels
        assert np.signbit(got[-2])  # tan(-0) = -0



_EDGES = torch.tensor([0.0, -0.0, 1.0, -2.5, 1e30, -1e30, 1e-30, 3e38, float("inf"), float("-inf"), float("nan")])


@pytest.mark.parametrize("name,fn", [("fmax", torch.fmax), ("fmin", torch.fmin), ("hypot", torch.hypot),
                                     ("maximum", torch.maximum), ("minimum", torch.minimum),
                                     ("clamp_tensors", lambda a, b: torch.clamp(a, min=b, max=b + 1)),
                                     ("dist2", lambda a, b: torch.dist(a, b)),
                                     ("dist_inf", lambda a, b: torch.dist(a, b, float("inf"))),
                                     ("dist0", lambda a, b: torch.dist(a, b, 0)),
                                     ("dist3", lambda a, b: torch.dist(a, b, 3))])
def test_pairwise_math_over_every_pair_of_edge_values(name, fn):
    """maximum / minimum / clamp give NaN where either operand is one (whichever side it is on), fmax / fmin
    pass over a NaN, hypot neither overflows (3e38 with 3e38) nor loses 1e-30, and is +inf
    where either operand is infinite, NaN or not; dist's norms with NaN and infinities."""
    a = _EDGES.repeat_interleave(len(_EDGES))
    b = _EDGES.repeat(len(_EDGES))
    if name.startswith("dist"):  # one norm per row of pairs: every value against every other
        a, b = a.reshape(len(_EDGES), -1)[:, :4], b.reshape(len(_EDGES), -1)[:, :4]
        a, b = a[2:6], b[2:6]
    model = Fn(fn)
    edge = litert_torch.convert(model, (a, b))
    np.testing.assert_allclose(np.asarray(edge(a.numpy(), b.numpy())), model(a, b).numpy(), rtol=2e-6, atol=0)
    x, y = torch.randn(4, 5) * 10, torch.randn(5) * 10
    model_b = Fn(fn)
    edge = litert_torch.convert(model_b, (x, y))
    np.testing.assert_allclose(np.asarray(edge(x.numpy(), y.numpy())), model_b(x, y).numpy(), rtol=2e-6, atol=1e-6)


def test_ldexp_with_integer_exponents_under_and_over_the_float_range():
    a = torch.tensor([1.0, -3.0, 0.5, 7.0, 0.0, float("inf")])
    e = torch.tensor([0, 10, -120, 200, 5, -3])  # (LiteRT flushes subnormal results to zero)
    model = Fn(torch.ldexp)
    edge = litert_torch.convert(model, (a, e))
    np.testing.assert_array_equal(np.asarray(edge(a.numpy(), e.numpy().astype(np.int32))), model(a, e).numpy())
