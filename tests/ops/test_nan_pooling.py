"""Max pooling computed tap by tap or window by window propagates NaN as PyTorch does: a window holding a NaN
gives NaN (and, with indices, the position of its last NaN). MAX_POOL_2D itself compares past a NaN, as every
delegate's pooling does; that limit is documented on aten.max_pool2d."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import litert_torch
from tests.ops.cases import Fn

NAN = float("nan")


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 7, 9)
    x[0, 0, 1, 1] = x[0, 1, 5, 8] = x[0, 1, 0, 0] = x[0, 1, 0, 1] = NAN
    x[0, 0, 3, 4] = float("-inf")
    x3 = torch.randn(1, 2, 4, 5, 6)
    x3[0, 1, 2, 2, 2] = x3[0, 0, 0, 0, 0] = NAN
    return x, x3


CASES = {
    "max_pool2d_dilated": lambda x, x3: F.max_pool2d(x, 2, dilation=2),
    "max_pool2d_indices": lambda x, x3: F.max_pool2d(x, 3, 2, 1, return_indices=True),
    "max_pool1d_indices": lambda x, x3: F.max_pool1d(x[0], 3, return_indices=True),
    "adaptive_max_pool2d_uneven": lambda x, x3: F.adaptive_max_pool2d(x, (3, 4)),
    "max_pool3d": lambda x, x3: F.max_pool3d(x3, 2),
    "max_pool3d_indices": lambda x, x3: F.max_pool3d(x3, 2, return_indices=True),
    "adaptive_max_pool2d_indices": lambda x, x3: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
    "adaptive_max_pool3d_indices": lambda x, x3: F.adaptive_max_pool3d(x3, (3, 2, 4), return_indices=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_max_pooling_propagates_nan(name):
    module = Fn(CASES[name]).eval()
    inputs = _inputs()
    expected = torch.utils._pytree.tree_leaves(module(*inputs))
    got = litert_torch.convert(module, inputs)(*inputs)
    got = list(got.values()) if isinstance(got, dict) else list(got) if isinstance(got, (list, tuple)) else [got]
    assert any(torch.isnan(e).any() for e in expected if e.is_floating_point())
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g).astype(np.float64), e.double().numpy(), rtol=1e-6, atol=1e-6)
