"""Every documented bad argument raises a LiteRTTorchError subclass whose message names the culprit; through
the CLI it exits with 2 and a short message, never an "internal error"."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import litert_torch
from litert_torch.errors import InvalidArgumentError, LiteRTTorchError, UnknownSignatureError


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


X = (torch.randn(2, 3),)


def _edge():
    return litert_torch.convert(Net().eval(), X)


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
]


@pytest.mark.parametrize("name,call,error,culprit", CASES, ids=[c[0] for c in CASES])
def test_bad_argument_is_typed_and_named(name, call, error, culprit):
    with pytest.raises(error) as info:
        call()
    assert isinstance(info.value, LiteRTTorchError)
    assert culprit in str(info.value)
    assert isinstance(info.value, ValueError)  # code written against the former ValueError still catches it


def test_cli_usage_errors_exit_2(tmp_path):
    from litert_convert.main import main

    source = tmp_path / "net.py"
    source.write_text("import torch\nfrom torch import nn\n\n"
                      "def build():\n    return nn.Linear(3, 2).eval(), (torch.randn(2, 3),)\n")
    out = str(tmp_path / "m.tflite")
    assert main(["convert", f"{source}:build", "-o", out, "--dynamic", "nosuch:0=batch:8", "--quiet"]) == 2
    assert main(["convert", f"{source}:build", "-o", out, "--target", "tpu", "--quiet"]) == 2
    assert main(["convert", f"{source}:build", "-o", out, "--input", "x=1x3x99999999x99999", "--quiet"]) == 2
    assert not (tmp_path / "m.tflite").exists()
