"""ONNX ops whose result size the input's values decide: NonZero and Compress, on run-time inputs."""

from __future__ import annotations

import numpy as np
from onnx import helper

import litert_torch

from tests.helpers import op_counts
from tests.onnx.helpers import graph_model, run_ort


def _feeds(seed: int, fraction: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    return {"x": x, "c": rng.random(5) < fraction}


def _compare(edge, model, feeds):
    expected = run_ort(model, feeds)
    got = edge(*feeds.values())
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    for g, e in zip(got, expected):
        assert np.asarray(g).shape == e.shape
        np.testing.assert_allclose(np.asarray(g).astype(e.dtype), e, rtol=1e-6, atol=1e-6)


def test_nonzero_and_compress_at_every_count():
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["positive"]),
        helper.make_node("NonZero", ["positive"], ["where"]),
        helper.make_node("Compress", ["x", "c"], ["columns"], axis=1),
        helper.make_node("Compress", ["x", "c"], ["flat"]),
        helper.make_node("Softmax", ["columns"], ["normalised"], axis=1),
        helper.make_node("ReduceSum", ["columns"], ["sums"], keepdims=0),
    ]
    model = graph_model(nodes, {"x": (4, 5), "c": (5,)}, ["where", "columns", "flat", "normalised", "sums"],
                        {"zero": np.array(0.0, np.float32)}, dtypes={"c": np.bool_})
    edge = litert_torch.convert_onnx(model)
    for seed, fraction in enumerate((0.0, 1.0, 0.5, 0.0, 0.3)):
        for kernels in ("xnnpack", "builtin"):
            _compare(edge.with_kernels(kernels), model, _feeds(seed, fraction))


def test_nonzero_of_a_constant_is_still_folded():
    nodes = [helper.make_node("NonZero", ["k"], ["where"]), helper.make_node("Cast", ["where"], ["f"], to=1),
             helper.make_node("ReduceSum", ["f"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"])]
    model = graph_model(nodes, {"x": (1,)}, ["y"], {"k": np.array([[0, 1], [2, 0]], np.int64)})
    edge = litert_torch.convert_onnx(model)
    feeds = {"x": np.array([0.5], np.float32)}
    _compare(edge, model, feeds)
    assert "WHERE" not in op_counts(edge)
