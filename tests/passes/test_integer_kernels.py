"""Plain integer and bool operands of kernels that lack them (`litert_torch.passes.integer_kernels`).

The table of dtypes each kernel computes exactly is measured again against the installed LiteRT runtime, one op
at a time (only the dtypes the table allows: the others may abort the process); then whole models whose integer
or bool tensors reach those kernels are converted and compared with PyTorch exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import litert_torch
from litert_torch import ir
from litert_torch.errors import LoweringError
from litert_torch.flatbuffer.writer import serialize
from litert_torch.passes.integer_kernels import PLAIN_DTYPES
from tests.helpers import Fn, op_counts

SHAPE = (3, 8)


def _wrap(values, dtype):
    return np.asarray(values).astype(np.int64).astype(dtype)


def _floor_div(a, b):
    return np.floor_divide(a.astype(np.int64), b)


# builtin -> (number of operands, numpy reference over int64 values, operand range)
ELEMENTWISE = {
    "ADD": (2, np.add, (-60, 60)), "SUB": (2, np.subtract, (-60, 60)), "MUL": (2, np.multiply, (-12, 12)),
    "MAXIMUM": (2, np.maximum, (-60, 60)), "MINIMUM": (2, np.minimum, (-60, 60)),
    "FLOOR_DIV": (2, _floor_div, (1, 40)), "FLOOR_MOD": (2, np.mod, (1, 40)),
    "SQUARED_DIFFERENCE": (2, lambda a, b: (a - b) ** 2, (-10, 10)), "POW": (2, np.power, (0, 4)),
    "NEG": (1, np.negative, (-60, 60)), "ABS": (1, np.abs, (-60, 60)), "SIGN": (1, np.sign, (-60, 60)),
    "EQUAL": (2, np.equal, (-3, 3)), "NOT_EQUAL": (2, np.not_equal, (-3, 3)), "LESS": (2, np.less, (-3, 3)),
    "LESS_EQUAL": (2, np.less_equal, (-3, 3)), "GREATER": (2, np.greater, (-3, 3)),
    "GREATER_EQUAL": (2, np.greater_equal, (-3, 3)),
}
REDUCTIONS = {"SUM": np.sum, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min, "REDUCE_PROD": np.prod, "MEAN": None}
INTEGERS = [np.int8, np.uint8, np.int16, np.int32, np.int64]


def _run(op: ir.Op, feeds: list[np.ndarray]) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    inputs = [t for t in op.inputs if not t.is_constant]
    graph = ir.Graph("main", inputs, list(op.outputs), [op])
    model = ir.Model([graph], [ir.Signature("serving_default", 0, [f"in{i}" for i in range(len(inputs))], ["y"])])
    interpreter = Interpreter(model_content=serialize(model), num_threads=1)
    runner = interpreter.get_signature_runner("serving_default")
    return runner(**{f"in{i}": v for i, v in enumerate(feeds)})["y"]


def _cases(table):
    return [(op, np.dtype(d).name) for op in table for d in INTEGERS if np.dtype(d) in PLAIN_DTYPES[op]]


@pytest.mark.parametrize("opcode,dtype", _cases(ELEMENTWISE))
def test_elementwise_kernels_the_table_allows_are_exact(opcode, dtype):
    arity, reference, (low, high) = ELEMENTWISE[opcode]
    dtype = np.dtype(dtype)
    low = max(low, int(np.iinfo(dtype).min))
    rng = np.random.default_rng(0)
    feeds = [rng.integers(low, high, SHAPE).astype(dtype) for _ in range(arity)]
    expected = reference(*(f.astype(np.int64) for f in feeds))
    out_dtype = np.bool_ if expected.dtype == np.bool_ else dtype
    op = ir.Op(opcode, [ir.Tensor(f"x{i}", SHAPE, dtype) for i in range(arity)],
               [ir.Tensor("y", SHAPE, out_dtype)], {"fused_activation_function": "NONE"} if opcode in ("ADD", "SUB", "MUL") else {})
    np.testing.assert_array_equal(_run(op, feeds), _wrap(expected, out_dtype))


@pytest.mark.parametrize("opcode,dtype", _cases(REDUCTIONS))
def test_reductions_the_table_allows_are_exact(opcode, dtype):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(max(-20, int(np.iinfo(dtype).min)), 20 if opcode != "REDUCE_PROD" else 4, SHAPE).astype(dtype)
    axis = ir.Tensor("axis", (1,), np.int32, np.array([1], np.int32))
    op = ir.Op(opcode, [ir.Tensor("x", SHAPE, dtype), axis], [ir.Tensor("y", (SHAPE[0],), dtype)],
               {"keep_dims": False})
    if opcode == "MEAN":  # row sums made multiples of the row length: PyTorch has no integer mean to round like
        x[:, 0] -= (x.astype(np.int64).sum(axis=1) % SHAPE[1]).astype(dtype)
        expected = x.astype(np.int64).sum(axis=1) // SHAPE[1]
    else:
        expected = REDUCTIONS[opcode](x.astype(np.int64), axis=1)
    np.testing.assert_array_equal(_run(op, [x]), _wrap(expected, dtype))


# models whose integer or bool tensors reach kernels without a plain kernel of their dtype
MODELS = {
    "relu": (1, torch.relu),
    "relu6": (1, lambda x: torch.nn.functional.relu6(x)),
    "square": (1, torch.square),
    "sign": (1, torch.sign),
    "floor_ceil_round": (1, lambda x: torch.floor(x) + torch.ceil(x) - torch.round(x)),
    "any": (1, lambda x: x.any(dim=1)),
    "logical_xor": (2, torch.logical_xor),
    "sum_prod": (1, lambda x: x.sum(dim=1) + x.prod(dim=0)[:3]),
    "cumsum": (1, lambda x: x.cumsum(1)),
    "clamp": (1, lambda x: torch.clamp(x, 0, 1)),
    "stack_split": (2, lambda x, y: torch.stack([x, y]).split(3, dim=2)[1]),
    "max_pool": (1, lambda x: torch.nn.functional.max_pool2d(x[None], 2)),
    "index_add": (2, lambda x, y: x.index_add(0, torch.tensor([2, 0, 1]), y)),
    "scatter_add": (2, lambda x, y: x.scatter_add(1, torch.tensor([[0, 3, 3, 1, 0, 7, 7, 7]] * 3), y)),
    "matmul": (2, lambda x, y: x @ y.T),
    "int_pow": (2, lambda x, y: torch.pow(x, y)),
}
DTYPES = [torch.int8, torch.uint8, torch.int16, torch.bool]


def _sample(dtype, seed, low=-100, high=100):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, SHAPE, generator=g).bool()
    return torch.randint(0 if dtype == torch.uint8 else low, high, SHAPE, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(MODELS))
def test_models_on_narrow_integers_and_bools_match_pytorch(name, dtype):
    arity, fn = MODELS[name]
    low, high = (-3, 4) if name in ("int_pow", "matmul", "sum_prod") else (-100, 100)
    args = tuple(_sample(dtype, seed, low, high) for seed in range(arity))
    try:
        fn(*args)
    except RuntimeError:
        pytest.skip(f"PyTorch has no {name} of {dtype}")
    model = Fn(fn)
    edge = litert_torch.convert(model, args)
    for feeds in (args, tuple(_sample(dtype, seed + 7, low, high) for seed in range(arity))):
        np.testing.assert_array_equal(np.asarray(edge(*feeds)), model(*feeds).numpy())


def test_integer_power_with_negative_exponents_matches_pytorch():
    """1 and -1 keep their powers, 0 and every other base give 0, as PyTorch's integer pow does."""
    base = torch.tensor([[-3, -2, -1, 0, 1, 2, 3, 5]] * 3, dtype=torch.int32)
    exp = torch.tensor([[-3, -2, -1, 0, 1, 2, 3, 4]] * 3, dtype=torch.int32).T.reshape(3, 8)
    model = Fn(torch.pow)
    edge = litert_torch.convert(model, (base, exp))
    for e in (exp, -exp, exp.flip(1)):
        np.testing.assert_array_equal(np.asarray(edge(base, e)), model(base, e).numpy())


