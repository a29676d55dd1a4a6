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
    inputs = case.inputs(1)
    edge = litert_torch.convert(model, inputs)
    with torch.no_grad():
        assert_matches(model(*inputs), edge(*inputs))
        # A second, unseen input: the model is not specialised to its sample.
        others = case.inputs(1)
        assert_matches(model(*others), edge(*others))
    counts = op_counts(edge)
    if case.max_transposes is not None:
        assert counts.get("TRANSPOSE", 0) <= case.max_transposes, counts
    assert not unfolded_affine_ops(edge), "batch norm left unfolded after a conv or dense layer"
    assert not unfused_activations(edge), "an activation was left unfused after an op that could carry it"


def unfused_activations(edge):
    """RELU / RELU6 / RELU_N1_TO_1 ops whose input comes from a fusable op that nothing else reads."""
    graph = read_model(edge.flatbuffer).subgraphs[0]
    producers, consumers = graph.producers(), graph.consumers()
    fusable = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV", "AVERAGE_POOL_2D",
               "MAX_POOL_2D", "CONCATENATION"}
    found = []
    for op in graph.ops:
        if op.opcode in ("RELU", "RELU6", "RELU_N1_TO_1"):
            prev = producers.get(op.inputs[0])
            if (prev is not None and prev.opcode in fusable and len(consumers[op.inputs[0]]) == 1
                    and op.inputs[0] not in graph.outputs
                    and prev.options.get("fused_activation_function", "NONE") == "NONE"):
                found.append(op)
    return found


def unfolded_affine_ops(edge):
    """MUL/ADD ops applying a constant right after a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED that has no
    activation of its own between them and no other reader (CLIP's quick GELU, x * sigmoid(1.702 * x), reads
    the layer's output twice: nothing folds there)."""
    graph = read_model(edge.flatbuffer).subgraphs[0]
    producers, consumers = graph.producers(), graph.consumers()
    found = []
    for op in graph.ops:
        if op.opcode in ("MUL", "ADD") and any(t.is_constant for t in op.inputs):
            x = next((t for t in op.inputs if not t.is_constant), None)
            layer = producers.get(x) if x is not None else None
            if (layer is not None and layer.opcode in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
                    and layer.options.get("fused_activation_function") == "NONE" and len(consumers[x]) == 1
                    and x not in graph.outputs):
                found.append(op)
    return found
