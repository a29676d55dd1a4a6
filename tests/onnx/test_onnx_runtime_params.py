"""Shape parameters fed when the model runs (Reshape targets, reduction axes, Slice bounds, pads, split sizes,
repeats, Expand shapes, Squeeze/Unsqueeze axes): one converted model, run with several parameter values, each
compared with ONNX Runtime; the output's shape is decided by the values each time."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import litert_torch
from tests.onnx.helpers import run_ort

RNG = np.random.default_rng(7)


def _model(op: str, x_shape, params: dict[str, tuple | None], attrs=None, n_out=1, rank=None):
    """One `op` node over a float32 x and int64 parameter inputs (name -> shape; None for an omitted input)."""
    names = ["x", *[n if s is not None else "" for n, s in params.items()]]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **(attrs or {}))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, list(s)) for n, s in params.items() if s is not None]
    return _graph([node], inputs, [f"y{i}" for i in range(n_out)], len(x_shape) if rank is None else rank)


def _graph(nodes, inputs, outputs, rank: int):
    """Outputs declared float32 of `rank` unnamed sizes: the parameters' values decide them."""
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None] * rank)
                                                   for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _check(model, x: np.ndarray, cases: list[dict]):
    edge = litert_torch.convert_onnx(model)
    for params in cases:
        feeds = {"x": x, **{k: np.asarray(v, np.int64) for k, v in params.items()}}
        expected = run_ort(model, feeds)
        got = edge(**feeds)
        got = list(got.values()) if isinstance(got, dict) else list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            g = np.asarray(g)
            assert g.shape == e.shape, (params, g.shape, e.shape)
            np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-5, atol=1e-6,
                                       err_msg=str(params))
    return edge


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_over_axes_given_at_run_time(op, keepdims):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    model = _model(op, x.shape, {"axes": (2,)}, {"keepdims": keepdims}, rank=3 if keepdims else 1)
    _check(model, x, [{"axes": [0, 2]}, {"axes": [-1, 1]}, {"axes": [1, 0]}])


def test_a_run_time_reduction_feeds_a_broadcast_and_another_reduction():
    """log-sum-exp with run-time axes: the reduced sizes (1 or the input's, known only then) meet the input's."""
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["m"], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Exp", ["d"], ["e"]),
             helper.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=1),
             helper.make_node("Log", ["s"], ["l"]),
             helper.make_node("Add", ["l", "m"], ["y"])]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5]),
                           helper.make_tensor_value_info("axes", TensorProto.INT64, [1])], ["y"], 3)
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    _check(model, x, [{"axes": [a]} for a in (0, 1, 2, -1)])


def test_reshape_to_a_run_time_shape_with_zero_and_minus_one():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    model = _model("Reshape", x.shape, {"shape": (3,)})
    _check(model, x, [{"shape": [0, -1, 2]}, {"shape": [4, 0, 2]}, {"shape": [-1, 1, 1]}, {"shape": [2, 3, 4]}])


