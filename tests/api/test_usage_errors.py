"""Every documented bad argument raises a LiteRTTorchError subclass whose message names the culprit; through
the CLI it exits with 2 and a short message, never an "internal error"."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.export import Dim

import litert_torch
from litert_torch.errors import (
    CalibrationError, InvalidArgumentError, LiteRTTorchError, ModelFileError, ModelInputError, OnnxError,
    UnknownSignatureError,
)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


X = (torch.randn(2, 3),)
_EDGE = []


def _edge():
    if not _EDGE:
        _EDGE.append(litert_torch.convert(Net().eval(), X))
    return _EDGE[0]


def _write(tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


CASES = [
    ("unknown target", lambda: litert_torch.convert(Net().eval(), X, target="tpu"), InvalidArgumentError, "tpu"),
    ("calibration without quantize", lambda: litert_torch.convert(Net().eval(), X, calibration_data=[X]),
     InvalidArgumentError, "quantize"),
    ("dynamic dim naming no argument",
     lambda: litert_torch.convert(Net().eval(), X, dynamic_shapes={"nosuch": {0: Dim("batch", max=8)}}),
     InvalidArgumentError, "nosuch"),
    ("buckets without dynamic_shapes", lambda: litert_torch.convert(Net().eval(), X, buckets={"batch": [1, 2]}),
     InvalidArgumentError, "dynamic_shapes"),
    ("bad signature name", lambda: litert_torch.signature("not a name", Net(), X), InvalidArgumentError,
     "not a name"),
    ("duplicate signature", lambda: litert_torch.signature("a", Net(), X).signature("a", Net(), X),
     InvalidArgumentError, "'a'"),
    ("empty signature set", lambda: litert_torch.SignatureSet().convert(), InvalidArgumentError, "no signatures"),
    ("unknown kernels", lambda: litert_torch.EdgeModel(_edge().flatbuffer, kernels="fast"), InvalidArgumentError,
     "fast"),
    ("bad thread count", lambda: setattr(_edge(), "num_threads", -1), InvalidArgumentError, "-1"),
    ("unknown signature", lambda: _edge().signature_runner("decode"), UnknownSignatureError, "decode"),
    ("sample_args as a list", lambda: litert_torch.convert(Net().eval(), [X[0]]), InvalidArgumentError,
     "sample_args is a list"),
    ("sample_args as a dict", lambda: litert_torch.convert(Net().eval(), {"x": X[0]}), InvalidArgumentError,
     "sample_kwargs"),
    ("model file missing", lambda: litert_torch.EdgeModel.load("/nonexistent/model.tflite"), ModelFileError,
     "/nonexistent/model.tflite"),
    ("model file corrupt",
     lambda: litert_torch.EdgeModel.load(_write(Path(tempfile.mkdtemp()), "bad.tflite", b"\x00" * 64)),
     ModelFileError, "bad.tflite"),
    ("input of the wrong shape", lambda: _edge()(torch.randn(5, 7)), ModelInputError, "[5, 7]"),
    ("too many inputs", lambda: _edge()(*X, *X), ModelInputError, "got (T, T)"),
    ("unknown quantization mode", lambda: litert_torch.quantize_model(_edge(), "int4"), InvalidArgumentError, "int4"),
    ("too few calibration samples", lambda: litert_torch.quantize_model(_edge(), "int8", calibration_data=[X]),
     CalibrationError, "8"),
    ("ONNX file missing", lambda: litert_torch.convert_onnx("/nonexistent/m.onnx"), OnnxError,
     "/nonexistent/m.onnx"),
    ("ONNX file corrupt", lambda: litert_torch.convert_onnx(_write(Path(tempfile.mkdtemp()), "bad.onnx", b"\x07junk")),
     OnnxError, "bad.onnx"),
    ("sampling temperature", lambda: _sampling(temperature=-1.0), InvalidArgumentError, "temperature"),
    ("sampling top_p", lambda: _sampling(top_p=1.5), InvalidArgumentError, "top_p"),
    ("LLM export of a missing directory", lambda: _export_hf("/nonexistent/llm"), ModelFileError, "/nonexistent/llm"),
    ("LLM export with an empty prefill", lambda: _export_hf("/nonexistent/llm", prefill_lengths=[0]),
     InvalidArgumentError, "prefill_lengths"),
    ("validate against another module's model",
     lambda: litert_torch.validate(_TwoOutputs().eval(), X, _edge(), backends=("xnnpack",)), InvalidArgumentError,
     "output"),
    ("view on a port out of range", lambda: _edge().view(port=70000, open_browser=False), InvalidArgumentError,
     "70000"),
    ("view of something not a model", lambda: litert_torch.view(42, open_browser=False), InvalidArgumentError,
     "int"),
    ("view validating and given a report", lambda: litert_torch.view(_edge(), module=Net(), report=[]),
     InvalidArgumentError, "report"),
    ("view exported over a file", lambda: _edge().export_view(_write(Path(tempfile.mkdtemp()), "f", b"x")),
     InvalidArgumentError, "not a folder"),
]


class _TwoOutputs(nn.Module):
    def forward(self, x):
        return x + 1, x * 2


def _export_hf(model, **options):
    from litert_torch.generative.export_hf import export

    export.export(model=model, output_dir=tempfile.mkdtemp(), **options)


def _sampling(**options):
    from litert_torch.generative import Sampling

    Sampling(**options).check()


@pytest.mark.parametrize("name,call,error,culprit", CASES, ids=[c[0] for c in CASES])
def test_bad_argument_is_typed_and_named(name, call, error, culprit):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, LiteRTTorchError)
    assert culprit in str(info.value)
    if not isinstance(info.value, (OnnxError, CalibrationError)):  # conversion errors by kind
        assert isinstance(info.value, ValueError)  # code written against the former ValueError still catches it


FIXTURE = "import torch\nfrom torch import nn\n\ndef build():\n    return nn.Linear(3, 2).eval(), (torch.randn(2, 3),)\n"

# (name, argv with {src} the fixture source and {tmp} the test's directory, what the message must name)
CLI_CASES = [
    ("dynamic dim naming no argument", ["convert", "{src}", "-o", "{tmp}/m.tflite", "--dynamic", "nosuch:0=batch:8"],
     "nosuch"),
    ("malformed dynamic spec", ["convert", "{src}", "-o", "{tmp}/m.tflite", "--dynamic", "x:zero=batch"], "x:zero=batch"),
    ("unknown target", ["convert", "{src}", "-o", "{tmp}/m.tflite", "--target", "tpu"], "tpu"),
    ("oversized input", ["convert", "{src}", "-o", "{tmp}/m.tflite", "--input", "x=1x3x99999999x99999"],
     "4 GiB"),
    ("missing source file", ["convert", "{tmp}/nosuch.py:build", "-o", "{tmp}/m.tflite"], "nosuch.py"),
    ("missing builder", ["convert", "{tmp}/net.py:nosuch", "-o", "{tmp}/m.tflite"], "nosuch"),
    ("existing output without --force", ["convert", "{src}", "-o", "{tmp}/exists.tflite"], "--force"),
    ("corrupt model to inspect", ["inspect", "{tmp}/bad.tflite"], "bad.tflite"),
    ("missing model to bench", ["bench", "{tmp}/none.tflite"], "none.tflite"),
    ("malformed thread counts", ["bench", "{tmp}/bad.tflite", "--threads", "two"], "two"),
    ("missing Hugging Face directory", ["export-hf", "{tmp}/no_model", "-o", "{tmp}/m.litertlm"], "no_model"),
    ("corrupt model to view", ["view", "{tmp}/bad.tflite", "--no-browser"], "bad.tflite"),
    ("view --force without --export", ["view", "{tmp}/bad.tflite", "--force"], "--export"),
    ("view --input without --validate", ["view", "{tmp}/bad.tflite", "--input", "x=1x3:float32"], "--validate"),
    ("view exported into a full folder", ["view", "{tmp}/bad.tflite", "--export", "{tmp}"], "not empty"),
]


@pytest.mark.parametrize("name,argv,culprit", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_usage_error_exits_2_and_names_the_culprit(name, argv, culprit, tmp_path, capsys):
    from litert_convert.main import main

    (tmp_path / "net.py").write_text(FIXTURE)
    (tmp_path / "bad.tflite").write_bytes(b"\x00" * 64)
    (tmp_path / "exists.tflite").write_bytes(b"keep")
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [a.format(src=f"{tmp_path}/net.py:build", tmp=tmp_path) for a in argv]
    code = main([*args, "--quiet"] if args[0] != "inspect" else args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert culprit in err, err
    assert "internal error" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 6, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, nothing removed
    assert (tmp_path / "exists.tflite").read_bytes() == b"keep"


