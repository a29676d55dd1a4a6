"""Ops defined on a float's bit pattern, read exactly with BITCAST and integer ops: frexp (subnormals included,
without any float op seeing one) and nextafter (from zero into the subnormals, at the infinities); and the
spherical Bessel function j0, whose two formulas meet at |x| = 0.5."""

import numpy as np
import torch

import litert_torch

SPECIAL = [0.0, -0.0, 1.0, -3.5, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-45, 3e38, 5.0, -7.25e-3,
           1.1754942e-38, -1.17549435e-38, 3.4028235e38]


class Frexp(torch.nn.Module):
    def forward(self, x):
        return torch.frexp(x)


class NextAfter(torch.nn.Module):
    def forward(self, x, y):
        return torch.nextafter(x, y)


def test_frexp_of_special_normal_and_subnormal_values():
    torch.manual_seed(0)
    x = torch.cat([torch.tensor(SPECIAL), torch.randn(200) * torch.exp(torch.randn(200) * 30)])
    edge = litert_torch.convert(Frexp(), (x,))
    mantissa, exponent = edge(x)
    want_m, want_e = Frexp()(x)
    np.testing.assert_array_equal(np.asarray(mantissa).view(np.int32), want_m.numpy().view(np.int32))
    np.testing.assert_array_equal(np.asarray(exponent), want_e.numpy())


def test_nextafter_bit_for_bit():
    x = torch.tensor([0.0, 0.0, 1.0, -1.0, float("inf"), 3.0, float("nan"), -0.0, 1e-45, -2.0, 3.4028235e38, 1.0])
    y = torch.tensor([1.0, -1.0, 2.0, 0.0, 0.0, 3.0, 1.0, 5.0, 0.0, -5.0, float("inf"), float("nan")])
    edge = litert_torch.convert(NextAfter(), (x, y))
    got = np.asarray(edge(x, y))
    want = NextAfter()(x, y).numpy()
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.int32), want[~nan].view(np.int32))


def test_spherical_bessel_j0_on_both_sides_of_its_series():
    class J0(torch.nn.Module):
        def forward(self, x):
            return torch.special.spherical_bessel_j0(x)

    torch.manual_seed(0)
    x = torch.cat([torch.tensor([0.0, 0.4999, 0.5, -0.5, 1e-30, float("inf"), float("-inf"), float("nan")]),
                   torch.randn(300) * 20, torch.rand(100) - 0.5])
    edge = litert_torch.convert(J0(), (x,))
    got, want = np.asarray(edge(x)), J0()(x).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5, atol=1e-6)
