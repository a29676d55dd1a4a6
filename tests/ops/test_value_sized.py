"""Sizes decided by values: nonzero, argwhere, masked_select, boolean-mask indexing, unique,
repeat_interleave by run-time counts and sizes read with .item().

Their results are sized when the model runs (TFLite's WHERE), and what follows them reads that size from the
tensor. Every model here is run with several masks, all-false (a count of 0) and all-true among them, on both
kernel sets: some kernels fail or crash on tensors with no elements, and the converter keeps those away from
them (`LoweringContext.emit`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim

import litert_torch
from tests.helpers import litert_warnings, op_counts

F = torch.nn.functional
KERNELS = ("xnnpack", "builtin")


def _masks(n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool),
            torch.rand(n, generator=g) > 0.5, torch.rand(n, generator=g) > 0.8]


def _check(edge, model, args):
    with torch.no_grad():
        want = model(*args)
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = edge(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.numpy()
        assert np.asarray(g).shape == w.shape
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5, equal_nan=True)


class Selections(torch.nn.Module):
    def forward(self, x, m):
        rows = x[m]
        return (torch.nonzero(x > 0.3), torch.masked_select(x, x > 0.3), rows * 2 + 1, torch.argwhere(rows > 0),
                rows.sum(0), rows.mean(-1), torch.cat([rows, x[:1]]), rows.shape[0] * torch.ones(2))


@pytest.mark.parametrize("kernels", KERNELS)
def test_selections_match_pytorch_for_every_count(kernels):
    torch.manual_seed(0)
    model = Selections()
    edge = litert_torch.convert(model, (torch.randn(6, 4), torch.rand(6) > 0.5)).with_kernels(kernels)
    assert op_counts(edge).get("WHERE") == 4
    for mask in _masks(6):
        _check(edge, model, (torch.randn(6, 4), mask))


class Indexing(torch.nn.Module):
    def forward(self, x, m, m2):
        i, j = torch.nonzero(m2, as_tuple=True)
        return x[:, m], x[1, m], x[m2.any(1)][:, m], x[m2][:, 0], x[i, j], i * 10 + j


@pytest.mark.parametrize("kernels", KERNELS)
def test_masks_on_inner_axes_and_over_several_axes(kernels):
    model = Indexing()
    edge = litert_torch.convert(model, (torch.randn(5, 5, 3), torch.rand(5) > 0.5, torch.rand(5, 5) > 0.5))
    edge = edge.with_kernels(kernels)
    for k, mask in enumerate(_masks(5)):
        _check(edge, model, (torch.randn(5, 5, 3), mask, torch.rand(5, 5) > k / 5))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.float16])
def test_nonzero_and_masked_select_of_other_dtypes(dtype):
    class M(torch.nn.Module):
        def forward(self, x, m):
            return torch.nonzero(x), torch.masked_select(x, m), x[m.any(-1)]

    def sample(seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 3, (3, 4), generator=g).to(dtype)
        return x, torch.rand(3, 4, generator=g) > 0.5

    edge = litert_torch.convert(M(), sample(0))
    for seed in range(4):
        _check(edge, M(), sample(seed))


def test_nan_counts_as_nonzero_and_masks_broadcast():
    class M(torch.nn.Module):
        def forward(self, x, m):
            return torch.nonzero(x), torch.masked_select(x, m)

    x = torch.tensor([[0.0, float("nan"), 1.0], [0.0, -0.0, -2.0]])
    edge = litert_torch.convert(M(), (x, torch.tensor([True, False, True])))
    for mask in ([True, False, True], [False, False, False], [True, True, True]):
        _check(edge, M(), (x, torch.tensor(mask)))


def test_a_dynamic_batch_and_a_count_together():
    class M(torch.nn.Module):
        def forward(self, x):
            kept = x[x[:, 0] > 0.5]
            return kept * x.shape[0], torch.nonzero(x > 0.5)

    edge = litert_torch.convert(M(), (torch.rand(4, 3),), dynamic_shapes=({0: Dim("batch", min=1, max=64)},))
    for n in (1, 5, 17, 64):
        _check(edge, M(), (torch.rand(n, 3),))
        _check(edge, M(), (torch.zeros(n, 3),))


class EmptyUnsafe(torch.nn.Module):
    """Ops whose kernels fail, crash or give garbage shapes on tensors with no elements."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 3, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)

    def forward(self, x, m):
        rows = x[m]                                         # [count, 4]
        image = rows.reshape(-1, 4, 1, 1).expand(-1, 4, 4, 4) * 1
        return (torch.softmax(rows, 0), torch.log_softmax(rows[:, 0], 0), torch.softmax(rows, -1),
                rows @ rows.T, rows.T @ rows, rows.unsqueeze(0) @ torch.ones(1, 4, 2),
                self.conv(image), self.depthwise(image), F.max_pool2d(image, 2), F.avg_pool2d(image, 2),
                F.interpolate(image, scale_factor=2), F.interpolate(image, scale_factor=2, mode="bilinear"),
                F.pixel_shuffle(image, 2), rows.unbind(-1)[1])


