"""ONNX op rows: hand-built graphs (ops the exporters do not emit, and their attribute forms) converted and
compared with ONNX Runtime."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

import litert_torch
from tests.helpers import op_counts
from tests.onnx.helpers import assert_matches_ort, graph_model

rng = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded():
    """Each test draws its random inputs from the same start, whichever tests ran before it in its worker."""
    global rng
    rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


CASES = {
    "resize_nearest_asymmetric_floor": (
        [node("Resize", ["x", "", "scales"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
              nearest_mode="floor")],
        {"x": (1, 3, 5, 6)}, {"scales": np.array([1, 1, 2, 2], np.float32)}),
    "resize_linear_half_pixel": (
        [node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", coordinate_transformation_mode="half_pixel")],
        {"x": (1, 2, 4, 5)}, {"sizes": np.array([1, 2, 8, 10], np.int64)}),
    "resize_linear_align_corners": (
        [node("Resize", ["x", "", "scales"], ["y"], mode="linear", coordinate_transformation_mode="align_corners")],
        {"x": (1, 2, 4, 4)}, {"scales": np.array([1, 1, 2, 2], np.float32)}),
    "gather_elements": (
        [node("GatherElements", ["x", "idx"], ["y"], axis=1)],
        {"x": (3, 5)}, {"idx": rng.integers(0, 5, (3, 4)).astype(np.int64)}),
    "einsum_batched_matmul": ([node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
                              {"a": (2, 3, 4), "b": (2, 4, 5)}, {}),
    "einsum_attention_scores": ([node("Einsum", ["q", "k"], ["y"], equation="bhqd,bhkd->bhqk")],
                                {"q": (1, 2, 5, 8), "k": (1, 2, 6, 8)}, {}),
    "einsum_outer_transpose": ([node("Einsum", ["a", "b"], ["y"], equation="ij,kj->ki")],
                               {"a": (3, 4), "b": (5, 4)}, {}),
    "einsum_implicit_output": ([node("Einsum", ["a", "b"], ["y"], equation="kj,ji")], {"a": (3, 4), "b": (4, 5)}, {}),
    "einsum_one_operand_sum_and_transpose": ([node("Einsum", ["a"], ["y"], equation="ijk->ki")],
                                             {"a": (3, 4, 5)}, {}),
    "einsum_sum_out_of_one_operand": ([node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bk")],
                                      {"a": (2, 3, 4), "b": (2, 4, 5)}, {}),
    "einsum_to_a_scalar": ([node("Einsum", ["a", "b"], ["y"], equation="ij,ij->")], {"a": (3, 4), "b": (3, 4)}, {}),
    "expand": ([node("Expand", ["x", "shape"], ["y"])], {"x": (3, 1)},
               {"shape": np.array([2, 3, 4], np.int64)}),
    "where": ([node("Greater", ["x", "zero"], ["c"]), node("Where", ["c", "x", "y0"], ["y"])],
              {"x": (4, 5), "y0": (4, 5)}, {"zero": np.array(0.0, np.float32)}),
    "instance_norm": ([node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)],
                      {"x": (2, 3, 6, 6)}, {"s": r(3), "b": r(3)}),
    "layer_norm_last_axis": ([node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, epsilon=1e-5)],
                             {"x": (2, 7, 16)}, {"s": r(16), "b": r(16)}),
    "gelu_tanh": ([node("Gelu", ["x"], ["y"], approximate="tanh")], {"x": (4, 9)}, {}, 20),
    "gelu_exact": ([node("Gelu", ["x"], ["y"])], {"x": (4, 9)}, {}, 20),
    "conv_transpose_output_padding": (
        [node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])],
        {"x": (1, 4, 5, 5)}, {"w": r(4, 3, 3, 3), "b": r(3)}),
    "conv_asymmetric_pads": ([node("Conv", ["x", "w"], ["y"], pads=[0, 1, 1, 0], strides=[2, 2])],
                             {"x": (1, 3, 8, 8)}, {"w": r(4, 3, 3, 3)}),
    "conv_same_upper": ([node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])],
                        {"x": (1, 3, 7, 7)}, {"w": r(4, 3, 3, 3)}),
    "gemm_trans_b_alpha_beta": ([node("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
                                {"a": (3, 6)}, {"w": r(4, 6), "c": r(4)}),
    "slice_steps_negative_axes": ([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": (4, 10, 6)},
                                  {"st": np.array([1, -5], np.int64), "en": np.array([10, -1], np.int64),
                                   "ax": np.array([1, -1], np.int64), "sp": np.array([2, 1], np.int64)}),
    "pad_reflect": ([node("Pad", ["x", "pads"], ["y"], mode="reflect")], {"x": (1, 2, 5, 5)},
                    {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}),
    "pad_constant_axes": ([node("Pad", ["x", "pads", "value", "axes"], ["y"])], {"x": (2, 3, 4)},
                          {"pads": np.array([1, 0, 2, 3], np.int64), "value": np.array(1.5, np.float32),
                           "axes": np.array([-1, 0], np.int64)}, 18),
    "pad_wrap": ([node("Pad", ["x", "pads"], ["y"], mode="wrap")], {"x": (1, 2, 4, 5)},
                 {"pads": np.array([0, 0, 1, 2, 0, 0, 3, 1], np.int64)}, 19),
    "split_unequal": ([node("Split", ["x", "sizes"], ["a", "b"], axis=1)], {"x": (2, 7)},
                      {"sizes": np.array([3, 4], np.int64)}),
    "reduce_mean_axes_input": ([node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)], {"x": (2, 3, 4)},
                               {"axes": np.array([1], np.int64)}),
    "hard_sigmoid_custom": ([node("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4)], {"x": (3, 8)}, {}),
    "clip_relu6": ([node("Clip", ["x", "lo", "hi"], ["y"])], {"x": (3, 8)},
                   {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}),
    "is_nan_to_zero": ([node("Div", ["x", "x"], ["q"]), node("IsNaN", ["q"], ["m"]),
                        node("Where", ["m", "zero", "q"], ["y"])], {"x": (3, 4)},
                       {"zero": np.array(0.0, np.float32)}),
    "depth_to_space_crd": ([node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")], {"x": (1, 8, 3, 3)}, {}),
    "depth_to_space_dcr": ([node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="DCR")], {"x": (2, 12, 3, 4)}, {}),
    "trilu_upper_k1": ([node("Trilu", ["x", "k"], ["y"], upper=1)], {"x": (2, 4, 5)}, {"k": np.array(1, np.int64)}),
    "cast_like": ([node("CastLike", ["x", "half"], ["y"])], {"x": (3, 4)}, {"half": np.zeros(1, np.float16)}),
    "mod_fmod0_float_to_int": ([node("Cast", ["x"], ["i"], to=7), node("Mod", ["i", "three"], ["y"])],
                               {"x": (3, 4)}, {"three": np.array(3, np.int64)}),
}


def feeds_for(inputs, seed=1):
    g = np.random.default_rng(seed)
    return {k: g.standard_normal(s).astype(np.float32) for k, s in inputs.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(case):
    nodes, inputs, inits, *opset = CASES[case]
    outputs = [o for o in nodes[-1].output]
    model = graph_model(nodes, inputs, outputs, inits, *(opset or []))
    feeds = feeds_for(inputs)
    if case == "is_nan_to_zero":
        feeds["x"][0, 0] = 0.0  # 0/0 is NaN
    assert_matches_ort(model, feeds)


def _rnn(op, direction, layout=0, hidden=5, features=4, seq=6, batch=2, lbr=None):
    dirs = 2 if direction == "bidirectional" else 1
    gates = 4 if op == "LSTM" else 3
    attrs = dict(hidden_size=hidden, direction=direction, layout=layout)
    if lbr is not None:
        attrs["linear_before_reset"] = lbr
    outs = ["Y", "Y_h"]
    nodes = [node(op, ["x", "w", "r", "b"], outs, **attrs)]
    inits = {"w": r(dirs, gates * hidden, features) * 0.5, "r": r(dirs, gates * hidden, hidden) * 0.5,
             "b": r(dirs, 2 * gates * hidden) * 0.5}
    shape = (seq, batch, features) if layout == 0 else (batch, seq, features)
    return graph_model(nodes, {"x": shape}, outs, inits), {"x": r(*shape)}


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_matches_onnxruntime(direction):
    model, feeds = _rnn("LSTM", direction)
    edge = assert_matches_ort(model, feeds)
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" not in op_counts(edge)  # unrolled for the default GPU/NPU targets


@pytest.mark.parametrize("direction, lbr", [("forward", 1), ("forward", 0), ("bidirectional", 1), ("reverse", 0)])
def test_gru_matches_onnxruntime(direction, lbr):
    model, feeds = _rnn("GRU", direction, lbr=lbr)
    assert_matches_ort(model, feeds)


# ---- one row per remaining op, so that every registered ONNX lowering is checked against ONNX Runtime -------
POSITIVE = {"Log", "Sqrt", "Reciprocal"}
UNARY = ["Abs", "Ceil", "Cos", "Erf", "Exp", "Floor", "HardSwish", "Log", "Neg", "Reciprocal", "Relu", "Round", "Sigmoid",
         "Sign", "Sin", "Sqrt", "Tanh", "Identity", "Elu", "LeakyRelu", "Softmax", "LogSoftmax"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow"]
COMPARE = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]


@pytest.mark.parametrize("op", UNARY)
def test_unary_op(op):
    model = graph_model([node(op, ["x"], ["y"])], {"x": (3, 7)}, ["y"])
    x = feeds_for({"x": (3, 7)})["x"] * 3
    assert_matches_ort(model, {"x": np.abs(x) + 0.1 if op in POSITIVE else x})


@pytest.mark.parametrize("op", BINARY)
def test_binary_op(op):
    model = graph_model([node(op, ["a", "b"], ["y"])], {"a": (2, 3, 4), "b": (3, 1)}, ["y"])
    feeds = feeds_for({"a": (2, 3, 4), "b": (3, 1)})
    if op == "Pow":
        feeds["a"] = np.abs(feeds["a"]) + 0.5
    assert_matches_ort(model, feeds)


@pytest.mark.parametrize("op", COMPARE)
def test_comparison_and_logic(op):
    nodes = [node(op, ["a", "b"], ["c"]), node("Greater", ["a", "zero"], ["p"]), node("And", ["c", "p"], ["d"]),
             node("Or", ["d", "p"], ["e"]), node("Not", ["e"], ["y"])]
    model = graph_model(nodes, {"a": (4, 5), "b": (4, 5)}, ["y"], {"zero": np.array(0.0, np.float32)})
    feeds = feeds_for({"a": (4, 5), "b": (4, 5)})
    feeds["b"][0] = feeds["a"][0]  # some equal pairs
    assert_matches_ort(model, feeds)


SHAPE_ROWS = {
    "Reshape": ([node("Reshape", ["x", "s"], ["y"])], {"x": (2, 3, 4)}, {"s": np.array([6, -1], np.int64)}),
    "Flatten": ([node("Flatten", ["x"], ["y"], axis=2)], {"x": (2, 3, 4)}, {}),
    "Squeeze": ([node("Squeeze", ["x", "ax"], ["y"])], {"x": (2, 1, 4)}, {"ax": np.array([1], np.int64)}),
    "Unsqueeze": ([node("Unsqueeze", ["x", "ax"], ["y"])], {"x": (2, 4)}, {"ax": np.array([0, 3], np.int64)}),
    "Transpose": ([node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], {"x": (2, 3, 4)}, {}),
    "Concat": ([node("Concat", ["x", "c"], ["y"], axis=1)], {"x": (2, 3)}, {"c": r(2, 2)}),
    "Tile": ([node("Tile", ["x", "t"], ["y"])], {"x": (2, 3)}, {"t": np.array([2, 1], np.int64)}),
    "Gather": ([node("Gather", ["x", "i"], ["y"], axis=1)], {"x": (3, 6)}, {"i": np.array([[0, 5], [-1, 2]],
                                                                                          np.int64)}),
    "Cast": ([node("Cast", ["x"], ["i"], to=7), node("Cast", ["i"], ["y"], to=1)], {"x": (3, 4)}, {}),
    "ArgMax": ([node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)], {"x": (3, 7)}, {}),
    "ArgMin": ([node("ArgMin", ["x"], ["y"], axis=0, keepdims=1)], {"x": (3, 7)}, {}),
    "ReduceSum": ([node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)], {"x": (2, 3, 4)},
                  {"ax": np.array([0, 2], np.int64)}),
    "ReduceMax": ([node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)], {"x": (2, 3, 4)}, {}, 17),
    "ReduceMin": ([node("ReduceMin", ["x"], ["y"], keepdims=0)], {"x": (2, 3, 4)}, {}, 17),
    "MatMul": ([node("MatMul", ["x", "w"], ["y"])], {"x": (2, 5, 6)}, {"w": r(6, 3)}),
    "BatchNormalization": ([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": (2, 3, 4, 4)},
                           {"s": r(3), "b": r(3), "m": r(3), "v": np.abs(r(3)) + 0.5}),
    "GroupNormalization": ([node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], {"x": (2, 4, 5)},
                           {"s": r(4), "b": r(4)}, 21),
    "MaxPool": ([node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                {"x": (1, 3, 8, 8)}, {}),
    "AveragePool": ([node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {"x": (1, 3, 8, 8)},
                    {}),
    "LpPool": ([node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], p=2)], {"x": (1, 3, 8, 8)}, {}),
    "GlobalAveragePool": ([node("GlobalAveragePool", ["x"], ["y"])], {"x": (1, 3, 5, 5)}, {}),
    "GlobalMaxPool": ([node("GlobalMaxPool", ["x"], ["y"])], {"x": (1, 3, 5, 5)}, {}),
    "PRelu": ([node("PRelu", ["x", "s"], ["y"])], {"x": (1, 3, 4, 4)}, {"s": r(3, 1, 1)}),
    "IsInf": ([node("Div", ["x", "z"], ["q"]), node("IsInf", ["q"], ["m"]), node("Where", ["m", "z", "q"], ["y"])],
              {"x": (3, 4)}, {"z": np.array(0.0, np.float32)}),
    "Dropout": ([node("Dropout", ["x"], ["y"])], {"x": (3, 4)}, {}),
}


@pytest.mark.parametrize("op", sorted(SHAPE_ROWS))
def test_shape_and_layer_rows(op):
    nodes, inputs, inits, *opset = SHAPE_ROWS[op]
    outputs = {"y": inputs["x"]} if op == "GroupNormalization" else [nodes[-1].output[0]]
    model = graph_model(nodes, inputs, outputs, inits, *(opset or []))
    assert_matches_ort(model, feeds_for(inputs))


def i64(*values):
    return np.array(values, np.int64)


# op rows of lower/onnx/math_ops.py: (nodes, inputs {name: shape}, initializers, opset, how the feed is drawn)
MATH_ROWS = {
    "Acos": ([node("Acos", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "unit"),
    "Asin": ([node("Asin", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "unit"),
    "Atan": ([node("Atan", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "wide"),
    "Acosh": ([node("Acosh", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "above-one"),
    "Asinh": ([node("Asinh", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "wide"),
    "Atanh": ([node("Atanh", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "unit"),
    "Tan": ([node("Tan", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "unit"),
    "Sinh": ([node("Sinh", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "normal"),
    "Cosh": ([node("Cosh", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "normal"),
    "Softplus": ([node("Softplus", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "wide"),
    "Softsign": ([node("Softsign", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "wide"),
    "Swish": ([node("Swish", ["x"], ["y"], alpha=0.7)], {"x": (3, 7)}, {}, 24, "wide"),
    "Mish": ([node("Mish", ["x"], ["y"])], {"x": (3, 7)}, {}, 18, "wide"),
    "Selu": ([node("Selu", ["x"], ["y"], alpha=1.5, gamma=2.0)], {"x": (3, 7)}, {}, 18, "normal"),
    "Celu": ([node("Celu", ["x"], ["y"], alpha=0.5)], {"x": (3, 7)}, {}, 18, "normal"),
    "ThresholdedRelu": ([node("ThresholdedRelu", ["x"], ["y"], alpha=0.3)], {"x": (3, 7)}, {}, 18, "normal"),
    "Shrink": ([node("Shrink", ["x"], ["y"], lambd=0.4, bias=0.2)], {"x": (3, 7)}, {}, 18, "normal"),
    "Xor": ([node("Greater", ["a", "z"], ["p"]), node("Greater", ["b", "z"], ["q"]), node("Xor", ["p", "q"], ["y"])],
            {"a": (3, 4), "b": (4,)}, {"z": np.array(0.0, np.float32)}, 18, "normal"),
    "Mean": ([node("Mean", ["a", "b", "c"], ["y"])], {"a": (3, 4), "b": (4,), "c": (3, 1)}, {}, 18, "normal"),
    "ReduceL1": ([node("ReduceL1", ["x", "ax"], ["y"], keepdims=0)], {"x": (2, 3, 4)}, {"ax": i64(0, -1)}, 18,
                 "normal"),
    "ReduceL2": ([node("ReduceL2", ["x"], ["y"])], {"x": (2, 3, 4)}, {}, 18, "normal"),
    "ReduceSumSquare": ([node("ReduceSumSquare", ["x", "ax"], ["y"])], {"x": (2, 3, 4)}, {"ax": i64(1)}, 18,
                        "normal"),
    "ReduceLogSum": ([node("ReduceLogSum", ["x", "ax"], ["y"], keepdims=0)], {"x": (2, 3, 4)}, {"ax": i64(2)}, 18,
                     "positive"),
    "ReduceLogSumExp": ([node("ReduceLogSumExp", ["x", "ax"], ["y"], keepdims=0)], {"x": (2, 3, 4)},
                        {"ax": i64(0, 2)}, 18, "huge"),
    "ReduceProd": ([node("ReduceProd", ["x", "ax"], ["y"])], {"x": (2, 3, 4)}, {"ax": i64(1, 2)}, 18, "normal"),
    "CumSum": ([node("CumSum", ["x", "ax"], ["y"], exclusive=1, reverse=1)], {"x": (3, 5)},
               {"ax": np.array(1, np.int32)}, 18, "normal"),
    "CumProd": ([node("CumProd", ["x", "ax"], ["y"], exclusive=1)], {"x": (3, 7)},
                {"ax": np.array(-1, np.int64)}, 26, "normal"),
    "TopK": ([node("TopK", ["x", "k"], ["y", "i"], axis=0, largest=0)], {"x": (6, 3)}, {"k": i64(4)}, 18,
             "ties"),
    "Hardmax": ([node("Hardmax", ["x"], ["y"], axis=1)], {"x": (3, 4, 2)}, {}, 18, "ties"),
    "LpNormalization": ([node("LpNormalization", ["x"], ["y"], axis=1, p=1)], {"x": (3, 4)}, {}, 18, "zero-row"),
    "SpaceToDepth": ([node("SpaceToDepth", ["x"], ["y"], blocksize=2)], {"x": (1, 3, 4, 6)}, {}, 18, "normal"),
    "ScatterElements": ([node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="add")], {"x": (3, 5)},
                        {"i": np.array([[0, -1, 2], [4, 4, 1], [3, 0, -2]], np.int64), "u": r(3, 3)}, 18, "normal"),
    "NegativeLogLikelihoodLoss": (
        [node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ["y"], reduction="mean", ignore_index=1)], {"x": (3, 4, 5)},
        {"t": np.random.default_rng(5).integers(0, 4, (3, 5)).astype(np.int64), "w": np.abs(r(4)) + 0.1}, 18, "normal"),
    "SoftmaxCrossEntropyLoss": (
        [node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y", "log_prob"], reduction="none")], {"x": (2, 4, 3, 2, 2)},
        {"t": np.random.default_rng(6).integers(0, 4, (2, 3, 2, 2)).astype(np.int64)}, 18, "normal"),
    "ScatterND": ([node("ScatterND", ["x", "i", "u"], ["y"])], {"x": (4, 3, 2)},
                  {"i": np.array([[[2], [0]], [[-1], [1]]], np.int64), "u": r(2, 2, 3, 2)}, 18, "normal"),
    "Det": ([node("Det", ["x"], ["y"])], {"x": (2, 3, 4, 4)}, {}, 18, "normal"),
    "LRN": ([node("LRN", ["x"], ["y"], size=5, alpha=0.02, beta=0.6, bias=1.5)], {"x": (2, 7, 3, 3)}, {}, 18,
            "normal"),
    "HannWindow": ([node("HannWindow", ["n"], ["w"], periodic=0), node("Mul", ["x", "w"], ["y"])], {"x": (3, 10)},
                   {"n": np.array(10, np.int64)}, 18, "normal"),
    "HammingWindow": ([node("HammingWindow", ["n"], ["w"]), node("Mul", ["x", "w"], ["y"])], {"x": (3, 10)},
                      {"n": np.array(10, np.int64)}, 18, "normal"),
    "BlackmanWindow": ([node("BlackmanWindow", ["n"], ["w"]), node("Mul", ["x", "w"], ["y"])], {"x": (3, 10)},
                       {"n": np.array(10, np.int64)}, 18, "normal"),
    "QuantizeLinear": ([node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
                        node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)], {"x": (2, 3, 4)},
                       {"s": np.array([0.01, 0.02, 0.05], np.float32), "z": np.array([0, 10, -5], np.int8)}, 18,
                       "wide"),
    "DequantizeLinear": ([node("QuantizeLinear", ["x", "s", "z"], ["q"]), node("DequantizeLinear", ["q", "s", "z"],
                                                                                ["y"])],
                         {"x": (3, 5)}, {"s": np.array(0.1, np.float32), "z": np.array(128, np.uint8)}, 18, "wide"),
    "DynamicQuantizeLinear": ([node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
                               node("DequantizeLinear", ["q", "s", "z"], ["y"])], {"x": (3, 5)}, {}, 18, "normal"),
}


def test_quantize_linear_saturates_rounds_half_to_even_and_blocks():
    """Values past the type's range saturate, halves round to even, and a blocked scale (opset 21) covers
    `block_size` elements each, as onnx's reference computes."""
    from onnx.reference import ReferenceEvaluator

    x = np.array([[-300.0, -1.5, -0.5, 0.5, 1.5, 2.5, 126.6, 400.0]], np.float32)
    nodes = [node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=3)]
    model = graph_model(nodes, {"x": x.shape}, ["y"], {"s": np.array([[1.0, 0.5, 2.0]], np.float32),
                                                      "z": np.array([[0, 3, -1]], np.int8)}, opset=21)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(litert_torch.convert_onnx(model)(x), want)


