"""The zoo exported with torch.onnx.export (the dynamo exporter, and the TorchScript one where it works),
converted from ONNX and compared with ONNX Runtime within the core tolerance; validate_onnx's report."""

import contextlib
import io
import warnings

import numpy as np
import pytest
import torch

import litert_torch
from tests.models import zoo

CASES = {c.name: c for c in zoo.MODELS}
# The default run exports a representative set; the rest of the zoo is marked slow.
QUICK = ["mlp", "convnet", "resnet18", "mobilenet_v3_small", "bert", "lstm_2layer", "gru", "unet",
         "super_resolution", "audio_groupnorm_prelu"]
SLOW = ["mobilenet_v2", "efficientnet_b0", "squeezenet1_1", "regnet_x_400mf", "shufflenet_v2_x1_0", "convnext_tiny",
        "deeplabv3_mobilenet_v3_large", "gpt2", "bilstm"]
LEGACY = ["resnet18", "lstm_2layer", "bert"]


def export(name: str, path, dynamo: bool):
    case = CASES[name]
    torch.manual_seed(0)
    model = zoo.build(case)
    inputs = tuple(case.inputs(1))
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, str(path), dynamo=dynamo)
    return inputs


def check(name, tmp_path, dynamo=True):
    path = tmp_path / f"{name}.onnx"
    inputs = export(name, path, dynamo)
    edge = litert_torch.convert_onnx(path)
    report = litert_torch.validate_onnx(path, edge, inputs=[tuple(inputs)])
    assert report.passed, report.render()
    assert report.reference == "onnxruntime-cpu"


@pytest.mark.parametrize("name", QUICK + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW])
def test_exported_model_matches_onnxruntime(name, tmp_path):
    check(name, tmp_path)


@pytest.mark.parametrize("name", LEGACY)
def test_torchscript_exporter_models(name, tmp_path):
    check(name, tmp_path, dynamo=False)


def test_validate_onnx_draws_inputs_and_reports(tmp_path):
    path = tmp_path / "convnet.onnx"
    export("convnet", path, True)
    report = litert_torch.validate_onnx(path)
    assert report.passed and report.inputs == 4
    assert [b.backend for b in report.backends] == ["litert-xnnpack", "litert-reference"]
    data = report.to_json()
    assert data["reference"] == "onnxruntime-cpu"


def test_source_map_names_the_onnx_nodes(tmp_path):
    path = tmp_path / "convnet.onnx"
    export("convnet", path, True)
    edge = litert_torch.convert_onnx(path, channel_last_io=True)
    targets = {entry["target"] for entry in edge.source_map if entry}
    assert "onnx::Conv" in targets and all(t.startswith("onnx::") for t in targets)
    assert edge.delegate_plan.targets["cpu"].fully_delegated
    x = np.random.default_rng(0).standard_normal(edge.signatures["serving_default"].inputs[0].shape)
    assert np.isfinite(np.asarray(edge(x.astype(np.float32)))).all()
