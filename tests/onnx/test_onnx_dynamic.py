"""ONNX models with dynamic dimensions, lowered once with those dimensions as symbols: every size in the
declared range (or a dense sample of it) runs and matches PyTorch eager, or the conversion fails with a typed
error naming the node."""

from __future__ import annotations

import io
import itertools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import litert_torch
from litert_torch.errors import LoweringError

onnx = pytest.importorskip("onnx")


def to_onnx(model: nn.Module, sample: torch.Tensor, axes: dict[int, str]) -> onnx.ModelProto:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (sample,), buffer, dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": axes}, opset_version=17)
    return onnx.load_from_string(buffer.getvalue())


class Conv1dStride2(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 8, 1, stride=2)

    def forward(self, x):
        y = self.conv(x)
        return y.reshape(y.shape[0], -1)


class Conv2dPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, stride=2, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.avg = nn.AvgPool2d(3, 1, padding=1)

    def forward(self, x):
        return self.avg(self.pool(F.relu(self.conv(x))))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.conv(x), 1), 1))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 4, 4).permute(2, 0, 3, 1, 4)
        w = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)
        return (w @ v).transpose(1, 2).reshape(b, t, 16)


class Upsample(nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2, mode="nearest") + 1


class PadConcatSlice(nn.Module):
    def forward(self, x):
        y = torch.cat([F.pad(x, (1, 2)), x * 2], dim=-1)
        return y[:, :, 1:-1] + y[:, :, ::2].sum() * 0 + y[:, :, 1:-1].mean(dim=-1, keepdim=True)


class TransposedConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1)

    def forward(self, x):
        return self.up(x)


class StaticAxisChunks(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        return a * torch.sigmoid(b)


# name, module class (built seeded in the test), sample shape, dynamic axes {axis: (name, min, max)}
CASES = [
    ("conv1d_k1_stride2", Conv1dStride2, (1, 3, 20), {2: ("L", 4, 64)}),
    ("conv2d_pools", Conv2dPool, (2, 3, 16, 16), {0: ("B", 1, 3), 2: ("H", 8, 21), 3: ("W", 8, 13)}),
    ("global_pool_head", Head, (2, 3, 8, 8), {0: ("B", 1, 4), 2: ("H", 3, 12)}),
    ("attention", Attention, (2, 5, 16), {0: ("B", 1, 3), 1: ("T", 1, 24)}),
    ("upsample_x2", Upsample, (1, 2, 4, 4), {2: ("H", 1, 9), 3: ("W", 1, 9)}),
    ("pad_concat_slice", PadConcatSlice, (2, 3, 6), {2: ("L", 1, 30)}),
    ("transposed_conv1d", TransposedConv, (1, 4, 5), {2: ("L", 1, 20)}),
    ("static_axis_chunks", StaticAxisChunks, (2, 8, 5), {0: ("B", 1, 4), 2: ("L", 1, 12)}),
]


@pytest.mark.parametrize("name,module_class,shape,axes", CASES, ids=[c[0] for c in CASES])
def test_dynamic_onnx_model_matches_at_every_size(name, module_class, shape, axes):
    torch.manual_seed(0)
    module = module_class()
    model = to_onnx(module, torch.randn(*shape), {a: n for a, (n, _, _) in axes.items()})
    edge = litert_torch.convert_onnx(model, dynamic_dims={"x": {a: (lo, hi) for a, (_, lo, hi) in axes.items()}})
    ranges = [range(lo, hi + 1) for _, lo, hi in axes.values()]
    points = list(itertools.product(*ranges))
    if len(points) > 60:
        points = [points[i] for i in np.linspace(0, len(points) - 1, 60).astype(int)]
    for point in points:
        size = list(shape)
        for axis, value in zip(axes, point):
            size[axis] = value
        x = torch.randn(*size)
        with torch.no_grad():
            expected = module(x).numpy()
        got = np.asarray(edge(x.numpy()))
        assert got.shape == expected.shape, (point, got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {point}")


def test_a_dynamic_size_a_lowering_cannot_follow_is_a_typed_error_naming_the_node():
    class Upsample15(nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=1.5, mode="nearest")

    model = to_onnx(Upsample15(), torch.randn(1, 2, 8, 8), {2: "H"})
    with pytest.raises(LoweringError, match=r"onnx::Resize at node /Resize.*1\.5.*H in \[2, 16\]"):
        litert_torch.convert_onnx(model, dynamic_dims={"x": {2: (2, 16)}})


def test_inputs_sharing_a_dim_param_share_one_symbol():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    edge = litert_torch.convert_onnx(model, dynamic_dims={"a": {0: 8}, "b": {0: 8}})
    for batch in (1, 5, 8):
        a, b = np.ones((batch, 3), np.float32), np.full((batch, 3), 2, np.float32)
        np.testing.assert_array_equal(np.asarray(edge(a, b)), a + b)
    with pytest.raises(litert_torch.OnnxError, match="two ranges"):
        litert_torch.convert_onnx(model, dynamic_dims={"a": {0: 8}, "b": {0: 4}})