@pytest.mark.parametrize("kernels", KERNELS)
def test_kernels_that_cannot_take_empty_tensors_never_see_one(kernels):
    torch.manual_seed(0)
    model = EmptyUnsafe().eval()
    edge = litert_torch.convert(model, (torch.randn(6, 4), torch.rand(6) > 0.5)).with_kernels(kernels)
    for mask in _masks(6):
        _check(edge, model, (torch.randn(6, 4), mask))


def test_post_processing_validates():
    """A detection head's thresholding: the boxes, scores and labels above a score, as an app reads them."""
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cls = torch.nn.Linear(8, 5)

        def forward(self, features, boxes):
            scores, labels = self.cls(features).softmax(-1).max(-1)
            keep = scores > 0.3
            return boxes[keep], scores[keep], labels[keep]

    torch.manual_seed(0)
    model = Head().eval()
    sample = (torch.randn(20, 8) * 3, torch.rand(20, 4))
    report = litert_torch.validate(model, sample, backends=("xnnpack", "reference"))
    assert report.passed, report.render()


def test_the_ops_own_range_checks_are_not_reported_but_the_models_are():
    class Own(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x > 0), x[x > 0]

    class Checked(torch.nn.Module):
        def forward(self, x):
            rows = x[x[:, 0] > 0]
            torch._check(rows.shape[0] <= 3)
            return rows

    with litert_warnings() as records:
        litert_torch.convert(Own(), (torch.randn(3, 4),))
    assert not [r for r in records if "run-time check" in r.getMessage()]
    with litert_warnings() as records:
        litert_torch.convert(Checked(), (torch.randn(6, 4),))
    assert [r for r in records if "run-time check" in r.getMessage()]


@pytest.mark.parametrize("kernels", KERNELS)
def test_nonzero_of_a_scalar_has_one_row_or_none(kernels):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x.sum() > 0) * 1

    edge = litert_torch.convert(M(), (torch.randn(3),)).with_kernels(kernels)
    for x in (torch.ones(3), -torch.ones(3)):
        _check(edge, M(), (x,))


class Unique(torch.nn.Module):
    def forward(self, x):
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        runs, run_of, lengths = torch.unique_consecutive(x, return_inverse=True, return_counts=True)
        return values, inverse, counts, runs, run_of, lengths, torch.unique(x.flip(0))


@pytest.mark.parametrize("kernels", KERNELS)
def test_unique_and_unique_consecutive_with_inverse_and_counts(kernels):
    edge = litert_torch.convert(Unique(), (torch.randint(0, 4, (3, 5)),)).with_kernels(kernels)
    g = torch.Generator().manual_seed(0)
    for high in (1, 2, 4, 9, 100):  # one distinct value up to (nearly) all distinct
        _check(edge, Unique(), (torch.randint(0, high, (3, 5), generator=g),))


def test_unique_of_floats_keeps_each_nan_and_one_zero():
    x = torch.tensor([1.0, float("nan"), 0.0, -0.0, float("nan"), 2.0, 1.0, float("-inf")])
    edge = litert_torch.convert(Unique(), (x,))
    got, want = edge(x), Unique()(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w.numpy())