def test_gather_nd_one_hot_and_eye_like_match_onnxruntime():
    idx = np.array([[[1, -1], [0, 2]], [[-2, 0], [1, 1]]], np.int64)
    assert_matches_ort(graph_model([node("GatherND", ["x", "i"], ["y"])], {"x": (2, 3, 4)}, ["y"], {"i": idx}),
                       {"x": r(2, 3, 4)})
    batch = np.array([[[2], [0]], [[-1], [1]]], np.int64)
    assert_matches_ort(graph_model([node("GatherND", ["x", "i"], ["y"], batch_dims=1)], {"x": (2, 3, 4)}, ["y"],
                                   {"i": batch}), {"x": r(2, 3, 4)})
    hot = graph_model([node("OneHot", ["i", "d", "v"], ["y"], axis=1)], {"i": (2, 3)}, ["y"],
                      {"d": np.array(5, np.int64), "v": np.array([-1.0, 2.0], np.float32)}, dtypes={"i": np.int64})
    assert_matches_ort(hot, {"i": np.array([[0, 4, -1], [7, -6, 2]], np.int64)})
    eye = graph_model([node("EyeLike", ["x"], ["y"], k=1)], {"x": (3, 4)}, ["y"])
    assert_matches_ort(eye, {"x": r(3, 4)})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise_ops_over_the_whole_range(op, dtype):
    info = np.iinfo(dtype)
    g = np.random.default_rng(7)
    a = g.integers(info.min, info.max, (4, 6), endpoint=True, dtype=np.int64).astype(dtype)
    b = g.integers(info.min, info.max, (6,), endpoint=True, dtype=np.int64).astype(dtype)
    a[0, :2], b[:2] = (info.min, info.max), (info.max, info.min)
    inputs = {"a": a.shape} if op == "BitwiseNot" else {"a": a.shape, "b": b.shape}
    model = graph_model([node(op, list(inputs), ["y"])], inputs, ["y"], opset=18,
                        dtypes={"a": dtype, "b": dtype})
    feeds = {"a": a} if op == "BitwiseNot" else {"a": a, "b": b}
    assert_matches_ort(model, feeds)


