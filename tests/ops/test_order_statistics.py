"""Sorting and order statistics on the values where orders differ: NaN (PyTorch sorts it above +inf), -0.0 and
0.0 (equal), infinities and ties. Values must be PyTorch's exactly; an index must be PyTorch's, or, where PyTorch
leaves the choice among equal values open (topk, median, kthvalue), point at a value equal to the one returned."""

import numpy as np
import pytest
import torch

import litert_torch
from tests.ops.cases import Fn

NAN, INF = float("nan"), float("inf")
ROWS = torch.tensor([[3.0, NAN, 1.0, NAN, 2.0, 5.0, -0.0, 0.0],
                     [1.0, 1.0, 1.0, 2.0, 2.0, 0.0, -INF, INF],
                     [NAN] * 8,
                     [0.5, -1.5, 7.0, -0.0, 2.5, -3.0, 4.0, 1e30]])

STABLE = {  # stable sorts: indices are PyTorch's exactly
    "sort": lambda x: torch.sort(x, dim=-1),
    "sort_descending": lambda x: torch.sort(x, dim=-1, descending=True),
    "sort_stable_dim0": lambda x: torch.sort(x, dim=0, stable=True),
    "sort_stable_descending": lambda x: torch.sort(x, dim=-1, descending=True, stable=True),
    "argsort_stable": lambda x: torch.argsort(x, dim=-1, stable=True),
}
PICKED = {  # ties may be resolved by another index than PyTorch's
    "topk": lambda x: torch.topk(x, 3, dim=-1),
    "topk_smallest": lambda x: torch.topk(x, 3, dim=-1, largest=False),
    "median_dim": lambda x: torch.median(x, dim=-1),
    "median_dim0_keepdim": lambda x: torch.median(x, dim=0, keepdim=True),
    "nanmedian_dim": lambda x: torch.nanmedian(x, dim=-1),
    "kthvalue": lambda x: torch.kthvalue(x, 6, dim=-1),
    "kthvalue_keepdim": lambda x: torch.kthvalue(x, 2, dim=0, keepdim=True),
}
WHOLE = {
    "median_all": lambda x: torch.median(x[[0, 1, 3]]),
    "median_all_finite": lambda x: torch.median(x[[1, 3]]),
    "nanmedian_all": lambda x: torch.nanmedian(x),
    "nanmedian_all_nan": lambda x: torch.nanmedian(x[2]),
}


def _run(f, x):
    edge = litert_torch.convert(Fn(f).eval(), (x,))
    got = edge(x)
    return f(x), got if isinstance(got, (list, tuple)) else [got]


def _same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@pytest.mark.parametrize("name", sorted(STABLE))
def test_sorts_match_pytorch_exactly(name):
    ref, got = _run(STABLE[name], ROWS)
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    for r, g in zip(ref, got):
        assert _same(g, r.numpy()), f"{name}: {np.asarray(g).tolist()} != {r.tolist()}"


@pytest.mark.parametrize("name", sorted(PICKED))
def test_selections_match_pytorch_values_and_point_at_them(name):
    ref, (got_values, got_indices) = _run(PICKED[name], ROWS)
    assert _same(got_values, ref.values.numpy()), f"{np.asarray(got_values).tolist()} != {ref.values.tolist()}"
    dim = 0 if "dim0" in name or name == "kthvalue_keepdim" else -1
    index = torch.as_tensor(np.asarray(got_indices)).long()
    if not ref.indices.dim() or index.dim() < ROWS.dim():
        index = index.unsqueeze(dim)
    pointed = ROWS.gather(dim, index)
    assert _same(pointed.reshape(ref.values.shape).numpy(), ref.values.numpy())


def test_selection_indices_are_pytorchs_without_ties():
    x = ROWS[3:].repeat(2, 1) * torch.tensor([[1.0], [-1.0]])
    for f in PICKED.values():
        ref, got = _run(f, x)
        assert _same(got[1], ref.indices.numpy())


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_medians_of_all_values(name):
    ref, got = _run(WHOLE[name], ROWS)
    assert _same(got[0], ref.numpy()), f"{np.asarray(got[0]).tolist()} != {ref.tolist()}"


def test_median_of_integers_and_ascending_sort_of_bools():
    x = torch.tensor([[4, -2, 9, 7, 0], [2**31 - 1, -2**31, 5, 3, 1]], dtype=torch.int32)
    ref, got = _run(lambda t: torch.median(t, dim=1), x)
    assert _same(got[0], ref.values.numpy()) and _same(got[1], ref.indices.numpy())
    b = torch.tensor([[True, False, True, False]])
    ref, got = _run(lambda t: torch.sort(t, dim=1), b)
    assert _same(got[0], ref.values.numpy()) and _same(got[1], ref.indices.numpy())


class _SortDescending(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, -1, descending=True)


def test_sort_along_an_axis_of_run_time_length():
    model = _SortDescending()
    edge = litert_torch.convert(model, (torch.randn(2, 7),),
                                dynamic_shapes=({1: torch.export.Dim("n", min=2, max=64)},))
    for n in (2, 11, 64):
        x = torch.randn(2, n)
        x[0, 1] = NAN
        want = model(x)
        got = edge(x)
        assert _same(got[0], want.values.numpy()) and _same(got[1], want.indices.numpy())
