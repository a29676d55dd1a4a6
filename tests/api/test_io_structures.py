"""Inputs and outputs beyond one tensor: nested structures in and out, Python scalars and None baked in, bool and
integer tensors, and state the model mutates refused by name."""

import pytest
import torch
from torch import nn

import litert_torch
from tests.helpers import assert_matches


class Nested(nn.Module):
    def forward(self, pair, extras, scale: float = 2.0, mask=None):
        a, b = pair
        out = {"sum": (a + b) * scale, "parts": [a * extras["w"], b - extras["bias"]]}
        if mask is not None:
            out["masked"] = torch.where(mask, a, torch.zeros_like(a))
        return out


def test_nested_inputs_and_outputs_round_trip():
    model = Nested()
    args = ((torch.randn(2, 3), torch.randn(2, 3)), {"w": torch.randn(3), "bias": torch.randn(2, 3)})
    edge = litert_torch.convert(model, args, {"scale": 0.5, "mask": torch.rand(2, 3) > 0.5})
    edge.output_style = "pytorch"
    fresh = ((torch.randn(2, 3), torch.randn(2, 3)), {"w": torch.randn(3), "bias": torch.randn(2, 3)})
    mask = torch.rand(2, 3) > 0.5
    got = edge(*fresh, scale=0.5, mask=mask)
    expected = model(*fresh, scale=0.5, mask=mask)
    assert set(got) == {"sum", "parts", "masked"} and isinstance(got["parts"], list)
    assert_matches(expected, got)
    assert edge.signatures["serving_default"].inputs[-1].dtype == bool  # the mask stays a bool tensor


def test_python_scalars_and_none_are_constants_of_the_model():
    model = Nested()
    args = ((torch.randn(2, 3), torch.randn(2, 3)), {"w": torch.randn(3), "bias": torch.randn(2, 3)})
    edge = litert_torch.convert(model, args, {"scale": 3.0})  # mask=None: no masked output, no mask input
    edge.output_style = "pytorch"
    names = [t.name for t in edge.signatures["serving_default"].inputs]
    assert len(names) == 4 and "masked" not in edge(*args, scale=3.0)
    assert_matches(model(*args, scale=3.0), edge(*args, scale=3.0))


class IntegerIndexing(nn.Module):
    def forward(self, table, ids: torch.Tensor, flags: torch.Tensor):
        picked = table[ids]
        return picked * flags.unsqueeze(-1).to(table.dtype), ids.sum()


def test_integer_and_bool_tensors():
    model = IntegerIndexing()
    table, ids, flags = torch.randn(10, 4), torch.tensor([1, 7, 3]), torch.tensor([True, False, True])
    edge = litert_torch.convert(model, (table, ids, flags))
    edge.output_style = "pytorch"
    other_ids, other_flags = torch.tensor([0, 9, 9]), torch.tensor([False, True, True])
    got = edge(table, other_ids, other_flags)
    expected = model(table, other_ids, other_flags)
    assert_matches(expected[0], got[0])
    assert got[1].dtype == torch.int64 and int(got[1]) == int(expected[1])


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls.add_(1)
        return x * self.calls


def test_state_the_model_mutates_is_refused_by_name():
    with pytest.raises(litert_torch.ConversionError, match="buffer mutation 'calls'"):
        litert_torch.convert(Counter(), (torch.randn(3),))