def _math_feed(kind, shape, g):
    x = g.standard_normal(shape).astype(np.float32)
    if kind == "zero-row":
        x[1] = 0
    return {"unit": np.tanh(x) * 0.95, "wide": x * 30, "above-one": np.abs(x) + 1.0, "positive": np.abs(x) + 0.1,
            "huge": x * 100, "ties": np.round(x)}.get(kind, x)


@pytest.mark.parametrize("op", sorted(MATH_ROWS))
def test_math_row(op):
    """The ops composed from builtins (lower/onnx/math_ops.py) against ONNX Runtime; CumProd (opset 26) and Swish
    (opset 24) against onnx's reference, which ONNX Runtime lacks."""
    nodes, inputs, inits, opset, kind = MATH_ROWS[op]
    outputs = list(nodes[-1].output)
    model = graph_model(nodes, inputs, outputs, inits, opset)
    g = np.random.default_rng(3)
    feeds = {k: _math_feed(kind, shape, g) for k, shape in inputs.items()}
    if op not in ("CumProd", "Swish"):
        assert_matches_ort(model, feeds)
        return
    from onnx.reference import ReferenceEvaluator

    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(litert_torch.convert_onnx(model)(*feeds.values()), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", ["ReduceL2", "ReduceLogSumExp", "ReduceProd"])
def test_reduction_over_axes_fed_at_run_time(op, keepdims):
    """Axes computed at run time: one converted model run with different axes gives each its own shape."""
    from onnx.reference import ReferenceEvaluator

    model = graph_model([node(op, ["x", "ax"], ["y"], keepdims=keepdims)], {"x": (2, 3, 4), "ax": (1,)},
                        {"y": ["d0", "d1", "d2"][:2 + keepdims]}, dtypes={"x": np.float32, "ax": np.int64})
    edge = litert_torch.convert_onnx(model)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 3
    for axis in (0, -1, 1):
        feeds = {"x": x, "ax": i64(axis)}
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        got = edge(*feeds.values())
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_top_k_and_cumulative_ops_with_run_time_parameters():
    """K of TopK and the scan axis of CumSum / CumProd fed when the model runs."""
    from onnx.reference import ReferenceEvaluator

    x = np.round(rng.standard_normal((4, 5)) * 2).astype(np.float32)
    model = graph_model([node("TopK", ["x", "k"], ["v", "i"], axis=1)], {"x": (4, 5), "k": (1,)}, ["v", "i"],
                        dtypes={"x": np.float32, "k": np.int64})
    edge = litert_torch.convert_onnx(model)
    for k in (1, 3, 5):
        got = edge(x, i64(k))
        for g, w in zip(got, ReferenceEvaluator(model).run(None, {"x": x, "k": i64(k)})):
            np.testing.assert_array_equal(g, w)
    for op, opset in (("CumSum", 18), ("CumProd", 26)):
        model = graph_model([node(op, ["x", "ax"], ["y"], reverse=1)], {"x": (4, 5), "ax": ()}, ["y"],
                            dtypes={"x": np.float32, "ax": np.int64}, opset=opset)
        edge = litert_torch.convert_onnx(model)
        for axis in (0, 1, -1):
            (want,) = ReferenceEvaluator(model).run(None, {"x": x, "ax": np.array(axis, np.int64)})
            np.testing.assert_allclose(edge(x, np.array(axis, np.int64)), want, rtol=1e-5)


def test_every_registered_onnx_op_has_a_row():
    from litert_torch.lower.onnx import driver  # noqa: F401 (registers every ONNX op)
    from litert_torch.lower.onnx.registry import lowered_ops

    covered = set(UNARY) | set(BINARY) | set(COMPARE) | {"And", "Or", "Not"} | set(SHAPE_ROWS)
    for nodes, *_ in CASES.values():
        covered |= {n.op_type for n in nodes}
    covered |= set(MATH_ROWS)
    # in their own tests: RMSNormalization and Attention (opset 23), CausalConvWithState (opset 27), GridSample
    # (test_onnx_resize.py)
    covered |= {"LSTM", "GRU", "RMSNormalization", "Attention", "CausalConvWithState", "GridSample"}
    # in their own tests here: GatherND, OneHot and EyeLike; the bitwise ops over each integer type
    covered |= {"GatherND", "OneHot", "EyeLike", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"}
    # NonZero and Compress on run-time inputs: test_onnx_value_sized.py
    covered |= {"NonZero", "Compress"}
    # AffineGrid: test_onnx_resize.py
    covered |= {"AffineGrid"}
    # Upsample (deprecated since opset 10) is registered for old graphs upgraded past opset 13 by
    # onnx.version_converter; it shares Resize's lowering, which the Resize rows check.
    assert set(lowered_ops()) - covered == {"Upsample"}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Greater", "Equal"])
def test_narrow_integer_elementwise_matches_onnxruntime(op, dtype):
    """ONNX's integer arithmetic on int8 / uint8 / int16 (Div truncating, overflow wrapping) runs in int32 here:
    TFLite's kernels would read those types as quantized."""
    model = graph_model([helper.make_node(op, ["a", "b"], ["y"])], {"a": (3, 5), "b": (3, 5)}, ["y"],
                        dtypes={"a": dtype, "b": dtype})
    rng = np.random.default_rng(0)
    low = 0 if dtype == np.uint8 else -120
    a = rng.integers(low, 127, (3, 5)).astype(dtype)
    b = rng.integers(1, 100, (3, 5)).astype(dtype)
    if dtype != np.uint8:
        b[0] = -b[0]  # negative divisors: Div truncates toward zero
    assert_matches_ort(model, {"a": a, "b": b})


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3], strides=[2])),
    ("MaxPool", dict(kernel_shape=[2], strides=[2], pads=[1, 1])),
    ("AveragePool", dict(kernel_shape=[3], strides=[1], pads=[1, 1])),
    ("AveragePool", dict(kernel_shape=[3], strides=[2], pads=[1, 1], count_include_pad=1)),
], ids=["max_k3s2", "max_k2s2p1", "avg_k3p1", "avg_k3s2_include_pad"])
def test_one_dimensional_pooling_matches_onnxruntime(op, attrs):
    model = graph_model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (2, 3, 11)}, ["y"])
    assert_matches_ort(model, {"x": np.random.default_rng(0).standard_normal((2, 3, 11)).astype(np.float32)})


