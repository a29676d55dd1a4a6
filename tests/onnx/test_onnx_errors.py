"""Bad ONNX input: each a clear error, nothing written — from Python and from the CLI."""

import numpy as np
import onnx
import pytest
from onnx import helper

import litert_torch
from litert_torch.errors import OnnxError
from tests.cli.test_cli import run
from tests.onnx.helpers import graph_model


def small_model():
    return graph_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (2, 3)}, ["y"])


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.onnx"
    path.write_bytes(small_model().SerializeToString()[:20])
    with pytest.raises(OnnxError, match="not a readable ONNX model"):
        litert_torch.convert_onnx(path)
    code, output = run("convert", path, "-o", tmp_path / "out.tflite")
    assert code == 2 and "not a readable ONNX model" in output
    assert not (tmp_path / "out.tflite").exists()


def test_unknown_opset():
    model = small_model()
    model.opset_import[0].version = 99
    with pytest.raises(OnnxError, match="opset 99; supported: 1 to"):
        litert_torch.convert_onnx(model)


def test_opsets_before_7_are_upgraded_too():
    """Opset 6 Add broadcasts only with its `broadcast` attribute; the upgrade turns it into numpy broadcasting."""
    model = graph_model([helper.make_node("Add", ["a", "b"], ["y"], broadcast=1)], {"a": (2, 3), "b": (3,)},
                        {"y": (2, 3)}, opset=6)
    feeds = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([10, 20, 30], np.float32)}
    np.testing.assert_array_equal(np.asarray(litert_torch.convert_onnx(model)(*feeds.values())), feeds["a"] + feeds["b"])


def test_opsets_7_to_12_are_upgraded():
    from tests.onnx.helpers import run_ort

    model = graph_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Unsqueeze", ["r"], ["y"],
                                                                                    axes=[0])],
                        {"x": (2, 3)}, ["y"], opset=11)  # Unsqueeze's axes are an attribute before opset 13
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    edge = litert_torch.convert_onnx(model)
    np.testing.assert_array_equal(np.asarray(edge(x)), run_ort(model, {"x": x})[0])


def test_unsupported_ops_are_listed_at_once():
    model = graph_model([helper.make_node("RoiAlign", ["x", "rois", "i"], ["d"]),
                         helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonMaxSuppression", ["b", "s"], ["n"])],
                        {"x": (1, 1, 3, 3), "rois": (1, 4), "i": (1,), "b": (1, 4, 4), "s": (1, 1, 4)},
                        ["d", "r", "n"], dtypes={"i": np.int64})
    with pytest.raises(litert_torch.UnsupportedOpsError) as info:
        litert_torch.convert_onnx(model)
    text = str(info.value)
    assert "onnx::RoiAlign" in text and "onnx::NonMaxSuppression" in text and "2 unsupported ops" in text


def test_missing_external_data(tmp_path):
    model = graph_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": (2, 64)}, ["y"],
                        {"w": np.ones((64, 64), np.float32)})
    onnx.save_model(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(OnnxError, match="external data files that are missing.*weights.bin"):
        litert_torch.convert_onnx(tmp_path / "ext.onnx")


def test_dynamic_dimensions_need_shapes(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(OnnxError, match=r"dynamic dimensions \['batch'\].*input_shapes"):
        litert_torch.convert_onnx(model)
    edge = litert_torch.convert_onnx(model, input_shapes={"x": (4, 3)})
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    assert np.array_equal(np.asarray(edge(x)), np.maximum(x, 0))
    path = tmp_path / "dyn.onnx"
    onnx.save_model(model, path)
    code, output = run("convert", path, "-o", tmp_path / "dyn.tflite")
    assert code == 2 and "--input x=" in output
    code, output = run("convert", path, "-o", tmp_path / "dyn.tflite", "--input", "x=4x3", "--validate")
    assert code == 0 and "onnxruntime-cpu" in output and "validation: PASS" in output
    code, output = run("convert", path, "-o", tmp_path / "dyn.tflite", "--force", "--dynamic", "x:0=batch:8")
    assert code == 0, output
    loaded = litert_torch.EdgeModel.load(tmp_path / "dyn.tflite")
    for batch in (1, 6):
        x = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
        assert np.array_equal(np.asarray(loaded(x)), np.maximum(x, 0))


def test_dynamic_dimensions_stay_dynamic_when_asked():
    from tests.onnx.helpers import run_ort

    w = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
         helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["r", "s5"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "seq", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [None, 5])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.array([-1, 5], np.int64), "s5")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    edge = litert_torch.convert_onnx(model, dynamic_dims={"x": {0: 4, 1: 32}})
    for batch, seq in ((1, 1), (2, 7), (4, 32)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, 3)).astype(np.float32)
        (expected,) = run_ort(model, {"x": x})
        np.testing.assert_allclose(np.asarray(edge(x)), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(OnnxError, match="not inputs of the model"):
        litert_torch.convert_onnx(model, dynamic_dims={"z": {0: 4}})


def test_onnx_models_take_the_same_quantization_options():
    w = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32)
    model = graph_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                        {"x": (2, 64)}, ["y"], {"w": w})
    float_edge = litert_torch.convert_onnx(model)
    edge = litert_torch.convert_onnx(model, quantize="dynamic-int8")
    assert edge.quantization.mode == "dynamic-int8"
    assert len(float_edge.flatbuffer) / len(edge.flatbuffer) > 2.5
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    expected = np.maximum(x @ w, 0)
    assert np.abs(np.asarray(edge(x)) - expected).max() <= 0.1 * np.abs(expected).max()
    assert all(entry["target"].startswith("onnx::") for entry in edge.source_map if entry)
