"""Dynamic-shape corpus: each model is converted once with its dynamic dimensions and run at every size in the
declared range (or a dense sample of it) against eager PyTorch; a model whose lowering cannot follow a size
fails conversion with a typed error naming the op and the source line instead."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

import litert_torch
from tests.helpers import assert_matches


class Conv1dStrided(nn.Module):
    def __init__(self, k=1, stride=2, dilation=1, padding=0):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, k, stride=stride, dilation=dilation, padding=padding)

    def forward(self, x):
        return self.conv(x)


class Conv2dStrided(nn.Module):
    def __init__(self, k=3, stride=2, dilation=1, padding=1):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, k, stride=stride, dilation=dilation, padding=padding)

    def forward(self, x):
        return torch.relu(self.conv(x))


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return self.conv(x)


class Pool2d(nn.Module):
    def __init__(self, kind, k=3, stride=2, padding=1):
        super().__init__()
        self.kind, self.k, self.stride, self.padding = kind, k, stride, padding

    def forward(self, x):
        if self.kind == "max":
            return F.max_pool2d(x, self.k, self.stride, self.padding)
        return F.avg_pool2d(x, self.k, self.stride, self.padding, count_include_pad=False)


class GlobalPool(nn.Module):
    def forward(self, x):
        return F.adaptive_avg_pool2d(x, 1).flatten(1) + x.amax((2, 3))


class Padding(nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 2, 0, 3)) * 2


class Upsample(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode=self.mode)


class ReshapeChain(nn.Module):
    def forward(self, x):  # [B, S, 8]
        b, s, d = x.shape
        y = x.view(b, s, 2, 4).transpose(1, 2).reshape(b * 2, s, 4)
        y = y.flatten(0, 1) * 3
        return y.view(b, 2, s, 4).sum(1).reshape(b, -1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class CausalAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):  # [B, S, 16]
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, 16)


class ComputedSlices(nn.Module):
    def forward(self, x):  # [B, S]
        s = x.shape[1]
        return x[:, 1:] + x[:, :-1], x[:, -2:], x[:, : s - 1], x[-1], x[:, 1:-1:2]


class DynamicConcat(nn.Module):
    def forward(self, x, y):  # [B, S, 4], [B, T, 4]
        return torch.cat([x, y, x * 2], dim=1)


class Positions(nn.Module):
    def forward(self, x):
        return x + torch.arange(x.shape[1], dtype=x.dtype)


class FlippedPositions(nn.Module):
    def forward(self, x):
        return x + torch.arange(x.shape[1], dtype=x.dtype).flip(0)


class Normalise(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(6)

    def forward(self, x):
        return self.norm(x) + x.mean(1, keepdim=True) - x.softmax(1)


def _sizes(low, high, limit=24):
    if high - low + 1 <= limit:
        return list(range(low, high + 1))
    step = (high - low) / (limit - 1)
    return sorted({low + round(i * step) for i in range(limit)} | {low + 1, high - 1})


CASES = [
    # name, model, sample shapes, dynamic axes {input index: {axis: (name, low, high)}}
    ("conv1d_k1_s2", lambda: Conv1dStrided(1, 2), [(1, 3, 64)], {0: {2: ("L", 4, 64)}}),
    ("conv1d_k3_s2_p1", lambda: Conv1dStrided(3, 2, padding=1), [(1, 3, 20)], {0: {2: ("L", 3, 40)}}),
    ("conv1d_k3_d2", lambda: Conv1dStrided(3, 1, dilation=2), [(2, 3, 20)], {0: {2: ("L", 6, 40)}}),
    ("conv2d_s2", lambda: Conv2dStrided(), [(1, 3, 16, 16)], {0: {2: ("H", 4, 24), 3: ("W", 4, 24)}}),
    ("conv2d_s2_batch", lambda: Conv2dStrided(), [(2, 3, 9, 9)], {0: {0: ("B", 1, 6)}}),
    ("conv2d_d2", lambda: Conv2dStrided(3, 1, 2, 2), [(1, 3, 12, 12)], {0: {2: ("H", 5, 20)}}),
    ("conv_transpose", lambda: ConvTranspose(), [(1, 3, 8, 8)], {0: {2: ("H", 2, 16)}}),
    ("max_pool", lambda: Pool2d("max"), [(1, 3, 16, 16)], {0: {2: ("H", 3, 24)}}),
    ("avg_pool", lambda: Pool2d("avg"), [(1, 3, 16, 16)], {0: {3: ("W", 3, 24)}}),
    ("global_pool", lambda: GlobalPool(), [(2, 3, 8, 8)], {0: {0: ("B", 1, 5), 2: ("H", 2, 12)}}),
    ("padding", lambda: Padding(), [(1, 2, 8, 8)], {0: {2: ("H", 2, 16), 3: ("W", 2, 16)}}),
    ("upsample_nearest", lambda: Upsample("nearest"), [(1, 2, 8, 8)], {0: {2: ("H", 2, 16)}}),
    ("upsample_bilinear", lambda: Upsample("bilinear"), [(1, 2, 8, 8)], {0: {3: ("W", 2, 16)}}),
    ("reshape_chain", lambda: ReshapeChain(), [(2, 5, 8)], {0: {0: ("B", 1, 6), 1: ("S", 2, 20)}}),
    ("attention", lambda: Attention(), [(2, 7, 16)], {0: {0: ("B", 1, 4), 1: ("S", 2, 33)}}),
    ("causal_attention", lambda: CausalAttention(), [(2, 7, 16)], {0: {0: ("B", 1, 3), 1: ("S", 2, 40)}}),
    ("computed_slices", lambda: ComputedSlices(), [(2, 9)], {0: {0: ("B", 1, 4), 1: ("S", 5, 31)}}),
    ("dynamic_concat", lambda: DynamicConcat(), [(2, 3, 4), (2, 5, 4)],
     {0: {0: ("B", 1, 4), 1: ("S", 1, 9)}, 1: {0: ("B", 1, 4), 1: ("T", 1, 9)}}),
    ("positions", lambda: Positions(), [(2, 5)], {0: {1: ("S", 2, 64)}}),
    ("positions_unbounded", lambda: Positions(), [(2, 5)], {0: {1: ("S", 2, None)}}),
    ("flipped_positions", lambda: FlippedPositions(), [(2, 5)], {0: {1: ("S", 2, 16)}}),
    ("normalise", lambda: Normalise(), [(2, 5, 6)], {0: {0: ("B", 1, 4), 1: ("S", 2, 17)}}),
]


def _dynamic_shapes(axes_by_input, count):
    dims = {}
    spec = []
    for i in range(count):
        axes = {}
        for axis, (name, low, high) in axes_by_input.get(i, {}).items():
            if name not in dims:
                dims[name] = Dim(name, min=low, max=high) if high is not None else Dim(name, min=low)
            axes[axis] = dims[name]
        spec.append(axes or None)
    return tuple(spec)


def _grid(axes_by_input):
    ranges = {}
    for axes in axes_by_input.values():
        for name, low, high in axes.values():
            ranges[name] = _sizes(low, high if high is not None else 200, limit=24 if len(ranges) == 0 else 6)
    names = sorted(ranges)
    return [dict(zip(names, combo)) for combo in itertools.product(*(ranges[n] for n in names))]


@pytest.mark.parametrize("name,build,shapes,axes", CASES, ids=[c[0] for c in CASES])
def test_every_size_in_range_matches_eager(name, build, shapes, axes):
    torch.manual_seed(0)
    model = build().eval()
    samples = tuple(torch.randn(s) for s in shapes)
    edge = litert_torch.convert(model, samples, dynamic_shapes=_dynamic_shapes(axes, len(shapes)))
    for sizes in _grid(axes):
        inputs = []
        for i, shape in enumerate(shapes):
            shape = list(shape)
            for axis, (dim, _, _) in axes.get(i, {}).items():
                shape[axis] = sizes[dim]
            inputs.append(torch.randn(shape))
        with torch.no_grad():
            want = model(*inputs)
        try:
            assert_matches(want, edge(*inputs))
        except AssertionError as exc:
            raise AssertionError(f"at sizes {sizes}: {exc}") from None
