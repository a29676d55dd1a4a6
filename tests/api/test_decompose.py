"""The decomposition step: torch's registry walk is shortened only while one decomposition runs."""

import pytest
import torch
from torch import nn

import litert_torch
from litert_torch.frontend import export


def test_registry_walk_is_restored_after_each_decomposition():
    utils = torch._export.utils
    walk = utils._materialize_cpp_cia_ops
    calls = []

    def counting():
        calls.append(1)
        walk()

    utils._materialize_cpp_cia_ops = counting
    try:
        program = torch.export.export(nn.Sequential(nn.Linear(4, 3), nn.GELU()), (torch.randn(2, 4),), strict=False)
        export.decompose(program)
        assert len(calls) == 1  # torch asks once per op namespace; the registry is walked once
        assert utils._materialize_cpp_cia_ops is counting
        export.decompose(program)
        assert len(calls) == 2  # walked afresh by the next decomposition
    finally:
        utils._materialize_cpp_cia_ops = walk


def test_registry_walk_is_restored_when_decomposition_fails(monkeypatch):
    walk = torch._export.utils._materialize_cpp_cia_ops

    def broken(self, table):
        raise RuntimeError("decomposition failed")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", broken)
    with pytest.raises(litert_torch.ExportError, match="decomposition failed"):  # softplus needs decomposing
        litert_torch.convert(nn.Sequential(nn.Linear(4, 3), nn.Softplus()), (torch.randn(2, 4),))
    assert torch._export.utils._materialize_cpp_cia_ops is walk


class Everyday(nn.Module):
    """The non-core ops models use most, in-place ones included: all rewritten, no second trace."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv1d = nn.Conv1d(8, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.drop = nn.Dropout(0.5, inplace=True)

    def forward(self, x):
        y = self.bn(self.conv(x))
        y = torch.relu_(y)
        y += 1.0
        a, b = y.chunk(2, dim=1)
        a = self.up(a)
        b = self.drop(b).flatten(2)                     # [1, 4, 64]
        b = self.conv1d(torch.cat([b, b], 1)).transpose(1, 2)
        b = b.unflatten(1, (8, 8)).squeeze(0).softmax(-1)
        return a.sum(dim=(2, 3)).t(), b


def test_everyday_ops_are_rewritten_without_a_second_trace(monkeypatch):
    torch.manual_seed(0)
    model = Everyday().eval()
    x = torch.randn(1, 3, 8, 8)
    want = model(x)

    def no_second_trace(self, table):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", no_second_trace)
    edge = litert_torch.convert(model, (x,))
    for got, ref in zip(edge.call_like_module(x), want):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    report = litert_torch.validate(model, (x,), edge, per_layer=True, backends=("xnnpack",))
    assert report.passed and report.layers  # the per-layer comparison reads the same rewritten graph


class Masks(nn.Module):
    """What decoders compute their masks and routings with: numbers in where, ranges, zeros/ones of a run-time
    shape, casts, floor division, and / or of masks; over a dynamic length, so that none of them is a constant."""

    def forward(self, x, n):
        k = n.shape[0]
        keys = torch.arange(k)
        causal = (keys[None, :] <= keys[:, None]) & (keys[None, :] > keys[:, None] - 3)
        mask = torch.where(causal | (n[None, :] > 4), 0.0, -1e9)
        start = torch.zeros_like(n[:1]) + torch.ones_like(n[:1], dtype=torch.int32).to(torch.float32)
        counts = torch.zeros(k, dtype=torch.int32) + torch.ones(k, dtype=torch.int32)
        steps = (torch.arange(2, k + 2) // 3).to(torch.int32) + counts
        return mask + start, torch.where(x > 0, x, 0.5) * torch.where(x > 1, 2, x), steps, (n // 0.7)


def test_mask_and_routing_ops_are_lowered_without_a_second_trace(monkeypatch):
    def no_second_trace(self, table):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", no_second_trace)
    model = Masks()
    x, n = torch.randn(3, 4), torch.randn(6) * 5
    edge = litert_torch.convert(model, (x, n), dynamic_shapes={"x": None, "n": {0: torch.export.Dim("n", max=64)}})
    for k in (2, 6, 11):
        n = torch.randn(k) * 5
        for got, want in zip(edge.call_like_module(x, n), model(x, n)):
            assert got.shape == want.shape
            torch.testing.assert_close(got.to(want.dtype), want)


class SeenMutation(nn.Module):
    """An in-place op whose effect a view shows later: only torch's functionalization gets it right."""

    def forward(self, x):
        y = x * 2
        flat = y.view(-1)
        y.add_(1)
        return flat * 3


