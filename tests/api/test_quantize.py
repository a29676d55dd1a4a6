"""Quantization: each mode runs in LiteRT, shrinks the file as expected, stays within its stated tolerance, keeps
our metadata, and refuses bad calibration data with a message naming the sample and the input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import CalibrationError, EdgeModel, QuantizationError
from litert_torch.quantization.quantize import MIN_CALIBRATION_SAMPLES, TOLERANCES
from tests.helpers import op_counts


class Dense(nn.Module):
    """Weight-dominated: three linear layers, 300k weights."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU())
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        return self.head(self.body(x))


class Mixed(nn.Module):
    """A conv net with ops the int8 quantizer has no kernel for (PReLU, sin)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.act = nn.PReLU(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.sin(self.act(self.conv(x))).mean((2, 3)))


def samples(shape, n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g),) for _ in range(n)]


@pytest.fixture(scope="module")
def dense():
    torch.manual_seed(0)
    model = Dense().eval()
    return model, litert_torch.convert(model, (torch.randn(1, 64),))


def within(mode, reference, got):
    rtol, atol = TOLERANCES[mode]
    ref, got = reference.detach().numpy(), np.asarray(got)
    assert np.abs(got - ref).max() <= rtol * np.abs(ref).max() + atol
    cos = float((ref * got).sum() / (np.linalg.norm(ref) * np.linalg.norm(got)))
    assert cos > 0.99


@pytest.mark.parametrize("mode, shrink", [("fp16", 1.95), ("dynamic-int8", 3.7), ("int8", 3.5)])
def test_each_mode_shrinks_and_stays_close(dense, mode, shrink):
    # int8 also stores a scale and an int64 zero point per output channel for each weight and bias (~8% here).
    model, float_edge = dense
    data = samples((1, 64), 32)
    edge = litert_torch.quantize_model(float_edge, mode, calibration_data=data if mode == "int8" else None)
    assert len(float_edge.flatbuffer) / len(edge.flatbuffer) >= shrink
    for (x,) in samples((1, 64), 4, seed=1):
        within(mode, model(x), edge(x))
    report = edge.quantization
    assert report.mode == mode and report.float_ops == [] and report.quantized_ops > 0
    assert report.float_bytes == len(float_edge.flatbuffer)
    assert report.calibration_samples == (32 if mode == "int8" else 0)


def test_fp16_keeps_weights_as_float16_behind_dequantize(dense):
    _, float_edge = dense
    edge = litert_torch.quantize_model(float_edge, "fp16")
    assert op_counts(edge)["DEQUANTIZE"] == 5  # three weights, two biases (the 10-value one stays float32)
    # XNNPACK folds the widening at load time: the dense layers still count as having constant weights.
    assert edge.delegate_plan.targets["cpu"].fully_delegated


def test_int8_io_is_int8_with_its_scale(dense):
    model, float_edge = dense
    edge = litert_torch.quantize_model(float_edge, "int8", calibration_data=samples((1, 64), 32), quantized_io=True)
    spec = edge.signatures["serving_default"]
    (x_spec,), (y_spec,) = spec.inputs, spec.outputs
    assert x_spec.dtype == np.int8 and y_spec.dtype == np.int8
    (x,) = samples((1, 64), 1, seed=3)[0]
    scale, zero = x_spec.quantization
    q = np.clip(np.round(x.numpy() / scale) + zero, -128, 127).astype(np.int8)
    out_scale, out_zero = y_spec.quantization
    y = (np.asarray(edge(q)).astype(np.float32) - out_zero) * out_scale
    within("int8", model(x), y)
    with pytest.raises(litert_torch.ModelInputError, match="int8"):
        edge(x)


def test_float_io_by_default_and_metadata_survives(dense, tmp_path):
    model, float_edge = dense
    edge = litert_torch.quantize_model(float_edge, "int8", calibration_data=samples((1, 64), 16))
    assert edge.signatures["serving_default"].inputs[0].dtype == np.float32
    path = tmp_path / "q.tflite"
    edge.export(path)
    loaded = EdgeModel.load(path)
    assert loaded.quantization == edge.quantization
    nodes = {entry["node"] for entry in loaded.source_map if entry}
    assert {"linear", "linear_1", "linear_2"} <= nodes  # every dense layer keeps its PyTorch node
    assert all(entry is not None for entry in loaded.source_map)
    # The plan is the quantized graph's: int8 dense layers between a QUANTIZE and a DEQUANTIZE.
    npu = loaded.delegate_plan.targets["npu"]
    assert npu.ops == len(loaded.source_map) and npu.fully_delegated


def test_ops_without_int8_kernels_stay_float_and_are_named():
    torch.manual_seed(0)
    model = Mixed().eval()
    float_edge = litert_torch.convert(model, (torch.randn(1, 3, 12, 12),))
    edge = litert_torch.quantize_model(float_edge, "int8", calibration_data=samples((1, 3, 12, 12), 16))
    left = {f.opcode: f for f in edge.quantization.float_ops}
    assert set(left) == {"PRELU", "SIN"}
    assert all(f.reason == "no int8 kernel in ai-edge-quantizer" for f in left.values())
    assert "test_quantize.py" in left["SIN"].location
    assert "kept in float: " in edge.quantization.summary()
    for (x,) in samples((1, 3, 12, 12), 3, seed=2):
        within("int8", model(x), edge(x))


def test_keep_float_matches_pytorch_names():
    torch.manual_seed(0)
    model = Dense().eval()
    float_edge = litert_torch.convert(model, (torch.randn(1, 64),))
    edge = litert_torch.quantize_model(float_edge, "dynamic-int8", keep_float=["head"])
    (kept,) = edge.quantization.float_ops
    assert kept.opcode == "FULLY_CONNECTED" and kept.reason == "kept in float (keep_float)"
    assert kept.node == "linear_2"


@pytest.mark.parametrize("data, message", [
    (lambda: samples((1, 32), 16), r"calibration sample 0: input 'args_0' \(x\) expects shape"),
    (lambda: [(torch.zeros(1, 64, dtype=torch.int32),)] * 16, r"calibration sample 0: input 'args_0' \(x\) expects dtype"),
    (lambda: samples((1, 64), 8) + [(torch.full((1, 64), float("nan")),)], "calibration sample 8: input 'args_0' "
                                                                            "holds 64 NaN or Inf"),
    (lambda: samples((1, 64), 3), f"3 calibration sample\\(s\\): int8 quantization needs at least "
                                  f"{MIN_CALIBRATION_SAMPLES}"),
    (lambda: None, "needs calibration_data"),
    (lambda: [(torch.randn(1, 64), torch.randn(1, 64))] * 16, "calibration sample 0: .*structure"),
])
def test_bad_calibration_data_is_refused(dense, data, message):
    with pytest.raises(CalibrationError, match=message):
        litert_torch.quantize_model(dense[1], "int8", calibration_data=data())


def test_bad_requests_are_refused(dense):
    edge = dense[1]
    with pytest.raises(QuantizationError, match="unknown quantization mode 'int4'"):
        litert_torch.quantize_model(edge, "int4")
    with pytest.raises(QuantizationError, match="needs full-integer"):
        litert_torch.quantize_model(edge, "fp16", quantized_io=True)
    with pytest.raises(QuantizationError, match="match no op"):
        litert_torch.quantize_model(edge, "fp16", keep_float=["no_such_layer"])
    with pytest.raises(QuantizationError, match="already quantized"):
        litert_torch.quantize_model(litert_torch.quantize_model(edge, "fp16"), "fp16")


def test_convert_takes_the_same_options():
    torch.manual_seed(0)
    model = Dense().eval()
    edge = litert_torch.convert(model, (torch.randn(1, 64),), quantize="int8", calibration_data=samples((1, 64)))
    assert edge.quantization.mode == "int8"
    with pytest.raises(ValueError, match="only with quantize"):
        litert_torch.convert(model, (torch.randn(1, 64),), calibration_data=samples((1, 64)))


def test_a_recipe_passes_through(dense, tmp_path):
    import json

    recipe = [{"regex": ".*", "operation": "FULLY_CONNECTED", "algorithm_key": "min_max_uniform_quantize",
               "op_config": {"weight_tensor_config": {"num_bits": 8, "symmetric": True, "granularity": "CHANNELWISE",
                                                      "dtype": "INT"},
                             "compute_precision": "INTEGER", "explicit_dequantize": False}}]
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    model, float_edge = dense
    edge = litert_torch.quantize_model(float_edge, str(path))
    assert edge.quantization.mode == "recipe"
    assert len(float_edge.flatbuffer) / len(edge.flatbuffer) > 3
    x = torch.randn(1, 64)
    within("dynamic-int8", model(x), edge(x))


@pytest.mark.parametrize("name", ["dynamic_wi4_afp32", "dynamic_wi4b32_afp32"])
def test_int4_models_load_verified_and_round_trip(dense, tmp_path, name):
    """int4 weights (packed two to a byte; per channel, or in blocks with a scales tensor) are read, verified
    and written back as they were: a saved int4 model loads and computes what it computed."""
    from ai_edge_quantizer import recipe

    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.runtime.verify import verify

    model, float_edge = dense
    edge = litert_torch.quantize_model(float_edge, getattr(recipe, name)())
    parsed = read_model(edge.flatbuffer)
    weights = [t for g in parsed.subgraphs for op in g.ops for t in op.inputs if t is not None and t.is_constant
               and t.dtype.name == "int4"]
    assert weights and all(-8 <= int(w.data.min()) and int(w.data.max()) <= 7 for w in weights)
    blockwise = [w for w in weights if w.quantization.block_scales is not None]
    assert bool(blockwise) == ("b32" in name)
    for w in blockwise:
        assert list(w.quantization.block_scales.shape) == [w.shape[0], w.shape[1] // 32]
    path = tmp_path / "int4.tflite"
    edge.export(path)
    x = torch.randn(1, 64)
    loaded = EdgeModel.load(path)
    np.testing.assert_array_equal(loaded(x), edge(x))
    again = serialize(parsed)
    assert not verify(again).unchecked
    np.testing.assert_array_equal(EdgeModel(again)(x), edge(x))
    ref, got = model(x).detach().numpy(), edge(x)  # 4-bit weights: near, not within int8's tolerances
    assert float((ref * got).sum() / (np.linalg.norm(ref) * np.linalg.norm(got))) > 0.98

    scales = blockwise[0].quantization.block_scales if blockwise else None
    if scales is not None:  # scales that do not cover the weights are refused before the runtime reads past them
        scales.shape = [scales.shape[0], 1]
        scales.data = np.ascontiguousarray(scales.data[:, :1])
        with pytest.raises(litert_torch.ModelFileError, match="block scales of dtype .* shape"):
            EdgeModel(serialize(parsed))


@pytest.mark.parametrize("keep_dims", [False, True])
def test_int8_expert_tables_scale_products_and_sums_after_and_stay_close(keep_dims):
    """int8_gathered_tables on the three ways a mixture-of-experts layer reads its [E, K, N] tables: a product
    against the whole table (hybrid int8 product), a product against gathered tables, and a gathered table times
    a column summed over K. Each output channel of each expert keeps its own scale, applied to the results (the
    widened tables are never scaled whole), and the results stay within int8 error of the float graph's."""
    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    rng = np.random.default_rng(0)
    e, k, n, b = 4, 16, 8, 5
    data = (rng.standard_normal((e, k, n)) * rng.uniform(0.01, 3, (e, 1, n))).astype(np.float32)

    def build():
        table = ir.Tensor("table", [e, k, n], np.float32, data)
        x = ir.Tensor("x", [e, b, k], np.float32)
        which = ir.Tensor("which", [2], np.int32)
        col = ir.Tensor("col", [2, k, 1], np.float32)
        picked = ir.Tensor("picked", [2, k, n], np.float32)
        whole = ir.Tensor("whole", [e, b, n], np.float32)
        prod = ir.Tensor("prod", [2, b, n], np.float32)
        times = ir.Tensor("times", [2, k, n], np.float32)
        summed = ir.Tensor("summed", [2, 1, n] if keep_dims else [2, n], np.float32)
        axis = ir.Tensor("axis", [1], np.int32, np.array([1], np.int32))
        x2 = ir.Tensor("x2", [2, b, k], np.float32)
        ops = [ir.Op("BATCH_MATMUL", [x, table], [whole], dict(adj_x=False, adj_y=False)),
               ir.Op("GATHER", [table, which], [picked], {"axis": 0, "batch_dims": 0}),
               ir.Op("BATCH_MATMUL", [x2, picked], [prod], dict(adj_x=False, adj_y=False)),
               ir.Op("MUL", [picked, col], [times], {"fused_activation_function": "NONE"}),
               ir.Op("SUM", [times, axis], [summed], {"keep_dims": keep_dims})]
        graph = ir.Graph("main", [x, which, col, x2], [whole, prod, summed], ops)
        return ir.Model([graph], [ir.Signature("serving_default", 0, ["x", "which", "col", "x2"],
                                               ["whole", "prod", "summed"])])

    feeds = {"x": rng.standard_normal((e, b, k)).astype(np.float32), "which": np.array([3, 1], np.int32),
             "col": rng.standard_normal((2, k, 1)).astype(np.float32),
             "x2": rng.standard_normal((2, b, k)).astype(np.float32)}
    want = EdgeModel(serialize(build()))(**feeds)
    model = build()
    assert int8_gathered_tables(model.subgraphs) == 1
    ops = model.subgraphs[0].ops
    assert [op.inputs[1].dtype for op in ops if op.opcode == "BATCH_MATMUL"] == [np.int8, np.float32]
    widened = {op.outputs[0] for op in ops if op.opcode == "CAST"}
    assert not any(t in widened for op in ops if op.opcode == "MUL" and op.inputs[1].shape[-2:] == (1, n)
                   for t in op.inputs)
    got = EdgeModel(serialize(model))(**feeds)
    assert set(got) == set(want) == {"whole", "prod", "summed"}
    for name in want:
        w, g = np.asarray(want[name]), np.asarray(got[name])
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 0.02 * np.abs(w).max(), name