def test_integer_matmul_without_a_contraction_is_zeros():
    model = Fn(torch.addmm)
    args = (torch.randn(3, 5), torch.randn(3, 0), torch.randn(0, 5))
    edge = litert_torch.convert(model, args)
    np.testing.assert_array_equal(np.asarray(edge(*args)), model(*args).numpy())


def test_narrow_integer_relu_becomes_a_clamp():
    x = _sample(torch.int8, 0)
    counts = op_counts(litert_torch.convert(Fn(torch.relu), (x,)))
    assert "RELU" not in counts and counts.get("MAXIMUM") == 1


class IntConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randint(-3, 4, (4, 2, 3, 3)))

    def forward(self, x):
        return torch.nn.functional.conv2d(x, self.w)


def test_an_op_no_kernel_computes_exactly_is_refused_with_its_source():
    """An int64 convolution (PyTorch computes it; LiteRT's CONV_2D takes float or quantized operands only). The
    error names the PyTorch line."""
    x = torch.randint(-9, 9, (1, 2, 6, 6))
    with pytest.raises(LoweringError, match=r"aten.convolution.* at .*test_integer_kernels.py:\d+ in forward: "
                                            r"CONV_2D of plain int32 values has no LiteRT kernel"):
        litert_torch.convert(IntConv(), (x,))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("options", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1},
                                     {"kernel_size": 3, "stride": 2, "ceil_mode": True}], ids=["2", "pad", "ceil"])
