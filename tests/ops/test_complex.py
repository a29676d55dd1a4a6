"""Complex values inside a model: FFTs (torch.fft, torch.stft), their magnitude, phase and parts, complex
arithmetic and a Fourier layer with complex weights, each converted and compared with eager PyTorch."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch.errors import ConversionError
from tests.helpers import op_counts
from tests.ops.cases import Fn


def _hann(n):
    return torch.hann_window(n)


CASES = {
    "rfft_abs": lambda x: torch.fft.rfft(x).abs(),
    "rfft_real_imag": lambda x: torch.fft.rfft(x).real + torch.fft.rfft(x, norm="ortho").imag,
    "fft_view_as_real": lambda x: torch.view_as_real(torch.fft.fft(x, norm="forward")),
    "irfft_even": lambda x: torch.fft.irfft(torch.fft.rfft(x) * 2),
    "irfft_odd_length": lambda x: torch.fft.irfft(torch.fft.rfft(x[:, :63]), n=63),
    "irfft_truncated": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=40),
    "irfft_zero_padded": lambda x: torch.fft.irfft(torch.fft.rfft(x[:, :20]), n=64),
    "angle": lambda x: torch.fft.rfft(x).angle(),
    "angle_of_real": lambda x: torch.angle(torch.where(x > 1, torch.nan, x)),
    "fft2_imag": lambda x: torch.fft.fft2(x.reshape(2, 8, 8)).imag,
    "ifft_of_real": lambda x: torch.fft.ifft(x).real,
    "fftn_ifftn": lambda x: torch.view_as_real(torch.fft.ifftn(torch.fft.fftn(x.reshape(2, 8, 8), dim=(1, 2)) * 1j,
                                                               dim=(1, 2))),
    "rfft2_product_irfft2": lambda x: torch.fft.irfft2(torch.fft.rfft2(x.reshape(2, 8, 8))
                                                       * torch.fft.rfft2(x.reshape(2, 8, 8).flip(-1)), s=(8, 8)),
    "hfft": lambda x: torch.fft.hfft(x[:, :33]),
    "stft_magnitude": lambda x: torch.stft(x, 16, 4, window=_hann(16), return_complex=True).abs(),
    "stft_log_power": lambda x: torch.stft(x, 16, 4, window=_hann(16), return_complex=True).abs().pow(2).log1p(),
    "correlation": lambda x: torch.view_as_real(torch.fft.rfft(x) * torch.fft.rfft(x.flip(-1)).conj()),
    "division": lambda x: torch.view_as_real(torch.fft.rfft(x) / (torch.fft.rfft(x.flip(-1)) + 1)),
    "polar_exp": lambda x: torch.view_as_real(torch.polar(x.abs(), x) + torch.exp(torch.complex(x, -x))),
    "cat_complex": lambda x: torch.view_as_real(torch.cat([torch.fft.rfft(x), torch.fft.rfft(x)[:, :3]], -1)),
    "view_as_complex": lambda x: torch.view_as_complex(x.reshape(2, 32, 2)).abs(),
    "cast_to_real": lambda x: torch.fft.rfft(x).to(torch.float32),  # PyTorch keeps the real part
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_values_inside_a_model(name):
    torch.manual_seed(0)
    x = torch.randn(2, 64)
    module = Fn(CASES[name]).eval()
    want = module(x)
    got = np.asarray(litert_torch.convert(module, (x,))(x))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4 * max(1.0, float(want.abs().max())))


class Fourier(nn.Module):
    """A Fourier layer (as in Fourier neural operators): complex weights on the lowest modes of the spectrum."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4, 5, dtype=torch.cfloat))

    def forward(self, x):
        spectrum = torch.fft.rfft(x)
        mixed = torch.einsum("bix,iox->box", spectrum[..., :5], self.weight)
        out = torch.zeros(x.shape[0], 4, x.shape[-1] // 2 + 1, dtype=torch.cfloat)
        out[..., :5] = mixed
        return torch.fft.irfft(out, n=x.shape[-1])


def test_fourier_layer_with_complex_weights():
    torch.manual_seed(0)
    model, x = Fourier().eval(), torch.randn(2, 4, 16)
    edge = litert_torch.convert(model, (x,))
    np.testing.assert_allclose(np.asarray(edge(x)), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert "FULLY_CONNECTED" in op_counts(edge)  # the DFTs: constant matrices, no complex tensor in the file


def test_a_complex_output_is_refused_naming_what_to_return():
    with pytest.raises(ConversionError, match="output 0 is a complex tensor.*view_as_real"):
        litert_torch.convert(Fn(lambda x: torch.fft.rfft(x)), (torch.randn(2, 8),))


def test_an_op_without_a_complex_lowering_is_named():
    with pytest.raises(ConversionError, match="sigmoid.*on complex values has no lowering"):
        litert_torch.convert(Fn(lambda x: torch.view_as_real(torch.sigmoid(torch.fft.rfft(x)))), (torch.randn(2, 8),))