def test_int8_expert_scales_of_a_decoded_token_are_gathered_as_rows():
    """A decoded token's k experts: each gathered table times the token's column, summed over K, gives [k, N]
    results; their scales are gathered from an [E, N] copy of the scales (no reshape per table), and the
    results stay within int8 error of the float graph's."""
    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    rng = np.random.default_rng(1)
    e, k, n, picks = 6, 16, 8, 3
    data = (rng.standard_normal((e, k, n)) * rng.uniform(0.01, 3, (e, 1, n))).astype(np.float32)

    def build():
        table = ir.Tensor("table", [e, k, n], np.float32, data)
        which = ir.Tensor("which", [picks], np.int32)
        col = ir.Tensor("col", [1, k, 1], np.float32)
        picked = ir.Tensor("picked", [picks, k, n], np.float32)
        times = ir.Tensor("times", [picks, k, n], np.float32)
        summed = ir.Tensor("summed", [picks, n], np.float32)
        axis = ir.Tensor("axis", [1], np.int32, np.array([1], np.int32))
        ops = [ir.Op("GATHER", [table, which], [picked], {"axis": 0, "batch_dims": 0}),
               ir.Op("MUL", [picked, col], [times], {"fused_activation_function": "NONE"}),
               ir.Op("SUM", [times, axis], [summed], {"keep_dims": False})]
        graph = ir.Graph("main", [which, col], [summed], ops)
        return ir.Model([graph], [ir.Signature("serving_default", 0, ["which", "col"], ["summed"])])

    feeds = {"which": np.array([5, 0, 2], np.int32), "col": rng.standard_normal((1, k, 1)).astype(np.float32)}
    want = np.asarray(EdgeModel(serialize(build()))(**feeds)["summed"])
    model = build()
    assert int8_gathered_tables(model.subgraphs) == 1
    ops = model.subgraphs[0].ops
    assert [op.opcode for op in ops] == ["GATHER", "GATHER", "CAST", "MUL", "SUM", "MUL"]
    scales = ops[1].inputs[0]
    assert list(scales.shape) == [e, n] and scales.dtype == np.float32
    got = np.asarray(EdgeModel(serialize(model))(**feeds)["summed"])
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


