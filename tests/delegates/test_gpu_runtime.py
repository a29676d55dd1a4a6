"""The GPU rule table and the delegate plan's GPU column against LiteRT's real GPU accelerator (ML Drift over
WebGPU; here on SwiftShader, the software Vulkan device from Debian's chromium package).

Each op case is a one-op model; the delegate took it when its log names no refusal (`gpu_runtime.parse_log`).
Each model case holds the plan's GPU ops and the delegate's together: the ops the delegate refuses (its log and
one-op checks) and the one partition it then takes (`gpu_runtime.gpu_residency`), against the ops of the plan's
GPU partition. Skipped without a Vulkan device; failed instead under LITERT_GPU_TESTS=require (CI)."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import ir
from litert_torch.delegates import gpu, gpu_runtime
from tests.helpers import gpu_device_or_skip
from tests.models.zoo import MODELS, build


def const(name, value):
    value = np.asarray(value)
    return ir.Tensor(name, value.shape, value.dtype, value)


def act(name, shape, dtype=np.float32):
    return ir.Tensor(name, shape, np.dtype(dtype))


def i32(*values):
    return np.array(values, np.int32)


def binary(opcode, dtype=np.float32, out=None, **options):
    return ir.Op(opcode, [act("a", [1, 4, 8], dtype), act("b", [1, 4, 8], dtype)], [act("y", [1, 4, 8], out or dtype)],
                 options)


def unary(opcode, dtype=np.float32, out=None, shape=(1, 4, 8), **options):
    return ir.Op(opcode, [act("x", list(shape), dtype)], [act("y", list(shape), out or dtype)], options)


NONE = {"fused_activation_function": "NONE"}
CASES = {
    "add": binary("ADD", **NONE),
    "add_int32": binary("ADD", np.int32, **NONE),
    "mul_int32": binary("MUL", np.int32, **NONE),
    "equal_int32": binary("EQUAL", np.int32, np.bool_),
    "less_int32": binary("LESS", np.int32, np.bool_),
    "not_equal": binary("NOT_EQUAL", np.float32, np.bool_),
    "logical_and": binary("LOGICAL_AND", np.bool_),
    "select_v2": ir.Op("SELECT_V2", [act("c", [1, 4, 8], np.bool_), act("a", [1, 4, 8]), act("b", [1, 4, 8])],
                       [act("y", [1, 4, 8])]),
    "cast_bool_to_float": unary("CAST", np.bool_, np.float32),
    "cast_int32_to_float": unary("CAST", np.int32, np.float32),
    "concat_int32": ir.Op("CONCATENATION", [act("a", [1, 4, 8], np.int32), act("b", [1, 4, 8], np.int32)],
                          [act("y", [1, 8, 8], np.int32)], {"axis": 1, **NONE}),
    "arg_max": ir.Op("ARG_MAX", [act("x", [1, 4, 8]), const("axis", i32(2))], [act("y", [1, 4], np.int32)],
                     {"output_type": "INT32"}),
    "cumsum": ir.Op("CUMSUM", [act("x", [1, 4, 8]), const("axis", np.int32(2))], [act("y", [1, 4, 8])],
                    {"exclusive": False, "reverse": False}),
    "slice_rank2": ir.Op("SLICE", [act("x", [4, 8]), const("b", i32(0, 2)), const("s", i32(4, 4))], [act("y", [4, 4])]),
    "slice_rank4": ir.Op("SLICE", [act("x", [1, 4, 4, 8]), const("b", i32(0, 0, 0, 2)), const("s", i32(1, 4, 4, 4))],
                         [act("y", [1, 4, 4, 4])]),
    "gather_constant": ir.Op("GATHER", [act("x", [10, 4]), const("i", i32(1, 3))], [act("y", [2, 4])], {"axis": 0}),
    "gather_run_time_1d": ir.Op("GATHER", [act("x", [10, 4]), act("i", [2], np.int32)], [act("y", [2, 4])],
                                {"axis": 0}),
    "gather_run_time_2d": ir.Op("GATHER", [act("x", [10, 4]), act("i", [1, 2], np.int32)], [act("y", [1, 2, 4])],
                                {"axis": 0}),
    "gather_nd": ir.Op("GATHER_ND", [act("x", [4, 4]), const("i", i32(0, 2).reshape(2, 1))], [act("y", [2, 4])]),
    "reshape_rank5": ir.Op("RESHAPE", [act("x", [1, 4, 8]), const("s", i32(1, 2, 2, 2, 4))],
                           [act("y", [1, 2, 2, 2, 4])], {"new_shape": [1, 2, 2, 2, 4]}),
    "mul_rank5_constant": ir.Op("MUL", [act("a", [1, 2, 2, 1, 4]), const("b", np.ones([1, 1, 1, 2, 1], np.float32))],
                                [act("y", [1, 2, 2, 2, 4])], NONE),
    "topk": ir.Op("TOPK_V2", [act("x", [1, 8]), const("k", np.int32(3))],
                  [act("v", [1, 3]), act("i", [1, 3], np.int32)]),
    "broadcast_to": ir.Op("BROADCAST_TO", [act("x", [1, 4]), const("s", i32(3, 4))], [act("y", [3, 4])]),
    "softmax": unary("SOFTMAX", beta=1.0),
    "sub_int32": binary("SUB", np.int32, **NONE),
    "maximum_int32": binary("MAXIMUM", np.int32),
    "add_int64": binary("ADD", np.int64, **NONE),
    "add_int16": binary("ADD", np.int16, **NONE),
    "not_equal_same_input": ir.Op("NOT_EQUAL", [act("a", [1, 4, 8])] * 2, [act("y", [1, 4, 8], np.bool_)]),
    "equal_same_input": ir.Op("EQUAL", [act("a", [1, 4, 8])] * 2, [act("y", [1, 4, 8], np.bool_)]),
    "strided_slice_rank2": ir.Op("STRIDED_SLICE", [act("x", [4, 8]), const("b", i32(0, 2)), const("e", i32(4, 8)),
                                                   const("s", i32(1, 2))], [act("y", [4, 3])],
                                 {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 0, "ellipsis_mask": 0,
                                  "new_axis_mask": 0, "offset": False}),
    "logical_or": binary("LOGICAL_OR", np.bool_),
    "logical_not": unary("LOGICAL_NOT", np.bool_),
    "abs_int32": unary("ABS", np.int32),
    "transpose_int32": ir.Op("TRANSPOSE", [act("x", [1, 4, 8], np.int32), const("p", i32(0, 2, 1))],
                             [act("y", [1, 8, 4], np.int32)]),
    "sum_int32": ir.Op("SUM", [act("x", [1, 4, 8], np.int32), const("a", i32(2))], [act("y", [1, 4], np.int32)],
                       {"keep_dims": False}),
    "add_same_input": ir.Op("ADD", [act("a", [1, 4, 8])] * 2, [act("y", [1, 4, 8])], NONE),
    "mul_same_input": ir.Op("MUL", [act("a", [1, 4, 8])] * 2, [act("y", [1, 4, 8])], NONE),
    "arg_min": ir.Op("ARG_MIN", [act("x", [1, 4, 8]), const("axis", i32(2))], [act("y", [1, 4], np.int32)],
                     {"output_type": "INT32"}),
    "topk_int32": ir.Op("TOPK_V2", [act("x", [1, 8], np.int32), const("k", np.int32(3))],
                        [act("v", [1, 3], np.int32), act("i", [1, 3], np.int32)]),
    "bitcast": ir.Op("BITCAST", [act("x", [1, 4, 8])], [act("y", [1, 4, 8], np.int32)]),
    "bitwise_xor": binary("BITWISE_XOR", np.int32),
    "slice_rank1": ir.Op("SLICE", [act("x", [8]), const("b", i32(2)), const("s", i32(4))], [act("y", [4])]),
    "gather_constant_2d": ir.Op("GATHER", [act("x", [10, 4]), const("i", i32(1, 3).reshape(1, 2))],
                                [act("y", [1, 2, 4])], {"axis": 0}),
    "strided_slice_shrink": ir.Op("STRIDED_SLICE", [act("x", [1, 4, 8]), const("b", i32(0, 1, 0)),
                                                    const("e", i32(1, 2, 8)), const("s", i32(1, 1, 1))],
                                  [act("y", [1, 8])], {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 2,
                                                       "ellipsis_mask": 0, "new_axis_mask": 0, "offset": False}),
    "fc": ir.Op("FULLY_CONNECTED", [act("x", [1, 32]), const("w", np.ones([8, 32], np.float32)), None],
                [act("y", [1, 8])], {**NONE, "keep_num_dims": False}),
}


def delegate_takes(op: ir.Op) -> tuple[bool, dict]:
    full, log = gpu_runtime._compile(gpu_runtime._one_op_model(op))
    refusals, _ = gpu_runtime.parse_log(log)
    return not refusals and full, refusals


@pytest.mark.parametrize("name", sorted(CASES))
def test_table_matches_the_gpu_delegate(name):
    gpu_device_or_skip()
    op = CASES[name]
    taken, refusals = delegate_takes(op)
    reason = gpu.check_op(op)
    assert taken == (reason is None), (f"the GPU delegate {'takes' if taken else 'refuses'} {name} "
                                       f"({refusals}); the table says {reason!r}")


def test_the_log_is_read():
    refusals, counts = gpu_runtime.parse_log(
        "INFO: noise\nERROR: Following operations are not supported by GPU delegate:\n"
        "GATHER: Only support 1D indices\nMUL: Can't parse inputs with const tensors.\n"
        "7 operations will run on the GPU, and the remaining 3 operations will run on the CPU.\nI0000 more\n")
    assert refusals == {"GATHER": ["Only support 1D indices"], "MUL": ["Can't parse inputs with const tensors."]}
    assert counts == (7, 3)


@pytest.mark.parametrize("before, after", [(2, 3), (3, 2), (2, 2)])
def test_the_delegate_takes_only_its_largest_partition(before, after):
    from litert_torch.delegates.plan import plan_for
    from tests.delegates.test_plan import chain_around

    gpu_device_or_skip()
    graph = chain_around("GATHER_ND", before, after)
    model = ir.Model([graph], [ir.Signature("serving_default", 0, ["x"], ["y"])])
    residency = gpu_runtime.gpu_residency(gpu_runtime.serialize(model))
    assert residency.refused_ops == [before] and residency.delegated_ops == max(before, after)
    assert residency.consistent
    plan = plan_for(graph, ("gpu",)).targets["gpu"]
    assert sorted(i for p in plan.partitions for i in p) == residency.gpu_ops


SMALL = ("mlp", "convnet", "super_resolution", "unet", "gru", "bert", "gpt2", "distilbert", "llama", "clip_text",
         "whisper_encoder", "audio_groupnorm_prelu")
LARGER = ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "shufflenet_v2_x1_0", "squeezenet1_1", "lstm_2layer",
          "t5_encoder", "phi", "mobilevit")
CASES_BY_NAME = {case.name: case for case in MODELS}


@pytest.mark.parametrize("name", [*SMALL, *(pytest.param(n, marks=pytest.mark.slow) for n in LARGER)])
def test_plan_matches_the_gpu_delegate(name):
    gpu_device_or_skip()
    case = CASES_BY_NAME[name]
    args = case.inputs(1)
    edge = litert_torch.convert(build(case).eval(), args, target="gpu")
    plan = edge.delegate_plan.targets["gpu"]
    residency = gpu_runtime.gpu_residency(edge.flatbuffer)
    assert residency.consistent, residency  # one-op refusals + the one-partition rule explain the delegate's count
    planned = sorted(i for p in plan.partitions for i in p)
    assert planned == residency.gpu_ops, (plan.summary(), residency.refusals, residency.refused_ops)
    assert residency.fully_accelerated == (not residency.refusals)


def transpose_conv_1d():
    return nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2), (torch.randn(1, 16, 50),)


def transpose_conv_2d():
    return nn.ConvTranspose2d(16, 8, 8, stride=4, padding=2), (torch.randn(1, 16, 30, 30),)


def wide_linear():
    return nn.Linear(64, 50257), (torch.randn(1, 64, 64),)


def gpt2():
    case = CASES_BY_NAME["gpt2"]
    return build(case), case.inputs(1)


@pytest.mark.parametrize("make", [transpose_conv_1d, transpose_conv_2d, wide_linear, gpt2],
                         ids=lambda f: f.__name__)
def test_the_gpu_computes_what_pytorch_computes(make):
    """What LiteRT's GPU once computed wrong (relative error ~1.0-1.5), now within the GPU's tolerance: SAME
    transposed convolutions of kernel 8, stride 4 on lengths 1 or 2 mod 4, and fully connected layers of more
    than 32768 outputs on many rows (GPT-2's LM head)."""
    from litert_torch.validation.validate import GPU_RTOL

    gpu_device_or_skip()
    torch.manual_seed(0)
    model, args = make()
    report = litert_torch.validate(model.eval(), args, backends=("gpu",), draws=1, per_layer=False)
    (result,) = report.backends
    assert result.status == "ran", result.reason
    assert all(o.max_rel_error <= GPU_RTOL for o in result.outputs), report.render()
