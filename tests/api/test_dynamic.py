"""Dynamic dimensions: -1 in the shape signatures, the runtime resizing per call, the model right at every size in
range — and a clear error where a size is baked into the graph."""

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

import litert_torch
from litert_torch.errors import InvalidArgumentError
from litert_torch.flatbuffer.reader import read_model
from tests.api.test_buckets import ConvNet, Encoder
from tests.helpers import assert_matches


def test_dynamic_batch_conv_net():
    torch.manual_seed(0)
    model = ConvNet().eval()
    edge = litert_torch.convert(model, (torch.randn(2, 3, 8, 8),),
                                dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}})
    graph = read_model(edge.flatbuffer).subgraphs[0]
    assert graph.inputs[0].shape_signature == (-1, 3, 8, 8)
    assert graph.outputs[0].shape_signature == (-1, 5)
    for batch in (1, 3, 2, 7):
        x = torch.randn(batch, 3, 8, 8)
        assert_matches(model(x), edge(x))
    with pytest.raises(litert_torch.ModelInputError, match=r"expects shape \['\?', 3, 8, 8\]"):
        edge(torch.randn(2, 3, 9, 8))
    assert edge.delegate_plan.targets["cpu"].fully_delegated
    assert "dynamic shapes" in edge.delegate_plan.targets["npu"].fallbacks[0].reason


def test_dynamic_batch_and_sequence_transformer():
    torch.manual_seed(0)
    model = Encoder().eval()
    shapes = {"tokens": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=2, max=128)}}
    edge = litert_torch.convert(model, (torch.randn(2, 16, 32),), dynamic_shapes=shapes)
    for batch, seq in ((1, 4), (2, 16), (3, 33), (1, 100)):
        tokens = torch.randn(batch, seq, 32)
        assert_matches(model(tokens), edge(tokens))


class WithPositions(nn.Module):
    def forward(self, x):
        return x + torch.arange(x.shape[1], dtype=x.dtype)


class Specialises(nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[0] == 2 else x


def test_constants_that_grow_with_a_bounded_size_are_sliced_at_run_time():
    model = WithPositions()
    edge = litert_torch.convert(model, (torch.randn(2, 5),), dynamic_shapes={"x": {1: Dim("seq", min=2, max=16)}})
    for seq in (2, 5, 11, 16):
        x = torch.randn(2, seq)
        assert_matches(model(x), edge(x))


def test_tables_of_an_unbounded_size_are_computed_at_run_time():
    model = WithPositions()
    edge = litert_torch.convert(model, (torch.randn(2, 5),), dynamic_shapes={"x": {1: Dim("seq", min=2)}})
    for seq in (2, 9, 300):
        x = torch.randn(2, seq)
        assert_matches(model(x), edge(x))


class Resample(nn.Module):
    def forward(self, x):
        return torch.nn.functional.interpolate(x, scale_factor=1.5, mode="nearest")


def test_a_lowering_that_cannot_follow_a_size_names_the_op_the_line_and_the_dimension():
    with pytest.raises(litert_torch.LoweringError,
                       match=r"aten.upsample_nearest2d.vec at .*test_dynamic.py:\d+ in forward: scale factor 1.5 does "
                             r"not map every size H"):
        litert_torch.convert(Resample(), (torch.randn(1, 2, 8, 8),), dynamic_shapes={"x": {2: Dim("H", min=2, max=9)}})


def test_one_torch_export_per_signature(monkeypatch):
    calls = []
    real = torch.export.export

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counting)
    batch = Dim("batch", min=1, max=8)
    litert_torch.convert(ConvNet().eval(), (torch.randn(2, 3, 8, 8),), dynamic_shapes={"x": {0: batch}})
    assert len(calls) == 1
    calls.clear()
    litert_torch.convert(ConvNet().eval(), (torch.randn(2, 3, 8, 8),), dynamic_shapes={"x": {0: batch}},
                         buckets={batch: [1, 2, 4]})
    assert len(calls) == 1  # the buckets are lowered from the one traced program
    calls.clear()
    (litert_torch.signature("a", ConvNet().eval(), (torch.randn(1, 3, 8, 8),))
     .signature("b", ConvNet().eval(), (torch.randn(2, 3, 8, 8),), dynamic_shapes={"x": {0: batch}}).convert())
    assert len(calls) == 2


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_hugging_face_transformers_with_a_dynamic_sequence(name):
    from tests.models import zoo

    case = next(c for c in zoo.MODELS if c.name == name)
    torch.manual_seed(0)
    model = zoo.build(case)
    edge = litert_torch.convert(model, tuple(case.inputs(1)), dynamic_shapes=({1: Dim("seq", min=2, max=64)},))
    for seq in (3, 17, 64):
        ids = torch.randint(0, 100, (1, seq))
        assert_matches(model(ids), edge(ids))


def test_a_model_that_specialises_the_size_is_refused_by_export():
    with pytest.raises(litert_torch.ExportError):
        litert_torch.convert(Specialises(), (torch.randn(2, 5),), dynamic_shapes={"x": {0: Dim("batch", max=16)}})


def test_sample_outside_the_range_is_refused():
    with pytest.raises(litert_torch.InvalidArgumentError, match=r"batch = 4, outside its range \[1, 2\]"):
        litert_torch.convert(ConvNet().eval(), (torch.randn(4, 3, 8, 8),),
                             dynamic_shapes={"x": {0: Dim("batch", min=1, max=2)}})


class _VarArgs(torch.nn.Module):
    def forward(self, x, *rest):
        return x * 2 + rest[0] - rest[1]


def test_dynamic_shapes_of_a_forward_taking_star_args():
    """torch.export's format for `*args`: one tuple of specs, one per argument it takes."""
    s = Dim("s", min=2, max=32)
    args = tuple(torch.randn(1, 8) for _ in range(3))
    for spec in (({1: s}, ({1: s}, {1: s})), {"x": {1: s}, "rest": ({1: s}, {1: s})}):
        edge = litert_torch.convert(_VarArgs(), args, dynamic_shapes=spec)
        for n in (2, 21):
            inputs = tuple(torch.randn(1, n) for _ in range(3))
            np.testing.assert_allclose(np.asarray(edge(*inputs)), _VarArgs()(*inputs).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(InvalidArgumentError, match=r"\*args must hold one entry per argument"):
        litert_torch.convert(_VarArgs(), args, dynamic_shapes=({1: s}, {1: s}, {1: s}))