def _expert_graph(e, a, b, picks, readers):
    """A graph gathering `picks` experts' [a, b] tables of one [e, a, b] table, read by `readers(table, picked)`
    (a list of (ops, output) pairs), its feeds named as the readers' free inputs."""
    from litert_torch import ir

    table_data = np.random.default_rng(2).standard_normal((e, a, b)).astype(np.float32)
    table_data *= np.random.default_rng(3).uniform(0.01, 3, (e, a, 1)).astype(np.float32)
    table = ir.Tensor("table", [e, a, b], np.float32, table_data)
    which = ir.Tensor("which", [picks], np.int32)
    picked = ir.Tensor("picked", [picks, a, b], np.float32)
    ops = [ir.Op("GATHER", [table, which], [picked], {"axis": 0, "batch_dims": 0})]
    inputs, outputs = [which], []
    for more_ops, more_inputs, out in readers(table, picked):
        ops += more_ops
        inputs += more_inputs
        outputs.append(out)
    graph = ir.Graph("main", inputs, outputs, ops)
    return ir.Model([graph], [ir.Signature("serving_default", 0, [t.name for t in inputs],
                                           [t.name for t in outputs])])


def _row_times_tables(name, picked, a, b, rows=1):
    from litert_torch import ir

    row = ir.Tensor(f"{name}_row", [rows, 1, b], np.float32)
    times = ir.Tensor(f"{name}_times", picked.shape, np.float32)
    summed = ir.Tensor(f"{name}_sum", [picked.shape[0], a], np.float32)
    axis = ir.Tensor(f"{name}_axis", [1], np.int32, np.array([2], np.int32))
    return ([ir.Op("MUL", [picked, row], [times], {"fused_activation_function": "NONE"}),
             ir.Op("SUM", [times, axis], [summed], {"keep_dims": False})], [row], summed)


