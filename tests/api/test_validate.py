"""litert_torch.validate: passing reports, the JSON schema, and a broken lowering caught at its layer."""

import json
import os

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch.lower.aten import conv as conv_lowering
from tests.models.zoo import MODELS, build


def test_passing_report_on_a_zoo_model():
    case = next(c for c in MODELS if c.name == "convnet")
    model = build(case)
    report = litert_torch.validate(model, case.inputs(1))
    assert report.passed
    by_backend = {b.backend: b for b in report.backends}
    assert by_backend["litert-xnnpack"].status == "ran" and by_backend["litert-reference"].status == "ran"
    output = by_backend["litert-xnnpack"].outputs[0]
    assert output.max_abs_error <= 1e-4 * 1 + 1e-5 and output.cosine > 0.9999
    assert output.top1_agreement == 1.0 and output.top5_agreement == 1.0  # [batch, 10] class scores
    assert report.inputs == 4  # the sample and three random draws
    assert "validation: PASS" in report.render()


def _cloud_stack_available():
    try:
        from litert_torch.validation.cloud import import_torchax

        import_torchax()
        import jax  # noqa: F401
        return True
    except Exception:
        return False


def test_cloud_backend_runs_or_says_why_not():
    case = next(c for c in MODELS if c.name == "convnet")
    model = build(case)
    report = litert_torch.validate(model, case.inputs(1), backends=("cloud",))
    (cloud,) = report.backends
    if not _cloud_stack_available():
        assert cloud.status == "skipped" and "torchax" in cloud.reason
        assert not report.passed  # nothing ran on the edge: no evidence either way
        return
    assert cloud.status == "ran" and cloud.backend.startswith("cloud-xla-")  # the backend that really ran
    assert cloud.passed, report.render()
    # Not the torch-tpu device path, and the report says why (no torch-tpu on this machine).
    assert cloud.reason.startswith("not torch-tpu: torch-tpu")


def test_tpu_precision_emulation_shows_the_drift():
    if not _cloud_stack_available():
        pytest.skip("torchax/jax not installed (the cloud extra)")
    case = next(c for c in MODELS if c.name == "convnet")
    model = build(case)
    exact = litert_torch.validate(model, case.inputs(1), backends=("cloud",))
    emulated = litert_torch.validate(model, case.inputs(1), backends=("cloud",), tpu_precision=True)
    assert "TPU matmul precision emulated" in emulated.backends[0].backend
    exact_err = exact.backends[0].outputs[0].max_rel_error
    drift = emulated.backends[0].outputs[0].max_rel_error
    assert exact_err < 1e-5 and 1e-4 < drift < 1e-1  # bfloat16 multiplies: ~1e-3 relative


def test_json_schema():
    report = litert_torch.validate(nn.Sequential(nn.Linear(8, 6), nn.Tanh()).eval(), (torch.randn(2, 8),))
    data = json.loads(json.dumps(report.to_json()))
    assert data["schema_version"] == 1 and data["passed"] is True
    assert data["tolerance"] == {"rtol": 1e-4, "atol": 1e-5,
                                 "rule": "max|edge - ref| <= rtol * max|ref| + atol, per output"}
    backend = data["backends"][0]
    assert set(backend) == {"backend", "status", "reason", "passed", "tolerance", "outputs"}
    assert backend["tolerance"] == {"rtol": 1e-4, "atol": 1e-5}
    assert set(backend["outputs"][0]) == {"name", "shape", "max_abs_error", "max_rel_error", "mean_abs_error",
                                          "cosine", "passed", "top1_agreement", "top5_agreement"}
    assert data["divergence"] is None


class ThreeConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.c = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.bn(self.a(x)))
        x = torch.relu(self.b(x))  # LINE_B
        return self.c(x)


def test_broken_lowering_is_caught_at_its_layer(monkeypatch):
    torch.manual_seed(0)
    model = ThreeConvs().eval()
    with torch.no_grad():
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.running_mean.normal_()
    x = torch.randn(1, 3, 12, 12)
    original = conv_lowering.conv2d_nhwc

    def wrong_padding_on_b(ctx, x, weight, bias, stride, padding, dilation, groups, out_nchw):
        if ctx.node.name == "conv2d_1":
            padding = [0, 0]  # same output size (pads 0 before, 2 after), values shifted by a pixel
        return original(ctx, x, weight, bias, stride, padding, dilation, groups, out_nchw)

    monkeypatch.setattr(conv_lowering, "conv2d_nhwc", wrong_padding_on_b)
    edge = litert_torch.convert(model, (x,))
    report = litert_torch.validate(model, (x,), edge)
    assert not report.passed
    d = report.divergence
    assert d is not None, report.render()
    assert d.node == "conv2d_1" and d.target == "aten.convolution.default"
    line = next(i for i, text in enumerate(open(__file__), 1) if "LINE_B" in text and "next(" not in text)
    assert d.location.split(" ")[0].endswith(f"{os.path.basename(__file__)}:{line}")
    assert d.opcode == "CONV_2D"
    assert d.previous_error < 1e-4  # the layers before it (conv a with its folded batch norm) match
    assert "first divergent node: conv2d_1" in report.render()


def test_a_model_that_traces_differently_from_how_it_runs_is_named_so():
    """The converted model follows torch.export's program; when that program itself departs from eager PyTorch
    (code branching on tracing), the report says so instead of blaming a layer or the kernels."""

    class TracesDifferently(nn.Module):
        def forward(self, x):
            if torch.compiler.is_compiling():
                return x * 2.0
            return x * 3.0

    x = torch.randn(2, 5)
    report = litert_torch.validate(TracesDifferently(), (x,), backends=("reference",))
    assert not report.passed and report.divergence is None
    assert "torch.export's program departs from eager PyTorch itself" in report.render()


