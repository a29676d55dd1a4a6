"""Corrupt and hostile .tflite files never take the process down: mutated models through EdgeModel + a call run
or raise a typed error; a file the runtime dies on is caught in a child process as ModelLoadError."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import ModelFileError, ModelLoadError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.flatbuffer.writer import serialize
from litert_torch.runtime import edge_model
from litert_torch.suites import fuzz, runner


def _fuzz(count: int, seed: int) -> dict:
    results = runner.run_cases("fuzz", fuzz.cases(count, seed), jobs=2, timeout=120)
    bad = {case: r for case, r in results.items() if r["status"] not in ("ok", "refused")}
    assert not bad, bad
    assert len(results) == count
    statuses = {r["status"] for r in results.values()}
    assert statuses == {"ok", "refused"}, statuses  # mutations both kept and broke files
    return results


def test_hundreds_of_mutated_models_run_or_raise_typed_errors():
    _fuzz(400, seed=3)


@pytest.mark.slow
def test_twenty_thousand_mutated_models_run_or_raise_typed_errors():
    _fuzz(20000, seed=4)


def test_variable_marks_on_a_later_signature_are_refused():
    """One byte of a shared vtable can mark every int32 activation of a file variable: the runtime then fails
    to reset the state of a signature it has not yet allocated. The check refuses variables that are a graph's
    inputs or outputs, or that an op writes; the seed LLM itself (IF branch subgraphs, two signatures) runs."""
    data = fuzz.seed_model("llm")
    edge = litert_torch.EdgeModel(data)
    for key, sig in edge.signatures.items():
        edge.run(key, tuple(np.zeros(spec.shape, spec.dtype) for spec in sig.inputs))

    def marked(pick):
        model = read_model(data)
        pick(model.subgraphs[1]).is_variable = True
        return serialize(model)

    with pytest.raises(ModelFileError, match="subgraph 1 input '.*tokens' is marked variable"):
        litert_torch.EdgeModel(marked(lambda g: g.inputs[0]))
    with pytest.raises(ModelFileError, match="output .* is marked variable"):
        litert_torch.EdgeModel(marked(lambda g: g.outputs[0]))
    with pytest.raises(ModelFileError, match="writes .*, which is a constant, a variable"):
        litert_torch.EdgeModel(marked(lambda g: g.ops[0].outputs[0]))


def test_reshape_shape_inputs_must_give_the_output_shape():
    """A RESHAPE whose shape input was swapped for another constant (a [1, 256] position table: the CPU
    delegate read it past its end and the process died) or whose shape values disagree with its output is
    refused; -1 and the file as written pass."""
    from litert_torch import ir

    data = fuzz.seed_model("llm")
    model = read_model(data)
    graph = model.subgraphs[1]
    at = next(i for i, op in enumerate(graph.ops) if op.opcode == "RESHAPE" and op.inputs[1].is_constant
              and op.outputs[0].rank > 1)

    def changed(shape_input):
        m = read_model(data)
        m.subgraphs[1].ops[at].inputs[1] = shape_input
        return serialize(m)

    out = graph.ops[at].outputs[0]
    table = ir.Tensor("table", [1, 256], np.int32, np.arange(256, dtype=np.int32).reshape(1, 256))
    with pytest.raises(ModelFileError, match="RESHAPE.*shape input of shape \\[1, 256\\]"):
        litert_torch.EdgeModel(changed(table))
    wrong = list(out.shape[::-1]) if len(set(out.shape)) > 1 else [*out.shape[:-1], out.shape[-1] + 1]
    with pytest.raises(ModelFileError, match="RESHAPE.*shape .* for an output of shape"):
        litert_torch.EdgeModel(changed(ir.Tensor("s", [out.rank], np.int32, np.array(wrong, np.int32))))
    inferred = [*out.shape[:-1], -1]
    litert_torch.EdgeModel(changed(ir.Tensor("s", [out.rank], np.int32, np.array(inferred, np.int32))))


def test_a_depthwise_convolution_without_its_bias_slot_is_refused():
    """A DEPTHWISE_CONV_2D given two inputs (a mutated input list of the cnn seed: the runtime's kernel read a
    bias past them and the process died, in a child here) is refused by name; with its bias slot present it
    runs."""
    from litert_torch.flatbuffer import schema as tables
    from litert_torch.flatbuffer.writer import _packed, _unpacked

    data = fuzz.seed_model("cnn")
    model = _unpacked(data)
    depthwise = tables.BUILTIN_CODES["DEPTHWISE_CONV_2D"]
    op = next(o for o in model.subgraphs[0].operators if model.operatorCodes[o.opcodeIndex].builtinCode == depthwise)
    op.inputs = list(op.inputs[:2])
    broken = _packed(model)
    with pytest.raises(ModelFileError, match="DEPTHWISE_CONV_2D.*2 inputs"):
        litert_torch.EdgeModel(broken)
    with pytest.raises(ModelLoadError, match="crashed \\(SIGSEGV\\)"):
        edge_model.try_in_child(broken)
    edge = litert_torch.EdgeModel(data)
    (spec,) = next(iter(edge.signatures.values())).inputs
    assert np.isfinite(edge(np.ones(spec.shape, np.float32))).all()


def test_checks_that_trip_over_a_file_refuse_it(monkeypatch):
    """An UNPACK of a scalar (a mutated rank in the dynamic seed) is refused by name; a check that fails in an
    unforeseen way on some value still refuses the file with a typed error, never an IndexError."""
    from litert_torch import ir
    from litert_torch.runtime import verify as checks

    data = fuzz.seed_model("dynamic")
    model = read_model(data)
    op = next(o for g in model.subgraphs for o in g.ops if o.opcode == "UNPACK")
    x = op.inputs[0]
    op.inputs[0] = ir.Tensor(x.name, [], x.dtype)  # the same tensor, its rank overwritten
    for other in model.subgraphs[0].ops:
        other.outputs = [op.inputs[0] if t is x else t for t in other.outputs]
    with pytest.raises(ModelFileError, match="UNPACK.*a scalar input"):
        litert_torch.EdgeModel(serialize(model))

    def tripping(op):
        raise IndexError("tuple index out of range")

    monkeypatch.setitem(checks.CHECKS, "UNPACK", tripping)
    with pytest.raises(ModelFileError, match="UNPACK.*cannot be checked: IndexError"):
        litert_torch.EdgeModel(data)


def _crashing_file() -> bytes:
    """A model the LiteRT runtime dies on: a RESHAPE whose shape input is marked omitted (-1)."""
    for seed in fuzz.SEEDS:
        model = read_model(fuzz.seed_model(seed))
        reshapes = [o for g in model.subgraphs for o in g.ops if o.opcode == "RESHAPE" and len(o.inputs) == 2]
        if reshapes:
            reshapes[0].inputs[1] = None
            return serialize(model)
    raise AssertionError("no seed model has a RESHAPE with a shape input")


def test_a_file_the_runtime_dies_on_is_refused_before_it_or_caught_in_a_child():
    data = _crashing_file()
    with pytest.raises(ModelFileError, match="RESHAPE.*required input is missing"):
        litert_torch.EdgeModel(data)
    # the same file handed to the runtime, but in a child process: the crash is a typed error here
    with pytest.raises(ModelLoadError, match="crashed \\(SIGSEGV\\)|could not load"):
        edge_model.try_in_child(data)


def test_files_with_ops_the_checks_do_not_cover_are_tried_in_a_child_first(monkeypatch):
    class Cumulative(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1)

    data = litert_torch.convert(Cumulative(), (torch.randn(2, 5),)).flatbuffer
    from litert_torch.runtime import verify as checks

    monkeypatch.delitem(checks.CHECKS, "CUMSUM")  # as if CUMSUM were an op kind without a check of its own
    assert checks.verify(data).unchecked == {"CUMSUM"}
    tried = []
    monkeypatch.setattr(edge_model, "try_in_child", lambda d: tried.append(len(d)))
    edge = litert_torch.EdgeModel(data)
    assert tried == [len(data)]
    x = torch.randn(2, 5)
    np.testing.assert_allclose(edge(x), torch.cumsum(x, 1).numpy(), rtol=1e-5, atol=1e-6)
    litert_torch.EdgeModel(data, isolate=False)
    assert len(tried) == 1


def test_isolated_load_of_a_good_file_and_a_foreign_one(tmp_path):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    edge = litert_torch.convert(model, (torch.randn(1, 4),))
    parsed = read_model(edge.flatbuffer)
    parsed.metadata = {}  # a file some other tool wrote
    path = tmp_path / "foreign.tflite"
    path.write_bytes(serialize(parsed))
    loaded = litert_torch.EdgeModel.load(path, isolate=True)
    x = torch.randn(1, 4)
    np.testing.assert_allclose(loaded(x)["output_0"] if isinstance(loaded(x), dict) else loaded(x),
                               model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mutation", ["truncated", "bad_shape", "bad_index", "bad_metadata"])
def test_typical_corruptions_name_what_is_wrong(mutation):
    data = bytearray(fuzz.seed_model("cnn"))
    if mutation == "truncated":
        data = data[: len(data) // 3]
    elif mutation == "bad_shape":
        model = read_model(bytes(data))
        conv = next(o for o in model.subgraphs[0].ops if o.opcode == "CONV_2D")
        conv.outputs[0].shape = (1, 9, 9, 4)
        data = serialize(model)
    elif mutation == "bad_index":
        model = read_model(bytes(data))
        fc = next(o for o in model.subgraphs[0].ops if o.opcode == "FULLY_CONNECTED")
        fc.inputs[2] = fc.inputs[1]  # the weights where the bias belongs
        data = serialize(model)
    else:
        model = read_model(bytes(data))
        model.metadata["litert_torch.io"] = b'{"version": 1, "signatures": {"serving_default": {"inputs": ["zz"]}}}'
        data = serialize(model)
    with pytest.raises(ModelFileError) as info:
        litert_torch.EdgeModel(bytes(data))
    assert len(str(info.value)) < 400



def _crashing_unchecked_file(monkeypatch) -> bytes:
    """The cnn seed with its DEPTHWISE_CONV_2D given two inputs (the runtime reads a bias past them and dies),
    and the checks told nothing of that op kind: a file that passes verify, as a file with an op the checks do
    not cover would."""
    from litert_torch.flatbuffer import schema as tables
    from litert_torch.flatbuffer.writer import _packed, _unpacked
    from litert_torch.runtime import op_checks
    from litert_torch.runtime import verify as checks

    model = _unpacked(fuzz.seed_model("cnn"))
    depthwise = tables.BUILTIN_CODES["DEPTHWISE_CONV_2D"]
    op = next(o for o in model.subgraphs[0].operators if model.operatorCodes[o.opcodeIndex].builtinCode == depthwise)
    op.inputs = list(op.inputs[:2])
    monkeypatch.delitem(checks.CHECKS, "DEPTHWISE_CONV_2D")
    monkeypatch.delitem(op_checks.ARITY, "DEPTHWISE_CONV_2D", raising=False)
    data = _packed(model)
    assert checks.verify(data).unchecked == {"DEPTHWISE_CONV_2D"}
    return data


def test_a_file_that_passes_the_checks_and_crashes_the_runtime_is_a_typed_error(monkeypatch, tmp_path):
    """load() tries such a file in a child process first (its op kind is unchecked; isolate=True does so for
    any file): the crash there is a ModelLoadError naming the signal, and this process goes on."""
    data = _crashing_unchecked_file(monkeypatch)
    path = tmp_path / "crash.tflite"
    path.write_bytes(data)
    with pytest.raises(ModelLoadError, match="crashed \\(SIGSEGV\\)"):
        litert_torch.EdgeModel.load(path)
    with pytest.raises(ModelLoadError, match="crashed \\(SIGSEGV\\)"):
        litert_torch.EdgeModel.load(path, isolate=True)


def test_isolate_true_runs_every_signature_in_a_child_before_loading(monkeypatch):
    """A file whose every op is checked is still run in a child first when isolate=True, on every signature;
    without isolate it is not."""
    import subprocess

    data = fuzz.seed_model("two_signatures")
    children = []
    real_run = subprocess.run

    def recording(args, *a, **k):
        children.append(list(args))
        return real_run(args, *a, **k)

    monkeypatch.setattr(subprocess, "run", recording)
    edge = litert_torch.EdgeModel(data, isolate=True)
    assert len(children) == 1 and "get_signature_runner" in " ".join(children[0])
    assert sorted(edge.signatures) == ["a", "b"]
    litert_torch.EdgeModel(data)
    assert len(children) == 1


def test_the_cli_tries_foreign_files_in_a_child_and_exits_2_when_they_crash(monkeypatch, tmp_path):
    from click.testing import CliRunner
    from litert_convert.main import cli

    tried = []
    real = edge_model.try_in_child
    monkeypatch.setattr(edge_model, "try_in_child", lambda d: (tried.append(len(d)), real(d))[1])
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    ours = litert_torch.convert(model, (torch.randn(1, 4),)).flatbuffer
    parsed = read_model(ours)
    parsed.metadata = {}  # a file some other tool wrote
    (tmp_path / "ours.tflite").write_bytes(ours)
    (tmp_path / "foreign.tflite").write_bytes(serialize(parsed))
    for name, children in [("ours.tflite", 0), ("foreign.tflite", 1)]:
        result = CliRunner().invoke(cli, ["bench", str(tmp_path / name), "--runs", "2", "--quiet"])
        assert result.exit_code == 0, result.output
        assert len(tried) == children, name

    (tmp_path / "crash.tflite").write_bytes(_crashing_unchecked_file(monkeypatch))
    result = CliRunner().invoke(cli, ["bench", str(tmp_path / "crash.tflite"), "--runs", "2"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert "crashed (SIGSEGV)" in result.output and len(lines) <= 3 and "Traceback" not in result.output, lines