@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel"])
def test_linear_resize_by_a_scale_that_is_not_the_size_ratio_matches_onnxruntime(coord):
    """ONNX maps output to input pixels with the given scale (1.5), TFLite's RESIZE_BILINEAR with the size
    ratio (7/5): the general gather-and-weigh form computes ONNX's."""
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 5)).astype(np.float32)
    model = graph_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear",
                                          coordinate_transformation_mode=coord)],
                        {"x": (1, 2, 4, 5)}, ["y"], {"s": np.array([1, 1, 2, 1.5], np.float32)})
    assert_matches_ort(model, {"x": x})
    model = graph_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1)],
                        {"x": (1, 2, 8, 8)}, ["y"], {"s": np.array([1, 1, 0.5, 0.5], np.float32)}, opset=18)
    assert_matches_ort(model, {"x": np.random.default_rng(4).standard_normal((1, 2, 8, 8)).astype(np.float32)})


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_takes_the_sign_onnx_says(fmod):
    model = graph_model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": (2, 4), "b": (2, 4)}, ["y"],
                        dtypes={"a": np.int64, "b": np.int64})
    a = np.array([[7, -7, 7, -7], [0, 13, -13, 5]], np.int64)
    b = np.array([[3, 3, -3, -3], [4, -5, 5, 5]], np.int64)
    assert_matches_ort(model, {"a": a, "b": b})


