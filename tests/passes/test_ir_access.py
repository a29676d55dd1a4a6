"""The graph IR's typed accessors: a required operand or a constant's data is returned as it is, and a missing
one raises MalformedGraphError naming the op or tensor (the passes and lowerings read operands through them)."""

import numpy as np
import pytest

from litert_torch import ir
from litert_torch.errors import ConversionError, MalformedGraphError


def _conv_without_bias() -> ir.Op:
    x = ir.Tensor("x", (1, 4, 4, 2), np.float32)
    w = ir.Tensor("w", (3, 1, 1, 2), np.float32, np.ones((3, 1, 1, 2), np.float32))
    y = ir.Tensor("y", (1, 4, 4, 3), np.float32)
    return ir.Op("CONV_2D", [x, w, None], [y])


def test_input_returns_the_tensor_it_holds():
    op = _conv_without_bias()
    assert op.input(0) is op.inputs[0]
    assert op.input(1) is op.inputs[1]
    assert op.input(-2) is op.inputs[1]


def test_an_omitted_input_raises_malformed_graph_error_naming_the_op():
    op = _conv_without_bias()
    with pytest.raises(MalformedGraphError, match=r"CONV_2D op has no input 2") as info:
        op.input(2)
    assert isinstance(info.value, ConversionError)
    with pytest.raises(IndexError):  # past the op's inputs: as a list index
        op.input(3)


def test_tensor_inputs_reads_the_leading_inputs():
    op = _conv_without_bias()
    assert op.tensor_inputs(2) == op.inputs[:2]
    assert op.tensor_inputs(0) == []
    with pytest.raises(MalformedGraphError):
        op.tensor_inputs()
    with pytest.raises(MalformedGraphError):
        op.tensor_inputs(3)


def test_values_of_a_constant_and_of_an_activation():
    op = _conv_without_bias()
    w = op.input(1)
    assert w.values is w.data
    np.testing.assert_array_equal(w.values, np.ones((3, 1, 1, 2), np.float32))
    with pytest.raises(MalformedGraphError, match="'x' is read as a constant"):
        op.input(0).values
