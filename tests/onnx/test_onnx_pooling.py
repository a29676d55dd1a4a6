"""Pooling the 2-D TFLite kernels cannot do (3-D windows, dilations, asymmetric average pads, MaxPool's
indices, LpPool), as one strided slice per kernel tap: each compared with ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import litert_torch
from tests.onnx.helpers import assert_matches_ort, graph_model, run_ort

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2, 3, 2]),
    dict(kernel_shape=[3, 3, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1]),
    dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2], ceil_mode=1),
    dict(kernel_shape=[2, 2, 2], dilations=[2, 1, 2]),
    dict(kernel_shape=[3, 2, 3], auto_pad="SAME_UPPER", strides=[2, 2, 2]),
], ids=["plain", "pads-strides", "ceil", "dilations", "same-upper"])
def test_three_dimensional_pooling(op, attrs):
    model = graph_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (2, 3, 5, 6, 7)}, ["y"], opset=19)
    assert_matches_ort(model, {"x": RNG.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)})


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[3, 3], pads=[0, 1, 1, 0], strides=[2, 3], ceil_mode=1),
    dict(kernel_shape=[2, 2], dilations=[2, 3], pads=[1, 1, 1, 1]),
], ids=["same-lower", "asymmetric-ceil", "dilations"])
def test_average_pooling_divides_by_the_count_onnx_says(include, attrs):
    model = graph_model([helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=include, **attrs)],
                        {"x": (1, 2, 7, 8)}, ["y"], opset=19)  # AveragePool's dilations: opset 19
    assert_matches_ort(model, {"x": RNG.standard_normal((1, 2, 7, 8)).astype(np.float32)})


@pytest.mark.parametrize("storage_order,attrs", [
    (0, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    (1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    (0, dict(kernel_shape=[2, 2, 2])),
], ids=["2d-row-major", "2d-column-major", "3d"])
def test_max_pool_indices(storage_order, attrs):
    rank = len(attrs["kernel_shape"])
    shape = (2, 3, 5, 6) if rank == 2 else (1, 2, 3, 4, 5)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=storage_order, **attrs)
    model = graph_model([node], {"x": shape}, ["y", "i"])
    # ties (equal values in one window) take the first: integers in a narrow range make many
    x = RNG.integers(-3, 3, shape).astype(np.float32)
    assert_matches_ort(model, {"x": x})


def test_max_pool_of_int8_in_three_dimensions():
    model = graph_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2], pads=[1, 1, 1, 0, 0, 0])],
                        {"x": (1, 2, 3, 4, 5)}, ["y"], dtypes={"x": np.int8})
    assert_matches_ort(model, {"x": RNG.integers(-128, 127, (1, 2, 3, 4, 5), endpoint=True).astype(np.int8)})


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    model = graph_model([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[1, 2], p=p,
                                          pads=[0, 1, 1, 0])], {"x": (1, 2, 5, 6)}, ["y"])
    assert_matches_ort(model, {"x": RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)})


def test_pooling_a_dynamic_batch_by_taps():
    model = graph_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])], {"x": ("n", 2, 3, 4, 5)},
                        ["y"])
    edge = litert_torch.convert_onnx(model, dynamic_dims={"x": {0: (1, 4)}})
    for n in (1, 3):
        x = RNG.standard_normal((n, 2, 3, 4, 5)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(edge(x)), run_ort(model, {"x": x})[0])


def test_the_indices_output_types():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2])
    model = graph_model([node], {"x": (1, 1, 4, 4)}, ["y", "i"])
    assert model.graph.output[1].type.tensor_type.elem_type == TensorProto.INT64
    got = litert_torch.convert_onnx(model)(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    assert np.asarray(got[1]).tolist() == [[[[5, 7], [13, 15]]]]


def test_a_ceil_mode_window_in_the_padding_that_shape_inference_keeps_is_refused():
    """The last window (start 8 of an 8-wide input with no left pad) starts in the right pad: ONNX drops it,
    onnx's shape inference does not; the declared shape would be wrong, so the node is refused."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[1, 2], strides=[1, 2], pads=[0, 0, 0, 1],
                            ceil_mode=1)
    model = graph_model([node], {"x": (1, 1, 2, 8)}, ["y"])
    assert list(model.graph.output[0].type.tensor_type.shape.dim)[3].dim_value == 5
    with pytest.raises(litert_torch.ConversionError, match="starts in the padding and ONNX drops it"):
        litert_torch.convert_onnx(model)
