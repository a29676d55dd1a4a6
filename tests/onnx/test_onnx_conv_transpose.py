"""ONNX ConvTranspose beyond PyTorch's form: asymmetric pads, `output_shape` (cropping or zero-extending the
full output), SAME auto padding with an odd total, and groups / dilation with a weight fed at run time (its
dense filter built in the model), and 3-D Conv and ConvTranspose: each compared with ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import litert_torch
from tests.onnx.helpers import assert_matches_ort, graph_model

RNG = np.random.default_rng(9)


@pytest.mark.parametrize("attrs", [
    dict(pads=[1, 0, 0, 2], strides=[2, 2]),
    dict(output_shape=[6, 6], strides=[2, 2]),
    dict(output_shape=[5, 7], strides=[2, 2]),
    dict(output_shape=[8, 10], strides=[2, 2]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="SAME_UPPER", strides=[3, 3]),
    dict(pads=[0, 1, 2, 0], strides=[2, 1], output_padding=[1, 0], dilations=[1, 2]),
], ids=["asymmetric", "shape-odd", "shape-mixed", "shape-larger", "same-upper", "same-lower", "same-stride3",
        "asymmetric-output-padding"])
def test_transposed_convolution_padding(attrs):
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    model = graph_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": (1, 2, 3, 4)},
                        ["y"], {"w": w, "b": b})
    assert_matches_ort(model, {"x": RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)})


@pytest.mark.parametrize("attrs", [dict(group=2), dict(dilations=[2, 3]), dict(group=2, dilations=[2, 1], strides=[2, 2])],
                         ids=["groups", "dilations", "both"])
def test_grouped_and_dilated_transposed_convolution_of_a_run_time_weight(attrs):
    model = graph_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)],
                        {"x": (1, 4, 3, 3), "w": (4, 3, 2, 3)}, ["y"])
    assert_matches_ort(model, {"x": RNG.standard_normal((1, 4, 3, 3)).astype(np.float32),
                               "w": RNG.standard_normal((4, 3, 2, 3)).astype(np.float32)})


def test_an_output_shape_no_input_of_this_size_gives_is_refused():
    model = graph_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[9, 9], strides=[2, 2])],
                        {"x": (1, 2, 3, 4)}, ["y"], {"w": RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)})
    with pytest.raises(litert_torch.ConversionError, match="does not follow from an input"):
        litert_torch.convert_onnx(model)


@pytest.mark.parametrize("op, attrs", [
    ("Conv", dict(pads=[1, 0, 1, 1, 2, 0], strides=[2, 1, 2])),
    ("Conv", dict(auto_pad="SAME_UPPER", strides=[1, 2, 2])),
    ("Conv", dict(pads=[2, 0, 1, 2, 0, 1], dilations=[2, 1, 2])),
    ("ConvTranspose", dict(pads=[1, 0, 0, 2, 1, 0], strides=[2, 2, 1])),
    ("ConvTranspose", dict(output_shape=[8, 9, 6], strides=[2, 2, 2])),
    ("ConvTranspose", dict(auto_pad="SAME_LOWER", strides=[2, 1, 3], dilations=[2, 1, 1])),
], ids=["conv-asymmetric", "conv-same", "conv-dilated", "transpose-asymmetric", "transpose-output-shape",
        "transpose-same-dilated"])
def test_three_dimensional_convolution(op, attrs):
    """3-D Conv and ConvTranspose run as one 2-D convolution per depth tap of the kernel."""
    w = RNG.standard_normal((2, 3, 3, 2, 3)).astype(np.float32)
    b = RNG.standard_normal(3 if op == "ConvTranspose" else 2).astype(np.float32)
    if op == "Conv":
        w = RNG.standard_normal((2, 2, 3, 2, 3)).astype(np.float32)
    model = graph_model([helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)], {"x": (1, 2, 4, 5, 3)},
                        ["y"], {"w": w, "b": b})
    assert_matches_ort(model, {"x": RNG.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)})
