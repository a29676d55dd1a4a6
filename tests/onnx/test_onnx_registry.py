"""The ONNX registry: one registration per op carries everything the driver knows of it, and a fact given twice
is refused."""

from __future__ import annotations

import pytest

from litert_torch.lower.onnx import driver  # noqa: F401 (registers every ONNX op)
from litert_torch.lower.onnx import registry
from litert_torch.lower.onnx.registry import OPS, fold_only, onnx_op, set_fact


def _lower(ctx, node, inputs, attrs):
    return inputs[0]


def test_a_second_lowering_for_an_op_is_refused():
    with pytest.raises(RuntimeError, match=r"onnx::Relu already has its lower"):
        onnx_op("Relu")(_lower)


def test_a_second_shape_rule_or_fold_is_refused():
    with pytest.raises(RuntimeError, match=r"onnx::Conv already has its shape_rule"):
        set_fact("Conv", "shape_rule", lambda inputs, attrs, n: [], "a test")
    with pytest.raises(RuntimeError, match=r"onnx::Shape already has its fold_only"):
        fold_only("Shape")


def test_every_registration_is_whole():
    for name, op in OPS.items():
        assert op.lower is not None or op.fold_only or op.size_fold is not None, name
        assert op.runtime_parameters <= op.parameters, name
        assert op.runtime_shaped is None or op.lower is not None, name
        assert op.uint32 in (None, "bits", "ordered"), name
        assert not (op.fold_only and op.lower is not None), name


def test_facts_of_an_op_come_from_its_registration():
    assert OPS["Gather"].parameters == {1} and OPS["Gather"].runtime_parameters == {1}
    assert OPS["Max"].uint16_in_range and OPS["Max"].uint32 == "ordered"
    assert OPS["Add"].uint32 == "bits" and not OPS["Add"].uint16_in_range
    assert OPS["Identity"].same_shape and not OPS["Dropout"].same_shape
    assert OPS["Resize"].runtime_shaped is not None and OPS["Resize"].shape_rule is not None
    assert OPS["GatherElements"].constant_fold is not None
    assert registry.known("Shape") and not registry.known("NoSuchOp")
    assert "Upsample" in registry.lowered_ops() and "Shape" not in registry.lowered_ops()