def test_32_bit_max_pooling_is_exact(options, dtype):
    """LiteRT's MAX_POOL_2D takes 8- and 16-bit integers only (float32 is not exact past 2**24): 32-bit values
    pool as the MAXIMUM of one strided slice per window tap."""
    def pool(x):
        return torch.nn.functional.max_pool2d(x, **options)

    g = torch.Generator().manual_seed(0)
    x = torch.randint(-2**30, 2**30, (2, 3, 9, 9), generator=g).to(dtype)
    edge = litert_torch.convert(Fn(pool), (x,))
    for feeds in (x, x.flip(-1) - 7):
        np.testing.assert_array_equal(np.asarray(edge(feeds)), pool(feeds).numpy())


def test_attention_dropout_is_refused():
    def attend(q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1)

    with pytest.raises(LoweringError, match="dropout_p=0.1"):
        litert_torch.convert(Fn(attend), (torch.randn(1, 2, 4, 8),))


@pytest.mark.parametrize("opcode", ["ADD", "LESS"])
def test_a_file_with_plain_int8_operands_of_an_aborting_kernel_is_refused(opcode):
    """Such a file (written by hand or by another tool) takes the runtime down, in a child here; EdgeModel
    refuses it by name before the runtime sees it."""
    from litert_torch import ModelFileError, ModelLoadError
    from litert_torch.runtime import edge_model

    a, b = ir.Tensor("a", SHAPE, np.int8), ir.Tensor("b", SHAPE, np.int8)
    y = ir.Tensor("y", SHAPE, np.bool_ if opcode == "LESS" else np.int8)
    op = ir.Op(opcode, [a, b], [y], {"fused_activation_function": "NONE"} if opcode == "ADD" else {})
    data = serialize(ir.Model([ir.Graph("main", [a, b], [y], [op])],
                              [ir.Signature("serving_default", 0, ["a", "b"], ["y"])]))
    with pytest.raises(ModelLoadError, match="crashed"):
        edge_model.try_in_child(data)
    with pytest.raises(ModelFileError, match=f"{opcode}.*plain int8 operands"):
        litert_torch.EdgeModel(data)