def test_channel_last_models_validate_in_pytorch_layout():
    case = next(c for c in MODELS if c.name == "convnet")
    model = build(case)
    x = case.inputs(1)
    edge = litert_torch.convert(model, x, channel_last_io=True)
    assert litert_torch.validate(model, x, edge, backends=("xnnpack",)).passed


def _parse_html(text):
    from html.parser import HTMLParser

    class Collector(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.text, self.stack = [], [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            if tag not in ("meta", "br", "link"):  # HTML void elements
                self.stack.append(tag)

        def handle_startendtag(self, tag, attrs):  # <line ... /> in the SVG
            self.tags.append(tag)

        def handle_endtag(self, tag):
            assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}>"
            self.stack.pop()

        def handle_data(self, data):
            self.text.append(data)

    collector = Collector()
    collector.feed(text)
    collector.close()
    assert not collector.stack, f"unclosed tags {collector.stack}"
    return collector.tags, " ".join(collector.text)


def test_html_report_has_the_plot_and_the_tables(monkeypatch, tmp_path):
    torch.manual_seed(0)
    model = ThreeConvs().eval()
    x = torch.randn(1, 3, 12, 12)
    original = conv_lowering.conv2d_nhwc

    def wrong_padding_on_b(ctx, x, weight, bias, stride, padding, dilation, groups, out_nchw):
        if ctx.node.name == "conv2d_1":
            padding = [0, 0]
        return original(ctx, x, weight, bias, stride, padding, dilation, groups, out_nchw)

    monkeypatch.setattr(conv_lowering, "conv2d_nhwc", wrong_padding_on_b)
    report = litert_torch.validate(model, (x,))
    tags, text = _parse_html(report.to_html())
    assert "svg" in tags and "polyline" in tags and tags.count("circle") >= len(report.layers)
    assert tags.count("table") == 2  # outputs and layers
    assert "first divergent: conv2d_1" in text and "FAIL" in text
    assert len(report.layers) >= 3 and report.to_json()["layers"][0]["passed"] is True


def test_html_report_of_a_passing_model():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10)).eval()
    report = litert_torch.validate(model, (torch.randn(1, 3, 8, 8),), per_layer=True)
    assert report.passed and report.layers and all(layer.passed for layer in report.layers)
    tags, text = _parse_html(report.to_html())
    assert "svg" in tags and "PASS" in text and "100% / 100%" in text


def test_the_torch_tpu_steps_on_another_device():
    """The torch-tpu path's steps (copy the module, move inputs, run, bring outputs back) on the CPU device:
    this machine has no TPU, so the real device is only named."""
    from litert_torch.validation.cloud import run_on_torch_tpu, torch_tpu_unavailable

    assert "not installed" in torch_tpu_unavailable()
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    sets = [((torch.randn(2, 4),), {}), ((torch.randn(2, 4),), {})]
    label, outputs = run_on_torch_tpu(model, sets, device="cpu")
    assert label == "torch-cpu"
    for (args, _), out in zip(sets, outputs):
        assert torch.equal(out, model(*args))


def test_gpu_error_is_reported_beside_xnnpack_with_its_own_tolerance():
    from litert_torch.validation.validate import GPU_RTOL
    from tests.helpers import gpu_device_or_skip

    gpu_device_or_skip()
    case = next(c for c in MODELS if c.name == "convnet")
    model, (x,) = build(case).eval(), case.inputs(1)
    edge = litert_torch.convert(model, (x,))
    report = litert_torch.validate(model, (x,), edge, backends=("xnnpack", "gpu"))
    by_backend = {b.backend: b for b in report.backends}
    gpu = by_backend["litert-gpu"]
    assert gpu.status == "ran" and gpu.passed and gpu.rtol == GPU_RTOL
    # the worst case over the inputs covers the sample input's own error on the GPU
    direct = np.abs(np.asarray(litert_torch.EdgeModel(edge.flatbuffer, accelerator="gpu")(x)) - model(x).detach().numpy())
    assert gpu.outputs[0].max_abs_error >= direct.max()
    tolerances = {b["backend"]: b["tolerance"] for b in report.to_json()["backends"]}
    assert tolerances["litert-gpu"] == {"rtol": GPU_RTOL, "atol": report.atol}
    assert tolerances["litert-xnnpack"] == {"rtol": report.rtol, "atol": report.atol}
    assert f"(rtol {GPU_RTOL:g}, atol {report.atol:g})" in report.render()


class NormThenDense(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.first = nn.Linear(32, 64)
        self.second = nn.Linear(64, 16)

    def forward(self, x):
        return self.second(torch.relu(self.first(self.norm(x))))


def test_a_norm_whose_scale_was_folded_away_is_not_compared():
    """A LayerNorm's scale and shift fold into the next product, so no op holds the norm's value: per-layer
    validation skips it rather than naming it as where the model departs. A broken product after it is still
    found at its own node."""
    from litert_torch.validation.validate import locate

    torch.manual_seed(0)
    model = NormThenDense().eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 2.0)
        model.norm.bias.normal_()
    x = torch.randn(1, 8, 32)
    edge = litert_torch.convert(model, (x,))
    divergence, note, layers = locate(model, edge, (x,), {})
    assert divergence is None, divergence
    assert "layer_norm" not in [layer.node for layer in layers]
    assert {"relu", "linear_1"} <= {layer.node for layer in layers}  # the first product holds its relu
    with torch.no_grad():
        model.second.weight.add_(0.5)
    divergence, _, _ = locate(model, edge, (x,), {})
    assert divergence is not None and divergence.node == "linear_1"
