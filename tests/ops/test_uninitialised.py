"""resize_ and torch.empty: what is defined is lowered exactly, what PyTorch leaves undefined is refused. An
empty tensor written everywhere before any read is defined; rrelu's empty noise tensor is never read outside
training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch.errors import ConversionError
from tests.helpers import Fn


def _check(fn, *args):
    model = Fn(fn).eval()
    edge = litert_torch.convert(model, args)
    want = model(*(a.clone() for a in args))
    got = edge(*(a.numpy() for a in args))
    np.testing.assert_array_equal(np.asarray(got).reshape(want.shape), want.numpy())
    assert tuple(np.shape(got)) == tuple(want.shape)


@pytest.mark.parametrize("size", [(25, 5), (3, 7), (), (0,), (125,)])
def test_resize_to_fewer_elements_keeps_the_first_ones(size):
    _check(lambda x: x.clone().resize_(size), torch.randn(5, 5, 5))


def test_resize_as_takes_the_other_tensors_shape():
    _check(lambda x, y: x.clone().resize_as_(y), torch.randn(4, 6), torch.randn(3, 5))


def test_resize_to_more_elements_is_refused_naming_the_undefined_ones():
    with pytest.raises(ConversionError, match="new elements undefined"):
        litert_torch.convert(Fn(lambda x: x.clone().resize_(4, 4)), (torch.randn(3, 3),))


def test_an_empty_tensor_read_for_its_shape_only_is_exact():
    _check(lambda x: x + torch.zeros_like(torch.empty(x.shape)), torch.randn(2, 3))
    _check(lambda x: x * torch.full_like(torch.empty_like(x), 2.0), torch.randn(2, 3))


def test_an_empty_tensor_whose_values_are_read_is_refused():
    with pytest.raises(ConversionError, match="undefined values"):
        litert_torch.convert(Fn(lambda x: x + torch.empty(2, 3)), (torch.randn(2, 3),))


def _filled_by_spans(a, b):
    """DeepSeek's key layout: an empty tensor, then each part copied into its span."""
    out = a.new_empty(*a.shape[:-1], a.shape[-1] + b.shape[-1])
    out[..., : a.shape[-1]].copy_(a)
    out[..., a.shape[-1]:].copy_(b)
    return out * 1.0


def _filled_in_reverse_with_rows(a, b):
    out = torch.empty(2, 7)
    out[:, 4:] = b
    out[:, :4] = a
    return out


def test_an_empty_tensor_written_everywhere_before_any_read_is_exact():
    _check(_filled_by_spans, torch.randn(1, 4, 12, 8), torch.randn(1, 4, 12, 3))
    _check(_filled_in_reverse_with_rows, torch.randn(2, 4), torch.randn(2, 3))
    _check(lambda a: torch.empty(2, 3).copy_(a) + 1, torch.randn(2, 3))


def _partly_written(a):
    out = a.new_empty(2, 5)
    out[:, :3].copy_(a)
    return out * 1.0


def _read_before_written(a):
    out = torch.empty(3)
    y = out * 2
    out.copy_(a)
    return out + y


@pytest.mark.parametrize("fn, shape", [(_partly_written, (2, 3)), (_read_before_written, (3,))])
def test_an_empty_tensor_read_where_nothing_was_written_is_refused(fn, shape):
    with pytest.raises(ConversionError, match="undefined values"):
        litert_torch.convert(Fn(fn), (torch.randn(*shape),))


def test_rrelu_in_eval_mode_is_leaky_relu_with_the_mean_slope_and_random_slopes_are_refused():
    """rrelu's noise tensor is made with torch.empty and never read outside training."""
    x = torch.randn(4, 5)
    _check(lambda t: torch.nn.functional.rrelu(t, 0.1, 0.3, training=False) * 2, x)
    model = torch.nn.RReLU(0.2, 0.4).eval()
    np.testing.assert_array_equal(np.asarray(litert_torch.convert(model, (x,))(x)), model(x).numpy())
    with pytest.raises(litert_torch.UnsupportedOpsError, match="rrelu_with_noise"):
        litert_torch.convert(Fn(lambda t: torch.nn.functional.rrelu(t, training=True)), (x,))


def _interleaved(x1, x2):
    """Wan's rotary embedding: the even and the odd positions written in turn."""
    out = torch.empty_like(torch.cat([x1, x2], -1))
    out[..., 0::2] = x1 * 2
    out[..., 1::2] = x2 - 1
    return out


def test_an_empty_tensor_written_at_every_stride_before_any_read_is_exact():
    _check(_interleaved, torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    with pytest.raises(ConversionError, match="undefined values"):  # the odd positions never written
        litert_torch.convert(Fn(_evens_only), (torch.randn(2, 3),))


def _evens_only(a):
    out = torch.empty(2, 6)
    out[:, 0::2] = a
    return out * 1.0
