"""The XNNPACK rule table against the XNNPACK delegate of the installed LiteRT runtime, op by op, and the
delegate plan's CPU partitions against the partitions the runtime makes on whole models.

Each case is a one-op model; the runtime delegated it when its execution plan holds a DELEGATE node. A table
that claims an op XNNPACK leaves to the builtin kernels makes the plan (and the rewrites that rely on it)
promise one partition where the runtime makes many."""

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import ir
from litert_torch.delegates import cpu
from litert_torch.flatbuffer.writer import serialize
from tests.helpers import runtime_partitions


def const(name, value):
    value = np.asarray(value)
    return ir.Tensor(name, value.shape, value.dtype, value)


def act(name, shape, dtype=np.float32):
    return ir.Tensor(name, shape, dtype)


def i32(*values):
    return np.array(values, np.int32)


def one_op_model(op: ir.Op) -> bytes:
    inputs = [t for t in op.inputs if t is not None and not t.is_constant]
    graph = ir.Graph("main", inputs, list(op.outputs), [op])
    return serialize(ir.Model([graph], [ir.Signature("serving_default", 0, [f"in{i}" for i in range(len(inputs))],
                                                     [f"out{i}" for i in range(len(op.outputs))])]))


def split(n, opcode="SPLIT"):
    x = act("x", [1, 1, 32 * n])
    outs = [act(f"y{i}", [1, 1, 32]) for i in range(n)]
    if opcode == "SPLIT":
        return ir.Op("SPLIT", [const("axis", np.int32(2)), x], outs, {"num_splits": n})
    return ir.Op("SPLIT_V", [x, const("sizes", np.full(n, 32, np.int32)), const("axis", np.int32(2))], outs,
                 {"num_splits": n})


def concat(n):
    return ir.Op("CONCATENATION", [act(f"x{i}", [1, 1, 32]) for i in range(n)], [act("y", [1, n, 32])],
                 {"axis": 1, "fused_activation_function": "NONE"})


def unary(opcode, **options):
    return ir.Op(opcode, [act("x", [1, 4, 32])], [act("y", [1, 4, 32])], options)


def binary(opcode, b=None, **options):
    return ir.Op(opcode, [act("a", [1, 4, 32]), b if b is not None else act("b", [1, 4, 32])],
                 [act("y", [1, 4, 32])], options)


def fc(weights=None, bias=None):
    w = weights if weights is not None else const("w", np.ones([8, 32], np.float32))
    return ir.Op("FULLY_CONNECTED", [act("x", [1, 32]), w, bias], [act("y", [1, 8])],
                 {"fused_activation_function": "NONE", "keep_num_dims": False})


def resize(opcode):
    return ir.Op(opcode, [act("x", [1, 4, 4, 2]), const("size", i32(8, 8))], [act("y", [1, 8, 8, 2])],
                 {"align_corners": False, "half_pixel_centers": True})


CASES = {
    **{f"split_{n}": split(n) for n in (2, 4, 5, 16)},
    "split_v": split(2, "SPLIT_V"),
    **{f"concat_{n}": concat(n) for n in (2, 5, 6, 16)},
    "slice": ir.Op("SLICE", [act("x", [1, 1, 128]), const("b", i32(0, 0, 32)), const("s", i32(1, 1, 32))],
                   [act("y", [1, 1, 32])]),
    "strided_slice": ir.Op("STRIDED_SLICE", [act("x", [1, 1, 128]), const("b", i32(0, 0, 32)),
                                             const("e", i32(1, 1, 64)), const("s", i32(1, 1, 2))],
                           [act("y", [1, 1, 16])], {"begin_mask": 0, "end_mask": 0, "shrink_axis_mask": 0,
                                                    "ellipsis_mask": 0, "new_axis_mask": 0, "offset": False}),
    **{op.lower(): unary(op) for op in ("LOGISTIC", "TANH", "RELU", "RELU6", "RELU_0_TO_1", "GELU", "HARD_SWISH",
                                        "EXP", "RSQRT", "LOG_SOFTMAX")},
    "softmax": unary("SOFTMAX", beta=1.0),
    **{op.lower(): binary(op, fused_activation_function="NONE") for op in ("ADD", "MUL", "SUB", "DIV")},
    "minimum_constant": binary("MINIMUM", const("bound", np.ones([1, 1, 32], np.float32))),
    "add_int32": ir.Op("ADD", [act("a", [4], np.int32), act("b", [4], np.int32)], [act("y", [4], np.int32)],
                       {"fused_activation_function": "NONE"}),
    "fc": fc(),
    "fc_weights_at_run_time": fc(weights=act("w", [8, 32])),
    "fc_bias_at_run_time": fc(bias=act("b", [8])),
    "batch_matmul": ir.Op("BATCH_MATMUL", [act("a", [2, 4, 8]), act("b", [2, 8, 5])], [act("y", [2, 4, 5])],
                          {"adj_x": False, "adj_y": False}),
    "mean": ir.Op("MEAN", [act("x", [1, 4, 4, 32]), const("axes", i32(1, 2))], [act("y", [1, 1, 1, 32])],
                  {"keep_dims": True}),
    "transpose_rank6": ir.Op("TRANSPOSE", [act("x", [1, 2, 4, 3, 5, 2]), const("p", i32(0, 2, 1, 3, 5, 4))],
                             [act("y", [1, 4, 2, 3, 2, 5])]),
    "resize_bilinear": resize("RESIZE_BILINEAR"),
    "resize_nearest": resize("RESIZE_NEAREST_NEIGHBOR"),
    "gather": ir.Op("GATHER", [act("x", [10, 4]), const("i", i32(1, 3))], [act("y", [2, 4])], {"axis": 0}),
    "select_v2": ir.Op("SELECT_V2", [act("c", [4], np.bool_), act("a", [4]), act("b", [4])], [act("y", [4])]),
    "broadcast_to": ir.Op("BROADCAST_TO", [act("x", [1, 4]), const("s", i32(3, 4))], [act("y", [3, 4])]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_table_matches_the_runtime(name):
    op = CASES[name]
    taken = runtime_partitions(one_op_model(op)) > 0
    reason = cpu.check_op(op)
    assert taken == (reason is None), f"runtime {'takes' if taken else 'leaves'} {name}; table says {reason!r}"


class LSTMHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 16, 2, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class Upsample(nn.Module):
    def forward(self, x):
        return nn.functional.interpolate(torch.relu(x), scale_factor=2.0, mode="nearest") * 2


@pytest.mark.parametrize("build, inputs", [
    (LSTMHead, (torch.randn(1, 12, 8),)),
    (lambda: nn.GRU(8, 16, batch_first=True), (torch.randn(1, 12, 8),)),
    (Upsample, (torch.randn(1, 4, 8, 8),)),
])
def test_plan_partitions_match_the_runtime(build, inputs):
    torch.manual_seed(0)
    edge = litert_torch.convert(build().eval(), inputs)
    plan = edge.delegate_plan.targets["cpu"]
    assert runtime_partitions(edge.flatbuffer) == len(plan.partitions), plan.summary()
