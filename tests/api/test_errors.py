"""Bad input: unsupported ops listed all at once with source lines, export failures with the user's line, and
nothing written when conversion fails."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import litert_torch
from litert_torch.errors import ExportError, UnsupportedOpsError
from tests.helpers import litert_warnings


@torch.library.custom_op("litert_test::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("litert_test::enigma", mutates_args=())
def enigma(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@enigma.register_fake
def _(x):
    return torch.empty_like(x)


class TwoUnsupported(nn.Module):
    def forward(self, x):
        y = torch.ops.litert_test.mystery(x)  # LINE_MYSTERY
        y = torch.relu(y)
        y = torch.ops.litert_test.mystery(y)
        return torch.ops.litert_test.enigma(y)  # LINE_ENIGMA


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        for number, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return number
    raise AssertionError(marker)


def test_unsupported_ops_are_listed_together_with_counts_and_source_lines():
    with pytest.raises(UnsupportedOpsError) as info:
        litert_torch.convert(TwoUnsupported(), (torch.randn(3),))
    err = info.value
    by_target = {op.target: op for op in err.ops}
    assert set(by_target) == {"litert_test.mystery.default", "litert_test.enigma.default"}
    assert by_target["litert_test.mystery.default"].count == 2
    assert by_target["litert_test.enigma.default"].count == 1
    here = os.path.basename(__file__)
    assert by_target["litert_test.mystery.default"].location.split(" ")[0].endswith(f"{here}:{_line_of('LINE_MYSTERY')}")
    assert by_target["litert_test.enigma.default"].location.split(" ")[0].endswith(f"{here}:{_line_of('LINE_ENIGMA')}")
    message = str(err)
    assert "2 unsupported ops" in message
    assert "litert_test.mystery.default  (2 nodes)" in message
    assert f"{here}:{_line_of('LINE_ENIGMA')}" in message


def test_ops_run_for_their_side_effects_are_named_not_taken_for_state():
    """An op run for its side effect (ordered by an effect token, which torch.export returns like a buffer
    written) is refused by its name, next to the other unsupported op, not as a buffer the model writes."""

    class Printing(nn.Module):
        def forward(self, a):
            torch.ops.aten._print("checking the input")
            return torch.mode(a, dim=-1).values

    with pytest.raises(UnsupportedOpsError) as info:
        litert_torch.convert(Printing(), (torch.randn(2, 3),))
    assert {op.target for op in info.value.ops} == {"aten.mode.default",
                                                    "aten._print.default (run for its side effect)"}
    assert "writes to" not in str(info.value)


class DataDependent(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # LINE_BRANCH
            return x * 2
        return x - 1


def test_export_failure_keeps_the_explanation_and_names_the_user_line(capfd):
    with pytest.raises(ExportError) as info:
        litert_torch.convert(DataDependent(), (torch.randn(4),))
    message = str(info.value)
    assert "DataDependent" in message
    assert f"{os.path.basename(__file__)}:{_line_of('LINE_BRANCH')}" in message
    assert "data-dependent" in message.lower() or "guard" in message.lower()
    # torch.export prints the failed trace's partial graph to stderr (hundreds of KB for a detection model);
    # the conversion keeps it out, and leaves torch's module as it was
    assert "def forward" not in capfd.readouterr().err
    from torch.export import _trace as export_trace

    assert "print" not in vars(export_trace)


class FailsWhenTraced(nn.Module):
    """Runs in PyTorch, fails only under torch.export; updates its running statistics as it runs."""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(3)  # training mode: each call moves the running mean

    def forward(self, x):
        y = self.norm(x)
        if torch.compiler.is_exporting():
            raise RuntimeError("no tracing here")
        return y


def test_sample_inputs_the_model_does_not_take_are_said_to_be_the_inputs():
    with pytest.raises(litert_torch.SampleInputError) as info:
        litert_torch.convert(nn.Linear(3, 2), (torch.randn(1, 5),))
    assert isinstance(info.value, ExportError) and isinstance(info.value, litert_torch.InvalidArgumentError)
    message = str(info.value)
    assert "Linear does not run on the sample inputs (float32[1, 5])" in message
    assert "mat1 and mat2 shapes cannot be multiplied" in message and len(message.splitlines()) == 1
    # a model that runs in PyTorch but not under torch.export is a conversion failure, not bad input; the
    # PyTorch run that tells them apart leaves the model's buffers as they were
    model = FailsWhenTraced()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ExportError, match="no tracing here") as info:
        litert_torch.convert(model, (torch.randn(4, 3) + 5,))
    assert not isinstance(info.value, litert_torch.SampleInputError)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_a_forward_that_raises_for_its_own_reasons_gets_no_advice_about_the_inputs():
    class Unready(nn.Module):
        def forward(self, x):
            raise RuntimeError("call load_weights() before running the model")  # LINE_UNREADY

    with pytest.raises(ExportError) as info:
        litert_torch.convert(Unready(), (torch.randn(2, 3),))
    assert not isinstance(info.value, litert_torch.SampleInputError) and not getattr(info.value, "hint", None)
    message = str(info.value)
    assert message.startswith("Unready raises in PyTorch itself on the sample inputs (float32[2, 3]) at ")
    assert f"{os.path.basename(__file__)}:{_line_of('LINE_UNREADY')}" in message
    assert message.endswith("RuntimeError: call load_weights() before running the model")


def test_not_a_module():
    with pytest.raises(ExportError, match="needs a torch.nn.Module"):
        litert_torch.convert(lambda x: x, (torch.randn(2),))


def test_failed_conversion_writes_nothing(tmp_path):
    out = tmp_path / "model.tflite"

    def convert_and_export():
        edge = litert_torch.convert(TwoUnsupported(), (torch.randn(3),))
        edge.export(out)

    with pytest.raises(UnsupportedOpsError):
        convert_and_export()
    assert list(tmp_path.iterdir()) == []


def test_export_is_atomic_when_writing_fails(tmp_path, monkeypatch):
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    out = tmp_path / "model.tflite"
    out.write_bytes(b"previous contents")

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        edge.export(out)
    assert out.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.tflite"]


def test_train_mode_batch_norm_module_is_refused_with_advice():
    """A module left in train mode would update its running statistics: refused before any lowering, with the
    advice to call eval()."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))
    with pytest.raises(litert_torch.ConversionError, match=r"running statistics \('1.running_mean' and 5 more\)"
                       r".*call model.eval\(\) first"):
        litert_torch.convert(model.train(), (torch.randn(2, 3, 8, 8),))


class BatchStatistics(nn.Module):
    def forward(self, x, w):
        a = F.batch_norm(x, None, None, w, None, training=True)
        return F.batch_norm(torch.relu(a), None, None, None, w, training=True, eps=1e-3)


def test_batch_norm_by_batch_statistics_converts_and_says_once_how_to_infer():
    """Batch norm asked for batch statistics (training=True) computes what PyTorch computes, each batch normalised
    by its own, with one warning however many there are, saying to use eval mode for inference."""
    x, w = torch.randn(3, 4, 5, 6), torch.rand(4) + 0.5
    with litert_warnings() as records:
        edge = litert_torch.convert(BatchStatistics(), (x, w))
    assert len([r for r in records if "call model.eval()" in r.getMessage()]) == 1
    for batch in (x, torch.randn(3, 4, 5, 6) * 4 + 1):
        want = BatchStatistics()(batch, w).numpy()
        np.testing.assert_allclose(np.asarray(edge(batch.numpy(), w.numpy())), want, rtol=1e-4, atol=1e-4)