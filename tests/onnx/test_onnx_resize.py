"""ONNX Resize in every mode, coordinate transform and rounding rule, with constant scales or sizes (tables
computed at conversion) and with scales, sizes or a region fed at run time (tables computed in the model, the
output sizes decided by the values): each compared with onnx's reference implementation of the operator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import litert_torch
from litert_torch.flatbuffer.reader import read_model
from tests.helpers import op_counts
from tests.onnx.helpers import assert_matches_ort, graph_model

RNG = np.random.default_rng(11)
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.uint8: TensorProto.UINT8,
        np.int8: TensorProto.INT8}


def _model(x_shape, attrs, *, scales=None, sizes=None, roi=None, runtime=(), dtype=np.float32, opset=19):
    """Resize(x, roi, scales, sizes); each parameter a constant, or a graph input when named in `runtime`."""
    inits, inputs = [], [helper.make_tensor_value_info("x", ELEM[dtype], list(x_shape))]
    names = []
    for name, value, elem in (("roi", roi, TensorProto.FLOAT), ("scales", scales, TensorProto.FLOAT),
                              ("sizes", sizes, TensorProto.INT64)):
        if value is None:
            names.append("")
            continue
        names.append(name)
        if name in runtime:
            inputs.append(helper.make_tensor_value_info(name, elem, [len(value)]))
        else:
            inits.append(numpy_helper.from_array(np.asarray(value, np.int64 if name == "sizes" else np.float32),
                                                 name))
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", ["x", *names], ["y"], **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", ELEM[dtype],
                                                                                [None] * len(x_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _feeds(model, x, values):
    feeds = {"x": x}
    for inp in model.graph.input[1:]:
        dtype = np.int64 if inp.type.tensor_type.elem_type == TensorProto.INT64 else np.float32
        feeds[inp.name] = np.asarray(values[inp.name], dtype)
    return feeds


def _check(model, x, runs: list[dict], rtol=1e-4, atol=1e-5):
    edge = litert_torch.convert_onnx(model)
    reference = ReferenceEvaluator(model)
    for values in runs:
        feeds = _feeds(model, x, values)
        (expected,) = reference.run(None, feeds)
        got = np.asarray(edge(*feeds.values()))
        assert got.shape == expected.shape, (values, got.shape, expected.shape)
        assert got.dtype == expected.dtype
        if expected.dtype.kind in "iu":
            # a value that lands on a half (x.5) after float32 rather than float64 arithmetic may round apart
            assert np.abs(got.astype(np.int64) - expected).max(initial=0) <= 1, values
        else:
            np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=str(values))
    return edge


COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]
KERNELS = [
    *[dict(mode="nearest", nearest_mode=n) for n in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")],
    dict(mode="linear"), dict(mode="linear", antialias=1),
    dict(mode="cubic"), dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), dict(mode="cubic", antialias=1),
]
SCALES = [[1, 1, 1.7, 0.6], [1, 1, 0.45, 2.0]]
# Scales fed at run time are computed with in float32, as ONNX Runtime does, and the reference computes in
# float64: scales that float32 holds exactly keep the two from rounding a coordinate apart at a tie.
BINARY_SCALES = [[1, 1, 1.75, 0.625], [1, 1, 0.375, 2.25], [1, 1, 1, 1], [1, 1, 0.3125, 3.25]]


def _id(kernel):
    return "-".join(f"{v}" for v in kernel.values())


@pytest.mark.parametrize("kernel", KERNELS, ids=_id)
@pytest.mark.parametrize("coord", COORDS)
def test_constant_scales_in_every_mode(kernel, coord):
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    for scales in SCALES:
        _check(_model(x.shape, dict(kernel, coordinate_transformation_mode=coord), scales=scales), x, [{}])


@pytest.mark.parametrize("kernel", KERNELS, ids=_id)
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
def test_scales_fed_at_run_time_decide_the_output_size(kernel, coord):
    """One converted model, run with scales that enlarge, shrink and keep each axis."""
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    model = _model(x.shape, dict(kernel, coordinate_transformation_mode=coord), scales=SCALES[0], runtime={"scales"})
    _check(model, x, [{"scales": s} for s in BINARY_SCALES])


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("runtime", [(), ("sizes",)], ids=["constant", "run-time"])
def test_sizes_with_each_aspect_ratio_policy(policy, runtime):
    x = RNG.standard_normal((1, 3, 6, 4)).astype(np.float32)
    attrs = dict(mode="linear", keep_aspect_ratio_policy=policy, axes=[2, 3])
    model = _model(x.shape, attrs, sizes=[9, 5], runtime=runtime)
    _check(model, x, [{"sizes": [9, 5]}] if not runtime else [{"sizes": s} for s in ([9, 5], [3, 7], [6, 4])])


@pytest.mark.parametrize("runtime", [(), ("roi",), ("roi", "scales")], ids=["constant", "roi", "roi-scales"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_crop_and_resize_with_its_region_and_extrapolation_value(runtime, mode):
    x = RNG.standard_normal((1, 1, 6, 6)).astype(np.float32)
    attrs = dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0,
                 axes=[3, 2])
    model = _model(x.shape, attrs, roi=[-0.25, 0.125, 0.875, 1.375], scales=[1.5, 0.8], runtime=runtime)
    runs = [{"roi": [-0.25, 0.125, 0.875, 1.375], "scales": [1.5, 0.8]}]
    if runtime:
        runs.append({"roi": [0.25, 0.0, 0.75, 0.5], "scales": [1.5, 0.8] if "scales" not in runtime else [2, 2]})
    _check(model, x, runs)


@pytest.mark.parametrize("shape,scales", [((2, 9), [1, 0.5]), ((1, 2, 3, 4, 5), [1, 1, 2, 1.5, 0.6])],
                         ids=["rank2", "rank5"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_inputs_of_other_ranks(shape, scales, mode):
    x = RNG.standard_normal(shape).astype(np.float32)
    _check(_model(shape, dict(mode=mode), scales=scales), x, [{}])
    _check(_model(shape, dict(mode=mode), scales=scales, runtime={"scales"}), x, [{"scales": scales}])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_integer_and_half_inputs_round_and_saturate_as_onnx_casts(dtype, mode):
    if dtype == np.float16:
        x = RNG.standard_normal((1, 1, 4, 6)).astype(np.float16)
    else:
        info = np.iinfo(dtype)
        x = RNG.integers(info.min, info.max, (1, 1, 4, 6), endpoint=True).astype(dtype)
    model = _model(x.shape, dict(mode=mode, coordinate_transformation_mode="half_pixel"),
                   scales=[1, 1, 1.75, 0.7], dtype=dtype)
    _check(model, x, [{}], rtol=2**-9, atol=2**-12)


def test_a_dynamic_batch_with_constant_scales():
    x = RNG.standard_normal((3, 2, 5, 5)).astype(np.float32)
    model = _model(("n", 2, 5, 5), dict(mode="cubic"), scales=[1, 1, 1.3, 0.7])
    edge = litert_torch.convert_onnx(model, dynamic_dims={"x": {0: (1, 8)}})
    reference = ReferenceEvaluator(model)
    for n in (1, 3):
        (expected,) = reference.run(None, {"x": x[:n]})
        np.testing.assert_allclose(np.asarray(edge(x[:n])), expected, rtol=1e-4, atol=1e-5)


def test_exact_cases_still_use_the_tflite_resize_kernels():
    """An integer upscale with PyTorch's conventions lowers to RESIZE_BILINEAR, nothing else."""
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    edge = _check(_model(x.shape, dict(mode="linear"), scales=[1, 1, 2, 2]), x, [{}])
    counts = op_counts(edge)
    assert counts.get("RESIZE_BILINEAR") == 1 and "GATHER" not in counts, counts