def test_float_fmod_is_exact():
    """fmod=1 on floats: the sign of the dividend, exact also where a - trunc(a / b) * b loses every digit (a
    quotient past 2**24), and NaN for a zero divisor."""
    model = graph_model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)], {"a": (8,), "b": (8,)}, ["y"])
    a = np.array([7.5, -7.5, 7.5, -7.5, 1e30, -3.0e9, 0.0, 5.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 7.0, 0.3, 3.0, 0.0], np.float32)
    got = litert_torch.convert_onnx(model)(a, b)
    np.testing.assert_array_equal(got, np.fmod(a, b))
    assert_matches_ort(model, {"a": a[:-1].repeat(2)[:8], "b": b[:-1].repeat(2)[:8]})


def test_cast_like_and_trilu():
    x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype(np.float32)
    like = graph_model([helper.make_node("CastLike", ["x", "t"], ["y"])], {"x": (2, 4, 5), "t": (1,)}, ["y"],
                       dtypes={"t": np.int64})
    assert_matches_ort(like, {"x": x * 10, "t": np.zeros(1, np.int64)})
    for upper, k in ((1, 0), (0, 0), (1, 2), (0, -1)):
        model = graph_model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)], {"x": (2, 4, 5)}, ["y"],
                            {"k": np.array(k, np.int64)})
        assert_matches_ort(model, {"x": x})


