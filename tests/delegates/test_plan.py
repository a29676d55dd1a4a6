"""Delegate rule tables on single-op graphs, plan figures on models known by hand, and the metadata round trip."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import EdgeModel, ir
from litert_torch.delegates import cpu, gpu, npu
from litert_torch.delegates.plan import PLAN_KEY, macs, plan_for
from litert_torch.flatbuffer.reader import read_model


def const(name, value):
    value = np.asarray(value)
    return ir.Tensor(name, value.shape, value.dtype, value)


def act(name, shape, dtype=np.float32):
    return ir.Tensor(name, shape, dtype)


def single(opcode, inputs, out_shape, dtype=np.float32, **options):
    return ir.Op(opcode, inputs, [act("y", out_shape, dtype)], options)


@pytest.mark.parametrize("op, target, reason", [
    (single("BROADCAST_TO", [act("x", [1, 4]), const("s", np.array([3, 4], np.int32))], [3, 4]), gpu,
     "BROADCAST_TO has no GPU kernel"),
    (single("GATHER_ND", [act("x", [4, 4]), act("i", [2, 2], np.int32)], [2]), gpu, "GATHER_ND has no GPU kernel"),
    (single("ADD", [act("a", [1, 2, 3, 4, 5]), act("b", [1, 2, 3, 4, 5])], [1, 2, 3, 4, 5]), gpu,
     "a rank-5 tensor (at most rank 4)"),
    (single("ADD", [act("a", [4], np.int64), act("b", [4], np.int64)], [4], np.int64), gpu, "int64 tensors"),
    (single("MEAN", [act("x", [1, 4, 4, 8]), act("axes", [2], np.int32)], [1, 1, 1, 8], keep_dims=True), gpu,
     "reduction axes computed at run time"),
    (single("STRIDED_SLICE", [act("x", [2, 6]), const("b", np.array([0, 0], np.int32)),
                              const("e", np.array([1, 6], np.int32)), const("s", np.array([1, 1], np.int32))], [6],
            shrink_axis_mask=1), cpu, "STRIDED_SLICE with shrink_axis_mask"),
    (single("CONV_2D", [act("x", [1, 8, 8, 3]), act("w", [4, 3, 3, 3]), const("b", np.zeros(4, np.float32))],
            [1, 6, 6, 4], padding="VALID", fused_activation_function="NONE"), gpu, "weights computed at run time"),
    (single("UNIDIRECTIONAL_SEQUENCE_LSTM", [act("x", [1, 4, 8])], [1, 4, 8]), cpu,
     "UNIDIRECTIONAL_SEQUENCE_LSTM is not supported by the XNNPACK delegate"),
    (single("ADD", [act("a", [2, 3]), act("b", [2, 3])], [2, 3], fused_activation_function="SIGN_BIT"), gpu,
     "fused activation SIGN_BIT"),
])
def test_rules_give_the_reason(op, target, reason):
    assert reason in (target.check_op(op) or "")


@pytest.mark.parametrize("target", [cpu, gpu, npu])
def test_rules_take_a_plain_conv(target):
    op = single("CONV_2D", [act("x", [1, 8, 8, 3]), const("w", np.ones([4, 3, 3, 3], np.float32)),
                            const("b", np.zeros(4, np.float32))], [1, 6, 6, 4], padding="VALID",
                fused_activation_function="RELU")
    assert target.check_op(op) is None


def test_macs_by_hand():
    conv = single("CONV_2D", [act("x", [1, 8, 8, 3]), const("w", np.ones([4, 3, 3, 3], np.float32)), None],
                  [1, 6, 6, 4])
    assert macs(conv) == 6 * 6 * 4 * 3 * 3 * 3
    fc = single("FULLY_CONNECTED", [act("x", [2, 16]), const("w", np.ones([10, 16], np.float32)), None], [2, 10])
    assert macs(fc) == 2 * 10 * 16


def chain_around(opcode_between: str, before: int, after: int):
    """x -> `before` FCs -> GATHER_ND (no GPU kernel, not XNNPACK's either) -> `after` FCs."""
    x = act("x", [4, 16])
    ops, cur = [], x
    for n in range(before + 1 + after):
        out = act(f"t{n}", [4, 16])
        if n == before:
            ops.append(ir.Op(opcode_between, [cur, const("idx", np.arange(4, dtype=np.int32).reshape(4, 1))], [out]))
        else:
            ops.append(ir.Op("FULLY_CONNECTED", [cur, const(f"w{n}", np.ones([16, 16], np.float32)), None], [out],
                             {"fused_activation_function": "NONE"}))
        cur = out
    return ir.Graph("main", [x], [cur], ops)


def test_plan_splits_at_an_unsupported_op():
    # XNNPACK takes both sides of the GATHER_ND as two partitions.
    plan = plan_for(chain_around("GATHER_ND", 1, 1), ("cpu",)).targets["cpu"]
    assert plan.partitions == [[0], [2]]
    assert plan.delegated_ops == 2 and plan.ops == 3
    assert plan.macs == 4 * 16 * 16 * 2 + 4 * 16 and plan.delegated_macs == 4 * 16 * 16 * 2
    assert [(f.op, f.opcode) for f in plan.fallbacks] == [(1, "GATHER_ND")]
    assert not plan.fully_delegated


def test_gpu_plan_keeps_only_the_largest_partition():
    # The GPU delegate takes one partition, the larger side of the GATHER_ND; the other side runs on the CPU.
    plan = plan_for(chain_around("GATHER_ND", 2, 3), ("gpu",)).targets["gpu"]
    assert plan.partitions == [[3, 4, 5]] and plan.delegated_ops == 3
    assert [f.op for f in plan.fallbacks] == [0, 1, 2]
    assert "takes only its largest (3 ops), and this op's has 2" in plan.fallbacks[0].reason
    tie = plan_for(chain_around("GATHER_ND", 2, 2), ("gpu",)).targets["gpu"]
    assert tie.partitions == [[0, 1]]  # equal sizes: the earlier one


def test_conv_net_is_fully_gpu_resident_and_the_plan_round_trips(tmp_path):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 5)).eval()
    edge = litert_torch.convert(model, (torch.randn(1, 3, 16, 16),), channel_last_io=True)
    plan = edge.delegate_plan
    assert set(plan.targets) == {"cpu", "gpu", "npu"}
    for target in plan.targets.values():
        assert target.fully_delegated and target.op_share == 1.0 and target.mac_share == 1.0, target.summary()
    path = tmp_path / "m.tflite"
    edge.export(path)
    loaded = EdgeModel.load(path)
    assert loaded.delegate_plan.to_json() == plan.to_json()
    assert PLAN_KEY in read_model(path.read_bytes()).metadata