def test_int8_expert_rows_times_a_token_become_one_hybrid_product():
    """A decoded token's row times its experts' gathered [A, B] tables, summed along the row (the gate and up
    projections of a mixture-of-experts layer, tables as [out, in]): the tables are scaled per (expert, row), and
    the products are one FULLY_CONNECTED of the row by the gathered int8 rows (no widened copy), its result
    read as [picks, A] and scaled; within int8 error of the float graph (the row is quantized too)."""
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    e, a, b, picks = 6, 8, 16, 3

    def build():
        return _expert_graph(e, a, b, picks, lambda table, picked: [_row_times_tables("x", picked, a, b)])

    rng = np.random.default_rng(4)
    feeds = {"which": np.array([5, 0, 2], np.int32), "x_row": rng.standard_normal((1, 1, b)).astype(np.float32)}
    want = np.asarray(EdgeModel(serialize(build()))(**feeds)["x_sum"])
    model = build()
    assert int8_gathered_tables(model.subgraphs) == 1
    ops = model.subgraphs[0].ops
    assert [op.opcode for op in ops] == ["GATHER", "RESHAPE", "GATHER", "FULLY_CONNECTED", "RESHAPE", "MUL"]
    assert ops[0].inputs[0].dtype == np.int8 and ops[0].inputs[0].quantization.scale == (1.0,)
    assert list(ops[2].inputs[0].shape) == [e, a]  # one scale per (expert, row)
    got = np.asarray(EdgeModel(serialize(model))(**feeds)["x_sum"])
    assert got.shape == want.shape == (picks, a)
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