def test_layer_norm_statistics_rms_norm_and_run_time_clip_bounds():
    import litert_torch

    x = np.random.default_rng(1).standard_normal((2, 3, 8)).astype(np.float32)
    scale = np.random.default_rng(2).standard_normal((8,)).astype(np.float32)
    stats = graph_model([node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=-1, epsilon=1e-3)],
                        {"x": (2, 3, 8)}, ["y", "mean", "inv"], {"s": scale}, opset=18)
    assert_matches_ort(stats, {"x": x})
    rms = graph_model([node("RMSNormalization", ["x", "s"], ["y"], axis=-1, epsilon=1e-3)], {"x": (2, 3, 8)},
                      ["y"], {"s": scale}, opset=23)
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-3) * scale
    edge = litert_torch.convert_onnx(rms)
    np.testing.assert_allclose(np.asarray(edge(x)), expected, rtol=1e-5, atol=1e-6)
    clip = graph_model([node("Clip", ["x", "lo", "hi"], ["y"])], {"x": (2, 3, 8), "lo": (), "hi": ()}, ["y"])
    assert_matches_ort(clip, {"x": x, "lo": np.array(-0.5, np.float32), "hi": np.array(0.25, np.float32)})


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_with_k_known_only_at_run_time(upper):
    model = graph_model([node("Trilu", ["x", "k"], ["y"], upper=upper)], {"x": (3, 4, 5), "k": ()}, ["y"],
                        dtypes={"k": np.int64})
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    for k in (-2, 0, 3):
        assert_matches_ort(model, {"x": x, "k": np.array(k, np.int64)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_with_select_last_index_picks_the_last_tie(op):
    model = graph_model([node(op, ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)], {"x": (2, 6)}, ["y"])
    x = np.array([[1, 3, 3, 0, 3, 0], [0, 0, 2, 2, -1, -1]], np.float32)  # ties at both ends
    assert_matches_ort(model, {"x": x})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_max_pool_with_asymmetric_same_padding(auto_pad):
    model = graph_model([node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], strides=[1, 2], auto_pad=auto_pad)],
                        {"x": (1, 3, 7, 8)}, ["y"])
    x = -np.abs(np.random.default_rng(0).standard_normal((1, 3, 7, 8))).astype(np.float32)  # all below the pad's 0
    assert_matches_ort(model, {"x": x})


