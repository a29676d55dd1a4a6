"""litert_torch.debug: the smallest parts of a model that keep it from converting, each a standalone program
whose reproduction script fails the same way."""

from __future__ import annotations

import ast
import operator

import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import debug
from litert_torch.errors import ModelNotExportableError, UnsupportedOpsError

_LIB = torch.library.Library("debug_test", "DEF")
_LIB.define("unlowered(Tensor x) -> Tensor")
_LIB.define("mixed(Tensor x, Tensor w) -> Tensor")


@torch.library.impl(_LIB, "unlowered", "CompositeExplicitAutograd")
def _unlowered(x):
    return x * 2 + 1


@torch.library.impl(_LIB, "unlowered", "Meta")
def _unlowered_meta(x):
    return torch.empty_like(x)


@torch.library.impl(_LIB, "mixed", "CompositeExplicitAutograd")
def _mixed(x, w):
    return x @ w.t()


@torch.library.impl(_LIB, "mixed", "Meta")
def _mixed_meta(x, w):
    return x.new_empty((*x.shape[:-1], w.shape[0]))


UNLOWERED = torch.ops.debug_test.unlowered.default
MIXED = torch.ops.debug_test.mixed.default


class TwoBadOps(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        a = UNLOWERED(h)  # the first culprit
        b = MIXED(torch.sigmoid(a), self.fc.weight)  # the second, reading a parameter
        return b * 3 + UNLOWERED(self.fc.weight).sum()  # no culprit: it reads constants alone, and is folded


def _calls(gm: torch.fx.GraphModule) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def test_each_failing_op_is_one_culprit_with_its_inputs_and_line():
    model = TwoBadOps().eval()
    x = torch.randn(2, 8)
    culprits = list(debug.find_culprits(model, (x,)))

    assert [_calls(c.graph_module) for c in culprits] == [[UNLOWERED], [MIXED]]
    first, second = culprits
    with torch.no_grad():
        h = torch.relu(model.fc(x))
        assert torch.equal(first.inputs[0], h)  # the value it had in the model
        assert torch.equal(second.inputs[0], torch.sigmoid(_unlowered(h)))
    # a parameter is a constant of the part, as the converter sees it in the model, not an input
    assert len(second.inputs) == 1
    assert [torch.equal(b, model.fc.weight) for b in second.graph_module.buffers()] == [True]
    assert torch.allclose(second.graph_module(*second.inputs), _mixed(*second.inputs, model.fc.weight))
    assert [c.targets for c in culprits] == [["debug_test.unlowered.default"], ["debug_test.mixed.default"]]
    for culprit in culprits:
        assert "unsupported op" in culprit.error and culprit.targets[0].rsplit(".", 1)[0] in culprit.error
        assert culprit.locations and culprit.locations[0].startswith("tests/api/test_debug.py:")
        assert culprit.stack_traces
    assert first.locations[0] != second.locations[0]


def test_the_reproduction_script_fails_as_the_model_does():
    model = TwoBadOps().eval()
    (_, culprit) = debug.find_culprits(model, (torch.randn(2, 8),))
    code = culprit.print_code(print_output=False)
    assert code == culprit.code
    ast.parse(code)
    assert code.startswith("# UnsupportedOpsError")
    assert "_edge_model = litert_torch.convert(_module.eval(), _args)" in code
    scope: dict = {}
    with pytest.raises(UnsupportedOpsError, match="debug_test.mixed"):
        exec(compile(code, "<culprit>", "exec"), scope)
    # the script's module holds the part's constant (the weight) under the name its graph reads
    assert [name for name, _ in scope["_module"].named_buffers()] == list(scope["_constants"])
    assert [torch.equal(v, model.fc.weight) for v in scope["_constants"].values()] == [True]  # 64 values: as is
    # the readable form is the same module and inputs, and is what str() shows
    assert str(culprit) == culprit.print_readable(print_output=False)
    assert "_args = (" in str(culprit)


def test_inputs_are_written_as_values_when_small_and_like_them_when_large():
    small = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    assert eval(debug._input_code(small), {"torch": torch}).equal(small)
    large = torch.randint(5, 9, (10, 20), dtype=torch.int64)
    made = eval(debug._input_code(large), {"torch": torch})
    assert made.shape == large.shape and made.dtype == large.dtype
    assert int(made.min()) >= 5 and int(made.max()) <= 8
    floats = eval(debug._input_code(torch.randn(3, 40)), {"torch": torch})
    assert floats.shape == (3, 40) and floats.dtype == torch.float32
    # one value throughout (a zero state) is written as it is, whatever the size; non-finite values too
    assert debug._input_code(torch.zeros(10, 10)) == "torch.full((10, 10), 0.0, dtype=torch.float32)"
    odd = torch.tensor([float("nan"), float("-inf"), 1.5])
    assert debug._input_code(odd) == "torch.tensor([float('nan'), float('-inf'), 1.5], dtype=torch.float32)"
    assert torch.allclose(eval(debug._input_code(odd), {"torch": torch}), odd, equal_nan=True)


def test_a_model_that_converts_has_no_culprits():
    assert list(debug.find_culprits(nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval(), (torch.randn(1, 4),))) == []


def test_ops_alike_are_converted_once(monkeypatch):
    class Repeated(nn.Module):
        def forward(self, x):
            for _ in range(4):
                x = UNLOWERED(x) + 1
            return x

    tried = []
    real = debug._conversion_failure
    monkeypatch.setattr(debug, "_conversion_failure", lambda gm, inputs, rt: tried.append(_calls(gm)) or real(gm, inputs, rt))
    culprits = list(debug.find_culprits(Repeated().eval(), (torch.randn(3),)))
    assert len(culprits) == 4  # one per occurrence
    assert tried.count([UNLOWERED]) == 1  # same shapes and dtypes: converted alone once
    assert all(c.error == culprits[0].error for c in culprits)


def test_runtime_errors_adds_the_call_to_the_reproduction():
    culprits = list(debug.find_culprits(TwoBadOps().eval(), (torch.randn(2, 8),), runtime_errors=True))
    assert len(culprits) == 2
    assert culprits[0].code.rstrip().endswith("_edge_model(*_args)")


def test_failures_only_in_combination_are_minified():
    class Chain(nn.Module):
        def forward(self, x):
            a = x + 1
            b = a * 2
            c = torch.tanh(b)
            return c - 3

    add, mul = torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor

    def both(gm, inputs):  # no single op holds this; an add feeding a mul does
        return {add, mul} <= set(_calls(gm))

    results = list(debug._search_model(both, Chain().eval(), (torch.randn(4),)))
    assert len(results) == 1
    assert set(_calls(results[0].graph_module)) == {add, mul}  # not the tanh or the sub


def test_search_model_yields_each_op_its_predicate_holds_for():
    class Subs(nn.Module):
        def forward(self, x, y):
            return (x - 1) * (y + 1) - x

    def has_sub(gm, inputs):
        return torch.ops.aten.sub.Tensor in _calls(gm)

    results = list(debug._search_model(has_sub, Subs().eval(), (torch.randn(3), torch.randn(3))))
    assert [_calls(r.graph_module) for r in results] == [[torch.ops.aten.sub.Tensor]] * 2
    x_minus_1 = results[0]
    assert torch.equal(x_minus_1.graph_module(*x_minus_1.inputs), x_minus_1.inputs[0] - 1)


def test_an_exported_program_is_searched_as_it_is():
    program = torch.export.export(TwoBadOps().eval(), (torch.randn(2, 8),))
    assert len(list(debug.find_culprits(program))) == 2


def test_a_model_torch_export_cannot_trace_is_a_value_error():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    with pytest.raises(ModelNotExportableError, match="not exportable") as info:
        list(debug.find_culprits(DataDependent(), (torch.randn(3),)))
    assert isinstance(info.value, ValueError)


def test_reachable_as_in_the_official_package():
    import litert_torch.debug as module

    assert litert_torch.debug is module
    assert module.find_culprits is debug.find_culprits and callable(module._search_model)


def test_parts_read_constants_as_the_model_does():
    """An LSTM's weights and zero initial state, a batch norm's statistics: constants in the model, so constants
    in the part tried alone, which then converts as it does in the model (it is no culprit)."""

    class Layers(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
            self.lstm, self.gru = nn.LSTM(4, 8, batch_first=True), nn.GRU(8, 8, batch_first=True)

        def forward(self, image):
            x = self.bn(self.conv(image)).flatten(2).transpose(1, 2)
            h, _ = self.lstm(x)
            g, _ = self.gru(h)
            return UNLOWERED(g)

    culprits = list(debug.find_culprits(Layers().eval(), (torch.randn(1, 3, 6, 6),)))
    assert [c.targets for c in culprits] == [["debug_test.unlowered.default"]]


def test_an_op_run_for_its_side_effect_is_a_culprit_of_its_own():
    """An op ordered by an effect token (a print) and an unsupported op beside it: each named as the op."""

    class Printing(nn.Module):
        def forward(self, a):
            torch.ops.aten._print("checking the input")
            return torch.mode(a, dim=-1).values + 1

    culprits = list(debug.find_culprits(Printing(), (torch.randn(2, 3),)))
    assert sorted(c.targets for c in culprits) == [["aten._print.default"], ["aten.mode.default"]]