def test_reshape_then_a_static_reshape_reads_the_run_time_sizes():
    """A later op that needs a size decided by values reads it from the SHAPE of the reshaped tensor."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Reshape", ["x", "s"], ["y"])]
    model = _graph(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])], ["y"], 2)
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    _check(model, x, [{"shape": [3, 4]}, {"shape": [12, 1]}, {"shape": [-1, 6]}])


def test_squeeze_and_unsqueeze_by_run_time_axes():
    x = RNG.standard_normal((1, 3, 1, 4)).astype(np.float32)
    _check(_model("Squeeze", x.shape, {"axes": (1,)}, rank=3), x, [{"axes": [0]}, {"axes": [2]}, {"axes": [-2]}])
    _check(_model("Squeeze", x.shape, {"axes": (2,)}, rank=2), x, [{"axes": [0, 2]}, {"axes": [2, -4]}])
    y = RNG.standard_normal((3, 4)).astype(np.float32)
    _check(_model("Unsqueeze", y.shape, {"axes": (2,)}, rank=4), y, [{"axes": [0, 3]}, {"axes": [1, -1]}, {"axes": [2, 0]}])


def test_slice_with_run_time_bounds_steps_and_axes():
    x = RNG.standard_normal((5, 6, 4)).astype(np.float32)
    model = _model("Slice", x.shape, {"starts": (2,), "ends": (2,), "axes": (2,), "steps": (2,)})
    _check(model, x, [
        {"starts": [1, 0], "ends": [4, 6], "axes": [0, 1], "steps": [1, 2]},
        {"starts": [-1, 3], "ends": [-10, 1], "axes": [1, 2], "steps": [-2, -1]},  # backwards, clamped to -1
        {"starts": [0, 10], "ends": [100, 20], "axes": [-3, 1], "steps": [1, 1]},  # past the end: empty
        {"starts": [2, -3], "ends": [2, -1], "axes": [2, 1], "steps": [1, 1]},
    ])
    only_bounds = _model("Slice", x.shape, {"starts": (1,), "ends": (1,)})
    _check(only_bounds, x, [{"starts": [1], "ends": [3]}, {"starts": [-2], "ends": [1000]}])


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_by_run_time_pads_including_negative_ones(mode):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    model = _model("Pad", x.shape, {"pads": (6,)}, {"mode": mode})
    _check(model, x, [{"pads": [0, 1, 2, 0, 2, 1]}, {"pads": [1, -1, 0, -1, 1, 2]}, {"pads": [0] * 6},
                      {"pads": [-1, 0, -2, 0, -1, 1]}])


def test_pad_over_run_time_axes():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    model = _model("Pad", x.shape, {"pads": (2,), "value": None, "axes": (1,)})
    _check(model, x, [{"pads": [1, 2], "axes": [1]}, {"pads": [2, 0], "axes": [-1]}])


def test_split_tile_and_expand_by_run_time_values():
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    _check(_model("Split", x.shape, {"split": (3,)}, {"axis": 1}, n_out=3), x,
           [{"split": [1, 2, 3]}, {"split": [0, 6, 0]}])
    _check(_model("Tile", x.shape, {"repeats": (2,)}), x, [{"repeats": [2, 1]}, {"repeats": [1, 3]}])
    v = RNG.standard_normal((3, 1)).astype(np.float32)
    _check(_model("Expand", v.shape, {"shape": (3,)}, rank=3), v, [{"shape": [2, 1, 4]}, {"shape": [1, 3, 1]},
                                                            {"shape": [2, 3, 5]}])


def test_a_run_time_parameter_of_no_static_length_is_refused_naming_the_node():
    model = _model("Reshape", (2, 3), {"shape": ("n",)}, rank=2)
    with pytest.raises(litert_torch.ConversionError, match="Reshape"):
        litert_torch.convert_onnx(model, dynamic_dims={"shape": {0: (1, 4)}})


def test_uint16_arithmetic_wraps_before_it_is_compared():
    """uint16 computes in int32: a sum, difference or product out of range wraps back at once, so a later
    comparison sees the uint16 value; the model's inputs and outputs stay uint16."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Sub", ["a", "b"], ["d"]),
             helper.make_node("Mul", ["a", "b"], ["p"]), helper.make_node("Greater", ["s", "b"], ["g"]),
             helper.make_node("Max", ["d", "p"], ["m"])]
    u16 = TensorProto.UINT16
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, u16, [6]) for n in "ab"],
                              [helper.make_tensor_value_info("s", u16, [6]), helper.make_tensor_value_info("g", TensorProto.BOOL, [6]),
                               helper.make_tensor_value_info("m", u16, [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    a = np.array([60000, 3, 300, 65535, 0, 1000], np.uint16)
    b = np.array([10000, 5, 300, 1, 0, 64], np.uint16)
    edge = litert_torch.convert_onnx(model)
    got = edge(a, b)
    got = list(got.values()) if isinstance(got, dict) else list(got)
    from onnx.reference import ReferenceEvaluator  # ONNX Runtime has no uint16 Max

    for g, e in zip(got, ReferenceEvaluator(model).run(None, {"a": a, "b": b})):
        assert np.asarray(g).dtype == e.dtype
        np.testing.assert_array_equal(np.asarray(g), e)


def _binary_model(op: str, elem, out_elem, n: int):
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info(v, elem, [n]) for v in "ab"],
                              [helper.make_tensor_value_info("y", out_elem, [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("op", ["Less", "GreaterOrEqual", "Max", "Min", "Add", "Mul", "Equal"])
def test_uint32_above_the_int32_range_orders_and_wraps_as_uint32(op):
    """uint32 is held as int32 bits: values of 2**31 and more (negative as int32) still compare as uint32."""
    from onnx.reference import ReferenceEvaluator

    out = TensorProto.BOOL if op in ("Less", "GreaterOrEqual", "Equal") else TensorProto.UINT32
    model = _binary_model(op, TensorProto.UINT32, out, 6)
    a = np.array([2**32 - 1, 2**31, 5, 0, 2**31 - 1, 3_000_000_000], np.uint32)
    b = np.array([1, 2**31 - 1, 2**31 + 5, 0, 2**31, 7], np.uint32)
    got = np.asarray(litert_torch.convert_onnx(model)(a, b))
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"a": a, "b": b})[0])


def test_uint32_division_is_refused():
    model = _binary_model("Div", TensorProto.UINT32, TensorProto.UINT32, 3)
    with pytest.raises(litert_torch.ConversionError, match="uint32"):
        litert_torch.convert_onnx(model)