def test_tensors_with_no_elements_are_known_at_conversion():
    """An empty input carries no data: a ReduceSum given an empty axes input reduces every axis, and an op on an
    empty tensor returns an empty result (made when the model runs), as ONNX Runtime computes them."""
    reduce = graph_model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
                         {"x": (3, 2, 2), "axes": (0,)}, {"y": (1, 1, 1)}, dtypes={"axes": np.int64})
    assert_matches_ort(reduce, {"x": np.random.randn(3, 2, 2).astype(np.float32), "axes": np.zeros(0, np.int64)})
    relu = graph_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["x", "x"], ["z"])],
                       {"x": (2, 0, 4)}, {"y": (2, 0, 4), "z": (2, 0, 4)})
    assert_matches_ort(relu, {"x": np.zeros((2, 0, 4), np.float32)})


@pytest.mark.parametrize("kind", ["gqa_3d_past_causal_mask", "4d_softcap_window_probs", "external_cache"])
def test_attention_matches_the_onnx_reference(kind):
    """ONNX's Attention (opset 23/24) against onnx's own reference implementation, every output compared:
    heads split from 3-D inputs, grouped-query heads, a past cache and the present outputs, a boolean mask shorter
    than the keys, causal masking after the past, softcap, a sliding window, the probabilities as
    qk_matmul_output, and per-batch key counts of an external cache."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    if kind == "gqa_3d_past_causal_mask":
        attrs = dict(q_num_heads=4, kv_num_heads=2, is_causal=1)
        feeds = {"q": f(2, 3, 32), "k": f(2, 3, 16), "v": f(2, 3, 24), "mask": rng.random((3, 5)) > 0.2,
                 "past_k": f(2, 2, 4, 8), "past_v": f(2, 2, 4, 12)}
        names, outs, opset = ["q", "k", "v", "mask", "past_k", "past_v"], ["y", "present_k", "present_v"], 23
    elif kind == "4d_softcap_window_probs":
        attrs = dict(softcap=2.0, scale=0.3, qk_matmul_output_mode=3, left_window_size=2, right_window_size=1)
        feeds = {"q": f(1, 2, 5, 8), "k": f(1, 2, 6, 8), "v": f(1, 2, 6, 4), "mask": f(5, 6)}
        names, outs, opset = ["q", "k", "v", "mask"], ["y", "", "", "probs"], 25
    else:
        attrs = dict(is_causal=1)
        feeds = {"q": f(3, 2, 2, 8), "k": f(3, 2, 6, 8), "v": f(3, 2, 6, 8),
                 "nonpad": np.array([6, 3, 2], np.int64)}
        names, outs, opset = ["q", "k", "v", "", "", "", "nonpad"], ["y"], 24
    dtypes = {n: (np.bool_ if a.dtype == np.bool_ else a.dtype.type) for n, a in feeds.items()}
    model = graph_model([node("Attention", names, outs, **attrs)], {n: a.shape for n, a in feeds.items()},
                        [o for o in outs if o], opset=opset, dtypes=dtypes)
    want = ReferenceEvaluator(model).run(None, feeds)
    edge = litert_torch.convert_onnx(model)
    got = edge(*feeds.values())
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5)


def test_batch_norm_with_statistics_fed_at_run_time_matches_onnxruntime():
    rng = np.random.default_rng(12)
    model = graph_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                        {"x": (2, 3, 4, 5), "s": (3,), "b": (3,), "m": (3,), "v": (3,)}, ["y"])
    feeds = {k: rng.standard_normal(shape).astype(np.float32) for k, shape in
             {"x": (2, 3, 4, 5), "s": (3,), "b": (3,), "m": (3,)}.items()}
    feeds["v"] = np.abs(rng.standard_normal(3)).astype(np.float32) + 0.1
    assert_matches_ort(model, feeds)


def test_batch_norm_in_training_mode_matches_the_reference():
    """The batch's own statistics normalize it; the running statistics are updated by the momentum."""
    from onnx.reference import ReferenceEvaluator

    import litert_torch

    rng = np.random.default_rng(13)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1,
                            momentum=0.8)
    model = graph_model([node], {"x": (4, 3, 2, 5)}, ["y", "rm", "rv"],
                        {"s": rng.standard_normal(3).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32),
                         "m": rng.standard_normal(3).astype(np.float32),
                         "v": np.abs(rng.standard_normal(3)).astype(np.float32)})
    x = rng.standard_normal((4, 3, 2, 5)).astype(np.float32)
    got = litert_torch.convert_onnx(model)(x)
    for g, e in zip(got, ReferenceEvaluator(model).run(None, {"x": x})):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("k, past, activation", [(4, True, "silu"), (3, False, "none"), (1, True, "none")],
                         ids=["past-silu", "no-past", "kernel-one"])
