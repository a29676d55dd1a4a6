"""ONNX LSTM and GRU beyond the fused kernel's form: weights fed at run time, initial states, peepholes,
sequence_lens, a read Y_c, every direction and both layouts, unrolled over time: each compared with ONNX
Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import litert_torch
from tests.onnx.helpers import run_ort

RNG = np.random.default_rng(21)
H, I, S, B = 3, 4, 5, 2


def _model(op, direction, layout, fed: dict, constants: dict, outputs):
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][:8 if op == "LSTM" else 6]
    used = [n if n in fed or n in constants or n == "X" else "" for n in names]
    while used and used[-1] == "":
        used.pop()
    node = helper.make_node(op, used, outputs, hidden_size=H, direction=direction, layout=layout)
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [S, B, I] if layout == 0 else [B, S, I])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT,
                                             list(v.shape)) for n, v in fed.items()]
    from onnx import numpy_helper
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [None, None, None, None][:4 if o == "Y" else 3]) for o in outputs if o],
                              [numpy_helper.from_array(v, n) for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def _params(op, d, layout=0):
    gates = 4 if op == "LSTM" else 3
    values = {"W": RNG.standard_normal((d, gates * H, I)), "R": RNG.standard_normal((d, gates * H, H)),
              "B": RNG.standard_normal((d, 2 * gates * H)),
              "initial_h": RNG.standard_normal((d, B, H) if layout == 0 else (B, d, H))}
    if op == "LSTM":
        values["initial_c"] = RNG.standard_normal((d, B, H) if layout == 0 else (B, d, H))
        values["P"] = RNG.standard_normal((d, 3 * H))
    return {k: (0.5 * v).astype(np.float32) for k, v in values.items()}


def _check(model, feeds, layout=0):
    from onnx.reference import ReferenceEvaluator

    edge = litert_torch.convert_onnx(model)
    # ONNX Runtime has no batch-major (layout 1) recurrent kernels: onnx's reference for those
    expected = run_ort(model, feeds) if layout == 0 else ReferenceEvaluator(model).run(None, feeds)
    got = edge(*feeds.values())
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_weights_and_states_fed_at_run_time(op, direction, layout):
    d = 2 if direction == "bidirectional" else 1
    params = _params(op, d, layout)
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    model = _model(op, direction, layout, params, {}, outputs)
    x = RNG.standard_normal((S, B, I) if layout == 0 else (B, S, I)).astype(np.float32)
    _check(model, {"X": x, **params}, layout)


def test_lstm_with_constant_weights_peepholes_and_sequence_lengths():
    params = _params("LSTM", 1)
    lens = np.array([5, 3], np.int32)
    model = _model("LSTM", "forward", 0, {"sequence_lens": lens}, params, ["Y", "Y_h", "Y_c"])
    _check(model, {"X": RNG.standard_normal((S, B, I)).astype(np.float32), "sequence_lens": lens})