class InputMutation(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


class PartMutation(nn.Module):
    """An in-place op on one part of a split / unbind changes the tensor it was cut from."""

    def __init__(self, cut):
        super().__init__()
        self.cut = cut

    def forward(self, x):
        y = x * 2
        first = y.unbind(0)[0] if self.cut == "unbind" else y.split(1)[0]
        first.add_(1)
        return y * 3


@pytest.mark.parametrize("model", [SeenMutation(), InputMutation(), PartMutation("unbind"), PartMutation("split")],
                         ids=["view", "input", "unbind-part", "split-part"])
def test_mutations_others_can_see_go_through_torchs_decomposition(model, monkeypatch):
    calls = []
    real = torch.export.ExportedProgram.run_decompositions

    def counting(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", counting)
    x = torch.randn(2, 3)
    want = model(x.clone())
    edge = litert_torch.convert(model, (x.clone(),))
    assert calls, "an observable mutation was rewritten as if it were not"
    torch.testing.assert_close(torch.as_tensor(edge.call_like_module(x.clone())), want)


def test_unbatched_convolutions_convert():
    """conv2d / conv1d / conv_transpose2d of an input without its batch axis (which aten.convolution does not
    take) go through torch's decomposition, with the weight a module parameter or a run-time input."""
    from tests.helpers import assert_matches

    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
            self.line = nn.Conv1d(3, 5, 3)

        def forward(self, x, w, s):
            return self.up(self.conv(x)), nn.functional.conv2d(x, w, stride=(1, 2)), self.line(s)

    torch.manual_seed(0)
    model = Convs().eval()
    args = (torch.randn(3, 6, 6), torch.randn(3, 3, 3, 3), torch.randn(3, 10))
    edge = litert_torch.convert(model, args)
    assert_matches(model(*args), edge(*args))


class Parts(nn.Module):
    def forward(self, x):
        rows = x.unbind(0)
        return [r * (i + 1) for i, r in enumerate(rows)] + list(x.unbind(-1)) + list(x[:1].unbind(0))


def test_unbind_converts_without_a_second_trace(monkeypatch):
    """torch decomposes unbind into a select and a squeeze per part and traces the graph again (minutes for a
    module returning 100,000 rows); it is lowered whole, as one UNPACK, instead."""
    def no_second_trace(self, table):
        raise AssertionError("run_decompositions was called")

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", no_second_trace)
    x = torch.randn(5, 3)
    edge = litert_torch.convert(Parts(), (x,))
    got, want = edge.call_like_module(x), Parts()(x)
    assert len(got) == len(want) == 9
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.as_tensor(g), w)


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.GELU())

    def forward(self, x):
        for _ in range(3):
            x = x * 2  # nodes made from one Python stack: they share one recorded summary
        return (self.inner(x).transpose(0, 1) + 1).softmax(-1)