def test_causal_conv_with_state_carries_its_state(k, past, activation):
    """CausalConvWithState (opset 27): output and present_state against onnx's reference; the present state fed
    back as the next call's past state gives the two calls' sequence convolved at once."""
    from onnx.reference import ReferenceEvaluator  # ONNX Runtime has no CausalConvWithState yet

    inputs = {"x": (2, 3, 5)} | ({"past": (2, 3, k - 1)} if past else {})
    model = graph_model([node("CausalConvWithState", ["x", "w", "b", "past" if past else ""], ["y", "state"],
                              activation=activation)], inputs, {"y": (2, 3, 5), "state": (2, 3, k - 1)},
                        {"w": r(3, 1, k), "b": r(3)}, opset=27)
    edge = litert_torch.convert_onnx(model)
    feeds = {name: r(*shape) for name, shape in inputs.items()}
    for got, want in zip(edge(*feeds.values()), ReferenceEvaluator(model).run(None, feeds)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if past and k > 1:
        a, b = r(2, 3, 5), r(2, 3, 5)
        y1, state = edge(a, feeds["past"])
        y2, _ = edge(b, state)
        # the same two steps as one depthwise causal convolution over the joined sequence
        w, bias = (numpy_helper.to_array(t) for t in model.graph.initializer)
        joined = np.concatenate([feeds["past"], a, b], 2)
        whole = np.stack([sum(joined[:, :, t + j] * w[None, :, 0, j] for j in range(k)) + bias
                          for t in range(10)], axis=2)
        np.testing.assert_allclose(np.concatenate([y1, y2], 2), whole * (1 / (1 + np.exp(-whole))),
                                   rtol=1e-5, atol=1e-5)


def test_a_qdq_model_folds_its_weights_and_quantizes_its_activations():
    """QuantizeLinear / DequantizeLinear around a MatMul, as quantized ONNX models are written: the int8 weight
    and its per-column scales fold into one float FULLY_CONNECTED; the activation's round trip through int8 is
    computed when the model runs, and matches ONNX Runtime."""
    g = np.random.default_rng(0)
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             node("DequantizeLinear", ["w", "ws"], ["wd"], axis=1), node("MatMul", ["xd", "wd"], ["y"])]
    model = graph_model(nodes, {"x": (3, 8)}, ["y"], {
        "w": g.integers(-127, 127, (8, 6)).astype(np.int8), "ws": np.linspace(0.01, 0.02, 6).astype(np.float32),
        "xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8)})
    edge = assert_matches_ort(model, {"x": g.standard_normal((3, 8)).astype(np.float32) * 4})
    counts = op_counts(edge)
    assert counts["FULLY_CONNECTED"] == 1 and counts["ROUND"] == 1
