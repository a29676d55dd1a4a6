"""float16 and float64 models: every op loads and runs in LiteRT (kernels without those types compute in float32
between CASTs), the signature keeps the model's types, and results match eager PyTorch."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch.passes.kernel_types import ACCUMULATE_IN_FLOAT32, FLOAT32_ONLY
from tests.helpers import op_counts


class Mixed(nn.Module):
    """One of each op whose float16 kernel LiteRT lacks (conv, depthwise conv, transposed conv, pooling,
    matmuls, softmaxes, arg max, top-k, cumsum, pow, sign, floor division, prod) and a few that have one."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.fc = nn.Linear(16, 5)
        self.prelu = nn.PReLU()

    def forward(self, x, y):
        h = torch.relu(self.conv(x))
        h = self.prelu(self.depthwise(h))
        h = nn.functional.max_pool2d(h, 2)
        u = self.up(h)
        f = self.fc(u.mean((1,)).flatten(1)[:, :16])
        s = torch.softmax(f, -1) + torch.log_softmax(f, -1)
        top = torch.topk(f, 2).values
        c = torch.cumsum(y, -1) + torch.pow(y.abs() + 1, 1.5) + torch.sign(y) + torch.floor_divide(y, 0.7)
        b = torch.bmm(y[None], y.t()[None])[0]
        return s, top, f.argmax(-1), c, b, y.prod(-1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_float16_and_float64_models_load_run_and_match(dtype):
    torch.manual_seed(0)
    model = Mixed().eval().to(dtype)
    x, y = torch.randn(1, 3, 8, 8, dtype=dtype), torch.randn(4, 4, dtype=dtype)
    edge = litert_torch.convert(model, (x, y))
    sig = edge.signatures["serving_default"]
    assert [t.dtype for t in sig.inputs] == [np.dtype(str(dtype).split(".")[1])] * 2
    got = edge(x, y)
    with torch.no_grad():
        want = model(x, y)
    for g, w in zip(got, want):
        g = torch.as_tensor(np.asarray(g))
        assert g.dtype == w.dtype
        if w.dtype.is_floating_point:
            # float16: within a few float16 roundings of the eager result (both round at each op's output)
            rtol, atol = (1e-2, 1e-2) if dtype == torch.float16 else (1e-5, 1e-5)
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol)
        else:
            assert torch.equal(g.long(), w.long())
    counts = op_counts(edge)
    if dtype == torch.float64:
        # the float64 signature's edges only (two inputs, five float64 outputs): the model computes in float32
        assert counts["CAST"] == 2 + 5
    else:
        assert counts["CAST"] > 0 and set(counts) & FLOAT32_ONLY


def test_float16_variance_accumulates_in_float32():
    """The sum of squares of 4096 float16 values of magnitude ~30 passes float16's 65504 (summed in float16 the
    variance is inf); PyTorch computes in float32 and rounds the result, and so do we."""
    assert "SUM" in ACCUMULATE_IN_FLOAT32 and "MEAN" in ACCUMULATE_IN_FLOAT32

    class Var(nn.Module):
        def forward(self, x):
            return x.var(-1), x.std(-1, correction=0), (x * x).mean(-1), x.mean(-1)

    x = (torch.randn(2, 4096) * 30).half()
    edge = litert_torch.convert(Var(), (x,))
    for g, w in zip(edge(x), Var()(x)):
        g = torch.as_tensor(np.asarray(g))
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, rtol=4e-3, atol=1e-3)


def test_float16_decompositions_round_once_at_their_output():
    """A layer norm, a tanh GELU and a log-sum-exp are several TFLite ops each; in float16 they compute in float32
    between CASTs and round once, so they agree with PyTorch's float16 ops to about one float16 rounding."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(64)

        def forward(self, x):
            return self.norm(x), nn.functional.gelu(x, approximate="tanh"), torch.logsumexp(x * 4, -1)

    torch.manual_seed(0)
    model = Block().eval().half()
    x = (torch.randn(4, 64) * 3 + 1).half()
    edge = litert_torch.convert(model, (x,))
    with torch.no_grad():
        want = model(x)
    for g, w in zip(edge(x), want):
        g = torch.as_tensor(np.asarray(g))
        assert g.dtype == torch.float16
        # two roundings apart at most (ours of the float32 result, PyTorch's of its own float32 arithmetic)
        torch.testing.assert_close(g.float(), w.float(), rtol=2**-10, atol=2**-14)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_narrow_float_constants_are_read_exactly(dtype):
    """A bfloat16 or float8 buffer (transformers' RecurrentGemma keeps one) is read as the float32 values it
    holds, exactly, and a whole bfloat16 layer converts (it computes in float32 between casts)."""

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.tensor([8.3, -1.7, 300.0]).to(dtype), persistent=False)

        def forward(self, x):
            return x * self.scale.type(x.dtype)

    x = torch.randn(2, 3)
    model = Scaled()
    np.testing.assert_array_equal(litert_torch.convert(model, (x,))(x), model(x).numpy())
    if dtype == torch.bfloat16:
        with torch.no_grad():
            linear, xb = nn.Linear(4, 3).to(dtype), torch.randn(2, 4).to(dtype)
            got = litert_torch.convert(linear, (xb,))(xb).astype(np.float32)
            np.testing.assert_allclose(got, linear(xb).float().numpy(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("shape", [(), (3,)], ids=["scalar", "vector"])
def test_bfloat16_results_keep_their_shape_through_the_module_call(shape):
    """A bfloat16 output comes back as a torch bfloat16 tensor of PyTorch's shape, a 0-d one included."""
    class ToBfloat16(nn.Module):
        def forward(self, x):
            return (x * 3).bfloat16()

    x = torch.randn(shape)
    got = litert_torch.convert(ToBfloat16(), (x,)).call_like_module(x)
    want = ToBfloat16()(x)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)
