"""Building small ONNX graphs and comparing a converted model with ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import litert_torch

OPSET = 18
TYPES = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL,
         np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int16: TensorProto.INT16,
         np.int32: TensorProto.INT32}


def graph_model(nodes, inputs: dict[str, tuple], outputs, initializers: dict[str, np.ndarray] | None = None,
                opset: int = OPSET, dtypes: dict[str, type] | None = None) -> onnx.ModelProto:
    """A model from nodes; inputs {name: shape} (float32 unless `dtypes` says), outputs by name (types inferred)
    or {name: shape} (float32, for ops shape inference cannot see through)."""
    dtypes = dtypes or {}
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TYPES[dtypes.get(n, np.float32)], list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(outputs[n])) if isinstance(outputs, dict)
         else helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), name=k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    # the graph as written, as `validate` runs it: ONNX Runtime's fusions may compute a graph differently from
    # what ONNX defines (in 1.31 and 1.32 its full optimization level gives other numbers for a QDQ MatMul)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_matches_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol=1e-4, atol=1e-5, **convert):
    edge = litert_torch.convert_onnx(model, **convert)
    expected = run_ort(model, feeds)
    got = edge(*feeds.values())
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = np.asarray(g)
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype.kind == "f":
            err = float(np.abs(g.astype(np.float64) - e).max()) if e.size else 0.0
            assert err <= rtol * (float(np.abs(e).max()) if e.size else 0.0) + atol, f"max|err| {err:.3e}"
        else:
            assert np.array_equal(g.astype(e.dtype), e)
    return edge
