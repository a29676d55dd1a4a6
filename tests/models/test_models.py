"""Whole-model conversion: every model converts, matches eager PyTorch on every output, and conv nets keep at
most one TRANSPOSE (at the input)."""

import pytest
import torch

import litert_torch
from litert_torch.flatbuffer.reader import read_model
from tests.helpers import assert_matches, op_counts
from tests.models.zoo import MODELS, build


def _params(cases):
    return [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else []) for c in cases]


@pytest.mark.parametrize("case", _params(MODELS))
def test_model_converts_and_matches(case):
    model = build(case)
    x = torch.randn(*case.input_shape)
    edge = litert_torch.convert(model, (x,))
    with torch.no_grad():
        expected = model(x)
    assert_matches(expected, edge(x))
    # A second, unseen input: the model is not specialised to its sample.
    x2 = torch.randn(*case.input_shape)
    with torch.no_grad():
        assert_matches(model(x2), edge(x2))
    counts = op_counts(edge)
    if counts.get("CONV_2D", 0):
        assert counts.get("TRANSPOSE", 0) <= 1, counts
    assert not unfolded_affine_ops(edge), "batch norm left unfolded after a conv or dense layer"


def unfolded_affine_ops(edge):
    """MUL/ADD ops applying a constant right after a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED that has no
    activation of its own between them."""
    graph = read_model(edge.flatbuffer).subgraphs[0]
    producers = graph.producers()
    found = []
    for op in graph.ops:
        if op.opcode in ("MUL", "ADD") and any(t.is_constant for t in op.inputs):
            layer = next((producers.get(t) for t in op.inputs if not t.is_constant), None)
            if (layer is not None and layer.opcode in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
                    and layer.options.get("fused_activation_function") == "NONE"):
                found.append(op)
    return found