def test_stack_traces_read_from_live_frames_are_torchs_text():
    """Node stack traces recorded while export runs (a cheaper capture than torch's own) are the same text as
    torch's, in the traced graph and after torch's decomposition, and torch's capture is back afterwards."""
    from torch.fx import proxy

    def traces():
        program = torch.export.export(Deep(), (torch.randn(3, 4),), strict=False)
        decomposed = program.run_decompositions()
        return [[n.meta.get("stack_trace") for n in p.graph.nodes] for p in (program, decomposed)]

    captured = proxy.CapturedTraceback
    want = traces()
    with export._live_stack_traces():
        assert proxy.CapturedTraceback is not captured
        with export._live_stack_traces():  # entered again, as by another thread
            pass
        assert proxy.CapturedTraceback is not captured
        got = traces()
        summaries = len(export._STACKS)
    assert proxy.CapturedTraceback is captured
    assert not export._STACKS  # nothing kept between traces
    assert got == want
    assert sum(t is not None and "test_decompose.py" in t for t in got[0]) >= 5  # the user's own frames
    loop = [t for t in got[0] if t is not None and "x = x * 2" in t]
    assert len(loop) == 3 and len(set(loop)) == 1
    assert 0 < summaries < sum(t is not None for graph in got for t in graph)


def test_graph_code_is_generated_only_when_read(monkeypatch):
    """torch.export regenerates its graph module's Python code after each of its passes; while we export, graph
    modules generate it when it is first read or run. The exported program still runs as the module does."""
    compiled = []
    real = torch.fx.GraphModule.recompile

    def counting(self):
        compiled.append(self)
        return real(self)

    monkeypatch.setattr(torch.fx.GraphModule, "recompile", counting)
    model, x = Deep(), torch.randn(3, 4)
    torch.export.export(model, (x,), strict=False)
    eager_compiles = len(compiled)
    compiled.clear()
    program = export.export_module(model, (x,), lowerable=lambda op: True)  # no decomposition by torch
    assert len(compiled) <= 2 < eager_compiles, (len(compiled), eager_compiles)
    torch.testing.assert_close(program.module()(x), model(x))
    assert "def forward" in program.graph_module.code


def test_fake_tensor_cache_is_dropped_only_where_it_misses():
    """While we export, a fake-tensor mode whose dispatch cache misses on almost every op (each op with its own
    scalar) stops using it, and one that repeats its ops keeps it; torch's cache lookup is back afterwards, and
    the metadata is the same either way."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    lookup = FakeTensorMode.__dict__["_cached_dispatch_impl"]

    def run(scalars):
        mode = FakeTensorMode()
        with mode:
            x = mode.from_tensor(torch.zeros(2, 3))
            shapes = {tuple((x + s).shape) for s in scalars}
        return mode.cache_enabled, shapes

    with export._fake_cache_while_it_hits():
        assert FakeTensorMode._cached_dispatch_impl is not lookup
        distinct = run(range(1300))
        repeated = run([1] * 1300)
    assert FakeTensorMode.__dict__["_cached_dispatch_impl"] is lookup
    assert distinct == (False, {(2, 3)})
    assert repeated == (True, {(2, 3)})
    outside = run(range(1300))
    assert outside == (True, {(2, 3)})  # torch's own behaviour outside a conversion


def test_many_distinct_ops_convert_right_without_the_fake_tensor_cache(monkeypatch):
    """A model of many ops, each with its own constant, drops the cache mid-trace (here after 64 lookups
    rather than 1024, to keep the model small) and converts to the same numbers as eager."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    modes = []
    judged = export._judged_fake_cache_lookup

    def recording(mode, *args, **kwargs):
        modes.append(mode)
        return judged(mode, *args, **kwargs)

    monkeypatch.setattr(export, "_FAKE_CACHE_WINDOW", 64)
    monkeypatch.setattr(export, "_judged_fake_cache_lookup", recording)

    class Many(nn.Module):
        def forward(self, x):
            return torch.stack([x * (i + 1) + i for i in range(100)]).sum(0)

    x = torch.randn(2, 3)
    edge = litert_torch.convert(Many(), (x,))
    assert modes and any(not m.cache_enabled for m in modes)
    assert all(isinstance(m, FakeTensorMode) for m in modes)
    torch.testing.assert_close(torch.as_tensor(edge(x)), Many()(x), rtol=1e-5, atol=1e-3)