def test_plan_names_the_source_of_a_fallback():
    class Pick(nn.Module):
        def forward(self, x, i, j):
            return x[i, j] * 2  # LINE_PICK

    x = torch.randn(4, 5, 3)
    i, j = torch.tensor([0, 3]), torch.tensor([4, 1])
    edge = litert_torch.convert(Pick(), (x, i, j), target="gpu")
    plan = edge.delegate_plan
    assert set(plan.targets) == {"gpu"}
    (fallback,) = [f for f in plan.targets["gpu"].fallbacks if f.opcode == "GATHER_ND"]
    assert fallback.reason == "GATHER_ND has no GPU kernel"
    line = next(n for n, text in enumerate(open(__file__), 1) if "LINE_PICK" in text and "next(" not in text)
    assert fallback.location.split(" ")[0].endswith(f"test_plan.py:{line}")


def test_foreign_file_gets_a_computed_plan():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    parsed = read_model(edge.flatbuffer)
    parsed.metadata = {}
    from litert_torch.flatbuffer.writer import serialize

    bare = EdgeModel(serialize(parsed))
    assert bare.delegate_plan.targets["gpu"].fully_delegated


def test_npu_aot_compile_names_the_missing_sdk():
    import importlib.util

    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    if importlib.util.find_spec("ai_edge_litert_sdk_qualcomm") is not None:
        pytest.skip("the Qualcomm SDK is installed here")
    with pytest.raises(litert_torch.AotCompileError, match="pip install ai-edge-litert-sdk-qualcomm"):
        litert_torch.aot_compile(edge, "qualcomm:SM8650")


@pytest.mark.parametrize("target, message", [
    ("qualcomm", "use VENDOR:SOC"),
    ("nvidia:H100", "use VENDOR:SOC"),
    ("qualcomm:SM1234", "unknown qualcomm SoC 'SM1234'; known: "),
])
def test_npu_targets_are_checked(target, message):
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    with pytest.raises(litert_torch.AotCompileError, match=message):
        litert_torch.aot_compile(edge, target)