def test_int8_expert_rows_times_their_own_rows_become_a_hybrid_product_each():
    """Each (token, expert) pair's row times its gathered [A, B] table, summed along the row (a mixture-of-
    experts layer's down projection, each pair's inner row its own): a FULLY_CONNECTED of each row by its
    table's int8 rows, the results joined and scaled per (expert, row); within int8 error of the float graph."""
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    e, a, b, picks = 6, 8, 16, 3

    def build():
        return _expert_graph(e, a, b, picks, lambda table, picked: [_row_times_tables("x", picked, a, b, picks)])

    rng = np.random.default_rng(8)
    feeds = {"which": np.array([1, 1, 4], np.int32), "x_row": rng.standard_normal((picks, 1, b)).astype(np.float32)}
    want = np.asarray(EdgeModel(serialize(build()))(**feeds)["x_sum"])
    model = build()
    assert int8_gathered_tables(model.subgraphs) == 1
    counts = model.subgraphs[0].op_counts()
    assert counts["FULLY_CONNECTED"] == picks and "CAST" not in counts and "SUM" not in counts, counts
    got = np.asarray(EdgeModel(serialize(model))(**feeds)["x_sum"])
    assert got.shape == want.shape == (picks, a)
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


def test_int8_expert_table_read_as_rows_and_as_columns_stays_float():
    """A table one reader sums along its rows and another along its columns has no single channel axis to
    scale: it stays float, and the graph computes what it did."""
    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    e, a, b, picks = 5, 8, 8, 2

    def readers(table, picked):
        col = ir.Tensor("col", [picks, a, 1], np.float32)
        times = ir.Tensor("col_times", picked.shape, np.float32)
        summed = ir.Tensor("col_sum", [picks, b], np.float32)
        axis = ir.Tensor("col_axis", [1], np.int32, np.array([1], np.int32))
        return [_row_times_tables("x", picked, a, b),
                ([ir.Op("MUL", [picked, col], [times], {"fused_activation_function": "NONE"}),
                  ir.Op("SUM", [times, axis], [summed], {"keep_dims": False})], [col], summed)]

    model = _expert_graph(e, a, b, picks, readers)
    before = [op.opcode for op in model.subgraphs[0].ops]
    assert int8_gathered_tables(model.subgraphs) == 0
    assert [op.opcode for op in model.subgraphs[0].ops] == before
    rng = np.random.default_rng(5)
    feeds = {"which": np.array([4, 1], np.int32), "x_row": rng.standard_normal((1, 1, b)).astype(np.float32),
             "col": rng.standard_normal((picks, a, 1)).astype(np.float32)}
    got = EdgeModel(serialize(model))(**feeds)
    table = model.subgraphs[0].ops[0].inputs[0].data[[4, 1]]
    np.testing.assert_allclose(got["x_sum"], (table * feeds["x_row"]).sum(2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["col_sum"], (table * feeds["col"]).sum(1), rtol=1e-5, atol=1e-5)


def test_int8_expert_tables_read_as_out_in_by_tiles_take_hybrid_products():
    """Tables stored as [out, in] (the gate and up tables of a mixture-of-experts layer) multiplied as the
    transposed right operand (BATCH_MATMUL adj_y), read whole and gathered: the whole table is LiteRT's hybrid
    product, the gathered one widened; both scaled per (expert, row) after the product, within int8 error."""
    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    e, a, b, picks, rows = 4, 8, 16, 2, 5

    def readers(table, picked):
        x = ir.Tensor("x", [e, rows, b], np.float32)
        x2 = ir.Tensor("x2", [picks, rows, b], np.float32)
        whole = ir.Tensor("whole", [e, rows, a], np.float32)
        prod = ir.Tensor("prod", [picks, rows, a], np.float32)
        options = dict(adj_x=False, adj_y=True, asymmetric_quantize_inputs=False)
        return [([ir.Op("BATCH_MATMUL", [x, table], [whole], options)], [x], whole),
                ([ir.Op("BATCH_MATMUL", [x2, picked], [prod], dict(options))], [x2], prod)]

    rng = np.random.default_rng(6)
    feeds = {"which": np.array([3, 0], np.int32), "x": rng.standard_normal((e, rows, b)).astype(np.float32),
             "x2": rng.standard_normal((picks, rows, b)).astype(np.float32)}
    want = EdgeModel(serialize(_expert_graph(e, a, b, picks, readers)))(**feeds)
    model = _expert_graph(e, a, b, picks, readers)
    assert int8_gathered_tables(model.subgraphs) == 1
    ops = model.subgraphs[0].ops
    products = [op for op in ops if op.opcode == "BATCH_MATMUL"]
    assert [op.inputs[1].dtype for op in products] == [np.int8, np.float32]
    assert all(op.options["adj_y"] for op in products)
    got = EdgeModel(serialize(model))(**feeds)
    for name in ("whole", "prod"):
        w, g = np.asarray(want[name]), np.asarray(got[name])
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 0.02 * np.abs(w).max(), name


def test_int8_expert_table_read_otherwise_is_widened_and_scaled_along_its_channels():
    """A gathered table one of whose readers cannot take the scales after its work (here an ADD) is widened
    and scaled whole, along the channel axis its products keep (rows, for a table multiplied with adj_y)."""
    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize
    from litert_torch.quantization.weights import int8_gathered_tables

    e, a, b, picks, rows = 4, 8, 16, 2, 3

    def readers(table, picked):
        x = ir.Tensor("x", [picks, rows, b], np.float32)
        prod = ir.Tensor("prod", [picks, rows, a], np.float32)
        shifted = ir.Tensor("shifted", picked.shape, np.float32)
        one = ir.Tensor("one", [], np.float32, np.array(1.0, np.float32))
        return [([ir.Op("BATCH_MATMUL", [x, picked], [prod], dict(adj_x=False, adj_y=True,
                                                                 asymmetric_quantize_inputs=False))], [x], prod),
                ([ir.Op("ADD", [picked, one], [shifted], {"fused_activation_function": "NONE"})], [], shifted)]

    rng = np.random.default_rng(7)
    feeds = {"which": np.array([2, 3], np.int32), "x": rng.standard_normal((picks, rows, b)).astype(np.float32)}
    want = EdgeModel(serialize(_expert_graph(e, a, b, picks, readers)))(**feeds)
    model = _expert_graph(e, a, b, picks, readers)
    assert int8_gathered_tables(model.subgraphs) == 1
    scaled = [op for op in model.subgraphs[0].ops if op.opcode == "MUL"]
    assert len(scaled) == 1 and list(scaled[0].inputs[1].shape) == [picks, a, 1]
    got = EdgeModel(serialize(model))(**feeds)
    for name in ("prod", "shifted"):
        w, g = np.asarray(want[name]), np.asarray(got[name])
        assert np.abs(g - w).max() <= 0.02 * np.abs(w).max(), name


def _recipe_model(model, sample, name, monkeypatch):
    """`model` quantized by ai-edge-quantizer's recipe `name`, unchecked (as another tool would write it)."""
    from ai_edge_quantizer import recipe

    from litert_torch.runtime import verify

    with monkeypatch.context() as patch:
        patch.setattr(verify, "verify", lambda data: None)
        return litert_torch.quantize_model(litert_torch.convert(model, (sample,)), getattr(recipe, name)()).flatbuffer


def _reference_run(data: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interpreter = Interpreter(model_content=data,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


@pytest.mark.parametrize("name, allowed", [("dynamic_wi4c_afp32", True), ("dynamic_wi4b32_afp32", True),
                                           ("dynamic_wi2c_afp32", True), ("dynamic_wi2b32_afp32", False)])
def test_sub_byte_fully_connected_weights_are_allowed_where_the_kernel_computes_them(name, allowed, monkeypatch):
    """Measured here against the installed runtime: a hybrid FULLY_CONNECTED over int4 or int2 weights computes
    the product with the dequantized weights (to the activations' 8-bit rounding), except int2 in blocks, which
    the checks refuse, and a recipe that makes it is a QuantizationError."""
    from litert_torch.flatbuffer.reader import read_model
    from litert_torch.runtime.verify import verify

    torch.manual_seed(0)
    model, x = nn.Linear(64, 64).eval(), torch.randn(4, 64)
    data = _recipe_model(model, x, name, monkeypatch)
    fc = next(op for op in read_model(data).subgraphs[0].ops if op.opcode == "FULLY_CONNECTED")
    w, bias = fc.inputs[1], fc.inputs[2].data
    assert w.dtype.name == name.split("_")[1][1:3].replace("i", "int")
    q = w.quantization
    scales = (np.repeat(q.block_scales.data.astype(np.float64), q.block_size, axis=1) if q.block_scales is not None
              else np.asarray(q.scale)[:, None])
    expected = x.numpy().astype(np.float64) @ (w.data.astype(np.float64) * scales).T + bias
    error = np.abs(_reference_run(data, x.numpy()) - expected).max() / np.abs(expected).max()
    assert (error < 0.02) == allowed, error
    if allowed:
        verify(data)
    else:
        with pytest.raises(litert_torch.ModelFileError, match="not run this model correctly.*int2 weights in blocks"):
            EdgeModel(data)
        with pytest.raises(QuantizationError, match="would not run correctly"):
            from ai_edge_quantizer import recipe

            litert_torch.quantize_model(litert_torch.convert(model, (x,)), getattr(recipe, name)())


def test_int2_convolution_weights_are_refused(monkeypatch):
    """The runtime's hybrid convolution over int2 weights gives NaN: such a file is refused by name."""
    torch.manual_seed(0)
    model, x = nn.Conv2d(4, 8, 3).eval(), torch.randn(1, 4, 6, 6)
    data = _recipe_model(model, x, "dynamic_wi2c_afp32", monkeypatch)
    assert np.isnan(_reference_run(data, x.numpy())).any()
    with pytest.raises(litert_torch.ModelFileError, match="CONV_2D.*int2 weights"):
        EdgeModel(data)