def test_nearest_with_exclude_outside_is_refused():
    model = _model((1, 1, 4, 4), dict(mode="nearest", exclude_outside=1), scales=[1, 1, 2, 2])
    with pytest.raises(litert_torch.ConversionError, match="exclude_outside"):
        litert_torch.convert_onnx(model)


def test_the_model_is_valid_onnx():
    onnx.checker.check_model(_model((1, 1, 4, 4), dict(mode="cubic"), scales=[1, 1, 2, 2], runtime={"scales"}))


@pytest.mark.parametrize("kernel", [dict(mode="linear", antialias=1), dict(mode="cubic", antialias=1),
                                    dict(mode="nearest")], ids=_id)
def test_degenerate_run_time_scales_never_take_the_process_down(kernel):
    """Scales of 0 or tiny give ONNX's empty axes; negative and NaN scales (which ONNX leaves undefined) an
    empty axis too, never a crash or an allocation the size of the address space (the antialiasing taps are
    bounded by the input size, a NaN size counts 0)."""
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    model = _model(x.shape, dict(kernel), scales=SCALES[0], runtime={"scales"})
    edge = litert_torch.convert_onnx(model)
    litert_torch.EdgeModel(edge.flatbuffer)  # the load-time check runs it once in a child process, on zeros
    for scales in ([1, 1, 0, 0], [1, 1, 1e-30, 0.5], [1, 1, 0.1, 1]):
        got = np.asarray(edge(x, np.asarray(scales, np.float32)))
        (expected,) = ReferenceEvaluator(model).run(None, _feeds(model, x, {"scales": scales}))
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    for scales in ([1, 1, -2, 1], [1, 1, np.nan, 1]):
        assert np.asarray(edge(x, np.asarray(scales, np.float32))).shape == (1, 2, 0, 7)


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode, rank", [("nearest", 2), ("linear", 2), ("cubic", 2), ("linear", 3), ("nearest", 3)])
def test_grid_sample_matches_the_reference(mode, rank, padding, align_corners):
    """GridSample (opset 20) at grid points inside and well outside [-1, 1], against onnx's reference."""
    from onnx.reference import ReferenceEvaluator

    g = np.random.default_rng(11)
    spatial = (4, 5) if rank == 2 else (3, 4, 5)
    out = (3, 4) if rank == 2 else (2, 3, 2)
    x = g.standard_normal((2, 3, *spatial)).astype(np.float32)
    grid = (g.uniform(-1, 1, (2, *out, rank)) * 2.2).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align_corners)
    model = graph_model([node], {"x": x.shape, "grid": grid.shape}, ["y"], opset=20)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "grid": grid})
    got = litert_torch.convert_onnx(model)(x, grid)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_tables_sized_by_run_time_scales_stay_right_over_many_fresh_runtimes():
    """XNNPACK's own RESHAPE of a tensor whose sizes are decided during an invocation sometimes hands the next
    partition stale memory (here: one tap weight table read from memory the next GATHER had reused, every output
    scaled by one wrong number, in about one of twenty fresh interpreters). Such reshapes are written with a
    target computed at run time, which the delegate leaves to the built-in kernel: checked on the file, and on
    many fresh runtimes of one model, each given scales that change every size the tables have."""
    x = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
    model = _model(x.shape, dict(mode="linear", coordinate_transformation_mode="half_pixel"), scales=SCALES[0],
                   runtime={"scales"})
    edge = litert_torch.convert_onnx(model)
    graph = read_model(edge.flatbuffer).subgraphs[0]
    # every float tensor this model reshapes is a weight table sized by the scales
    moved = [op for op in graph.ops if op.opcode in ("RESHAPE", "EXPAND_DIMS") and op.inputs[0].dtype == np.float32]
    assert len(moved) == 3, [op.opcode for op in moved]
    assert all(op.opcode == "RESHAPE" and not op.inputs[1].is_constant for op in moved)
    reference = ReferenceEvaluator(model)
    runs = [_feeds(model, x, {"scales": s}) for s in BINARY_SCALES]
    expected = [reference.run(None, feeds)[0] for feeds in runs]
    for _ in range(150):
        fresh = litert_torch.EdgeModel(edge.flatbuffer)
        for feeds, want in zip(runs, expected):
            np.testing.assert_allclose(np.asarray(fresh(*feeds.values())), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 3, 2, 4, 5], [1, 1, 1, 6]], ids=["2d", "3d", "one_row"])
def test_affine_grid_matches_onnxruntime(size, align):
    dims = len(size) - 2
    model = graph_model([helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)],
                        {"theta": (size[0], dims, dims + 1)}, ["grid"], {"size": np.array(size, np.int64)}, opset=20)
    theta = np.random.default_rng(0).standard_normal((size[0], dims, dims + 1)).astype(np.float32)
    if align and 1 in size[2:]:
        # ONNX's reference, ONNX Runtime and PyTorch place a lone sample at -1, 1 and 0
        with pytest.raises(litert_torch.ConversionError, match="align_corners=1 over an axis of size 1"):
            litert_torch.convert_onnx(model)
        return
    assert_matches_ort(model, {"theta": theta})
