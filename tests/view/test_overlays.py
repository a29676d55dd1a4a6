"""The overlays built from a model's metadata: an entry for every op with its placement on each target (and why
it falls back), its source line and node, and a validation's per-layer error; keyed the way Model Explorer's
TFLite adapter names the graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch import ir
from litert_torch.errors import InvalidArgumentError
from litert_torch.explorer.overlays import FAILED, PASSED, graph_ids, node_keys, overlays
from litert_torch.flatbuffer.reader import read_model
from tests.view.expected import ERROR, SOURCE, TARGETS, expected_values, labels
from tests.view import models

with open(models.__file__) as _f:
    RANK5 = next(n for n, line in enumerate(_f, 1) if "RANK5_LINE" in line)


def test_every_op_has_its_placement_source_line_and_node(converted):
    _, _, edge = converted
    found = {o.name: o.values("main") for o in overlays(edge.flatbuffer)}
    expected = expected_values(edge)
    assert set(found) == set(expected[0])
    for name, values in found.items():
        assert list(values) == [str(i) for i in range(len(expected))], name  # one entry per op, keyed by node id
        assert list(values.values()) == [row[name] for row in expected], name
    gpu = list(found[TARGETS["gpu"]].values())
    # the rank-5 stretch stays on the CPU and splits the GPU's graph in two; the delegate takes the larger part
    assert gpu[:2] == ["GPU"] * 2 and gpu[-1].startswith("CPU: outside the GPU delegate's partition")
    assert all(v.startswith("CPU: a rank-5 tensor") for v in gpu[2:-1]), gpu
    assert set(found[TARGETS["cpu"]].values()) == {"XNNPACK"}
    assert all(line.startswith("tests/view/models.py:") for line in found[SOURCE].values())  # the module's path
    assert sum(line.startswith(f"tests/view/models.py:{RANK5} ") for line in found[SOURCE].values()) == 3


def test_fallbacks_are_coloured_apart_from_delegated_ops(converted):
    _, _, edge = converted
    gpu = next(o for o in overlays(edge.flatbuffer) if o.name == TARGETS["gpu"]).graphs["main"]["results"]
    colours = [r["bgColor"] for r in gpu.values()]
    assert colours[0] == colours[1] != colours[2] == colours[3] == colours[4] == colours[5] == colours[-1]


def test_a_validation_adds_the_error_of_every_compared_layer(converted, report):
    _, _, edge = converted
    error = next(o for o in overlays(edge.flatbuffer, layers=report.layers) if o.name == ERROR)
    results = error.graphs["main"]["results"]
    assert len(report.layers) == len(labels(edge))  # this model's every op holds a PyTorch node's value
    assert {k: r["value"] for k, r in results.items()} == {str(x.op_index): x.relative_error for x in report.layers}
    assert all(r["bgColor"] == PASSED for r in results.values())


def test_a_layer_outside_the_tolerance_is_red(converted, report):
    import dataclasses

    _, _, edge = converted
    layers = [dataclasses.replace(x, relative_error=0.5, passed=False) if x.op_index == 3 else x
              for x in report.layers]
    results = next(o for o in overlays(edge.flatbuffer, layers=layers) if o.name == ERROR).graphs["main"]["results"]
    assert results["3"] == {"value": 0.5, "bgColor": FAILED}
    assert results["2"]["bgColor"] == PASSED


def test_a_validation_of_another_model_is_refused(converted, report):
    other = litert_torch.convert(torch.nn.Sequential(torch.nn.Linear(8, 3), torch.nn.Tanh()).eval(),
                                 (torch.randn(1, 8),))
    with pytest.raises(InvalidArgumentError, match="does not match this model"):
        overlays(other.flatbuffer, layers=report.layers)
    with pytest.raises(InvalidArgumentError, match="per_layer=True"):
        overlays(converted[2].flatbuffer, layers=[])


def test_each_signature_is_its_own_graph_with_its_own_plan():
    enc, dec = torch.nn.Linear(32, 8).eval(), torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU()).eval()
    edge = litert_torch.signature("encode", enc, (torch.randn(2, 32),)).signature(
        "decode", dec, (torch.randn(2, 8),)).convert()
    assert graph_ids(edge.flatbuffer) == ["encode", "decode"]
    found = {o.name: o for o in overlays(edge.flatbuffer)}
    for key, plan in edge.delegate_plans.items():
        values = found[TARGETS["gpu"]].values(key)
        assert len(values) == plan.targets["gpu"].ops
    assert len(found[SOURCE].values("decode")) == 2


def test_an_op_id_that_is_also_a_tensor_name_is_keyed_by_its_own_output():
    # The web app resolves a key as an output tensor name before a node id: op 1 must not be keyed "1" when
    # op 0's output is named "1".
    x = ir.Tensor("x", [2], np.dtype(np.float32))
    a = ir.Tensor("1", [2], np.dtype(np.float32))
    b = ir.Tensor("b", [2], np.dtype(np.float32))
    graph = ir.Graph("main", [x], [b], [ir.Op("RELU", [x], [a]), ir.Op("RELU", [a], [b])])
    assert node_keys(graph) == ["0", "b"]


def test_a_file_without_our_metadata_gets_the_rule_tables_placement(converted):
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from litert_torch.delegates.plan import plan_for

    model = schema.ModelT.InitFromPackedBuf(converted[2].flatbuffer, 0)
    model.metadata, model.metadataBuffer = [], []
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    foreign = bytes(builder.Output())
    assert not read_model(foreign).metadata
    found = {o.name: o.values("main") for o in overlays(foreign)}
    plan = plan_for(read_model(foreign).subgraphs[0])
    assert [v.startswith("CPU: ") for v in found[TARGETS["gpu"]].values()] == \
        [i in {f.op for f in plan.targets["gpu"].fallbacks} for i in range(len(found[SOURCE]))]
    assert set(found[SOURCE].values()) == {"no PyTorch origin"}


def test_a_non_finite_layer_error_is_shown_as_text(converted, report):
    import dataclasses

    layers = [dataclasses.replace(x, relative_error=float("nan"), passed=False) if x.op_index == 0 else x
              for x in report.layers]
    results = next(o for o in overlays(converted[2].flatbuffer, layers=layers) if o.name == ERROR).graphs["main"]
    assert results["results"]["0"] == {"value": "nan", "bgColor": FAILED}