@pytest.mark.parametrize("kernels", KERNELS)
def test_the_best_few_of_a_selection(kernels):
    """topk(min(k, count)): k computed from a count, read when the model runs; torch.export's check that
    min(3, count) <= count holds for every count, so it is not reported."""
    class Best(torch.nn.Module):
        def forward(self, scores, boxes):
            keep = scores > 0.5
            kept, kept_boxes = scores[keep], boxes[keep]
            top, index = kept.topk(min(3, kept.shape[0]))
            return top, kept_boxes[index]

    with litert_warnings() as records:
        edge = litert_torch.convert(Best(), (torch.rand(10), torch.rand(10, 4))).with_kernels(kernels)
    assert not records
    g = torch.Generator().manual_seed(0)
    for scale in (0.0, 0.6, 0.8, 1.0, 2.0):
        _check(edge, Best(), (torch.rand(10, generator=g) * scale, torch.rand(10, 4, generator=g)))


class SplitExperts(torch.nn.Module):
    """A mixture of experts that groups each expert's rows with a split by counts read with .tolist() (as
    JetMoE and ScatterMoE-style layers do): each expert's linear on its rows, the results added back in place."""

    def __init__(self, experts: int = 4, width: int = 8, k: int = 2):
        super().__init__()
        self.router = torch.nn.Linear(width, experts)
        self.weight = torch.nn.Parameter(torch.randn(experts, width, width) / width ** 0.5)
        self.experts, self.k = experts, k

    def forward(self, x):
        weights, chosen = self.router(x).softmax(-1).topk(self.k, -1)
        flat = chosen.reshape(-1)
        order = flat.sort(stable=True).indices
        rows = order // self.k
        sizes = torch.stack([(flat == e).sum() for e in range(self.experts)]).tolist()
        parts = x[rows].split(sizes, 0)
        out = torch.cat([torch.nn.functional.linear(p, self.weight[e]) for e, p in enumerate(parts)], 0)
        out = out * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros(x.shape[0] * self.k, x.shape[1]).index_add(0, order, out).reshape(-1, self.k,
                                                                                           x.shape[1]).sum(1)


@pytest.mark.parametrize("kernels", KERNELS)
def test_experts_grouped_by_a_split_of_counts_read_with_tolist(kernels):
    torch.manual_seed(0)
    model = SplitExperts().eval()
    edge = litert_torch.convert(model, (torch.randn(6, 8),)).with_kernels(kernels)
    g = torch.Generator().manual_seed(1)
    for scale in (0.1, 1.0, 10.0, 100.0):  # large inputs send every row to the same experts: empty groups
        _check(edge, model, (torch.randn(6, 8, generator=g) * scale,))


class ReadSizes(torch.nn.Module):
    """Sizes read from values with .item(): a slice, a range and a new tensor that long."""

    def forward(self, n, y):
        k = n.max().item()
        return y[:k] * 2, torch.arange(k) + 1, y.new_ones(k, 2), torch.zeros(n.sum().item() % 4)


@pytest.mark.parametrize("kernels", KERNELS)
def test_sizes_read_with_item(kernels):
    edge = litert_torch.convert(ReadSizes(), (torch.tensor([3, 1]), torch.randn(6))).with_kernels(kernels)
    for k in (0, 1, 3, 6, 9):
        _check(edge, ReadSizes(), (torch.tensor([k, 1]), torch.randn(6)))


class LengthRegulator(torch.nn.Module):
    """A duration model's length regulator: each phoneme's features repeated for its predicted frame count."""

    def forward(self, features, durations):
        return torch.repeat_interleave(features, durations, dim=1) * 2, torch.repeat_interleave(durations)


@pytest.mark.parametrize("kernels", KERNELS)
def test_repeat_interleave_by_counts_given_at_run_time(kernels):
    sample = (torch.randn(1, 5, 3), torch.tensor([1, 0, 3, 2, 1]))
    with litert_warnings() as records:
        edge = litert_torch.convert(LengthRegulator(), sample).with_kernels(kernels)
    assert not [r for r in records if "run-time check" in r.getMessage()]  # a length is never below 0
    for durations in ([1, 0, 3, 2, 1], [0, 0, 0, 0, 0], [7, 7, 7, 7, 7], [0, 0, 0, 0, 1], [2, 0, 0, 0, 0]):
        _check(edge, LengthRegulator(), (torch.randn(1, 5, 3), torch.tensor(durations)))
