"""What a new user meets first: dynamic axes shown and enforced as declared, a Hugging Face model's cache object
explained, and no runtime chatter on stderr."""

import subprocess
import sys

import pytest
import torch
from torch.export import Dim

import litert_torch
from litert_torch import ExportError, ModelInputError


def test_calls_outside_a_declared_dynamic_range_are_refused_and_inspect_shows_the_range(tmp_path):
    model = torch.nn.Linear(4, 2).eval()
    edge = litert_torch.convert(model, (torch.randn(3, 4),),
                                dynamic_shapes={"input": {0: Dim("batch", min=2, max=8)}})
    for n in (2, 5, 8):
        assert edge(torch.randn(n, 4)).shape == (n, 2)
    for n in (1, 9):
        with pytest.raises(ModelInputError, match=rf"batch = {n} on axis 0; the model was converted for batch in "
                                                  r"\[2, 8\]"):
            edge(torch.randn(n, 4))
    path = tmp_path / "dyn.tflite"
    edge.export(path)
    out = subprocess.run([sys.executable, "-m", "litert_convert.main", "inspect", str(path)], capture_output=True,
                         text=True, timeout=120)
    assert "[2<=batch<=8, 4]" in out.stdout, out.stdout + out.stderr
    assert "np.int32" not in out.stdout


def test_a_hugging_face_cache_output_gets_the_fix_in_the_message():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (1, 6))
    with pytest.raises(ExportError, match=r"use_cache': False.*export_hf"):
        litert_torch.convert(model, (ids,))
    edge = litert_torch.convert(model, (ids,), {"use_cache": False})
    got = edge.call_like_module(ids, use_cache=False)["logits"]
    torch.testing.assert_close(got, model(ids, use_cache=False).logits, rtol=1e-4, atol=1e-5)


def test_the_runtime_prints_nothing_routine():
    script = ("import torch, litert_torch\n"
              "e = litert_torch.convert(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),))\n"
              "e(torch.randn(1, 4)); litert_torch.EdgeModel(e.flatbuffer)(torch.randn(1, 4))\n")
    quiet = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "Created TensorFlow Lite XNNPACK delegate" not in quiet.stderr
    loud = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "LITERT_TORCH_RUNTIME_LOGS": "1"})
    assert "Created TensorFlow Lite XNNPACK delegate" in loud.stderr


def test_a_registered_cache_type_in_the_output_converts_with_named_outputs():
    """With transformers' cache export support registered (a pytree whose unflatten needs real tensors), the
    cache tensors become named outputs. In a child process: the registration is process-wide."""
    pytest.importorskip("transformers")
    script = """
import torch, transformers, litert_torch
from transformers.integrations.executorch import register_dynamic_cache_export_support
register_dynamic_cache_export_support()
config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=1)
model = transformers.LlamaForCausalLM(config).eval()
ids = torch.randint(0, 64, (1, 6))
edge = litert_torch.convert(model, (ids,))
out = edge(ids)
want = model(ids)
torch.testing.assert_close(torch.from_numpy(out["logits"]), want.logits, rtol=1e-4, atol=1e-5)
assert len(out) == 3, sorted(out)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_layer_comparison_reads_each_tensors_layout_from_the_graph():
    """A conv net whose NHWC and NCHW shapes coincide ([1, 8, 8, 8]): every intermediate is compared in the layout
    the graph gives it, so a correct model shows no divergence (it used to report one and then PASS)."""
    from litert_torch.validation.validate import layer_errors

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(1, 8, 8, 8)
    edge = litert_torch.convert(model, (x,))
    layers, note = layer_errors(model, edge, (x,), {})
    assert note is None and len(layers) >= 2
    assert all(layer.passed for layer in layers), [(layer.node, layer.relative_error) for layer in layers]
    report = litert_torch.validate(model, (x,), edge)
    assert report.passed and report.divergence is None


def test_a_degenerate_reference_is_inconclusive_not_a_pass():
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3)).eval()
    torch.nn.init.zeros_(model[2].weight)
    torch.nn.init.zeros_(model[2].bias)
    report = litert_torch.validate(model, (torch.randn(2, 6),))
    assert report.passed and report.verdict == "INCONCLUSIVE"
    assert any("all zero" in w for w in report.warnings)
    assert "validation: INCONCLUSIVE" in report.render() and report.to_json()["verdict"] == "INCONCLUSIVE"
    healthy = litert_torch.validate(torch.nn.Linear(6, 3).eval(), (torch.randn(2, 6),))
    assert healthy.verdict == "PASS" and not healthy.warnings

    # outputs that vary but all lie within atol of zero: a model writing zeros would pass as well
    tiny = torch.nn.Linear(6, 3).eval()
    with torch.no_grad():
        tiny.weight.mul_(1e-9)
        tiny.bias.zero_()
    report = litert_torch.validate(tiny, (torch.randn(2, 6),))
    assert report.passed and report.verdict == "INCONCLUSIVE", report.render()
    assert any("within the absolute tolerance" in w and "proves little" in w for w in report.warnings), report.warnings


def test_cli_convert_and_validate_agree_on_a_source_that_draws_random_weights(tmp_path):
    """A source whose weights are torch's random draws (torchvision.models:mobilenet_v3_small, an unseeded
    build()) is built with the generator seeded, by convert and validate alike, so validate compares the same
    model; one seeded from the clock is refused by validate, saying why."""
    source = tmp_path / "unseeded.py"
    source.write_text("import time\nimport torch\n\ndef build():\n    return torch.nn.Linear(4, 2).eval(), "
                      "(torch.randn(1, 4),)\n\ndef clock():\n    torch.manual_seed(time.monotonic_ns())\n"
                      "    return build()\n")
    model = tmp_path / "m.tflite"

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "litert_convert.main", *map(str, args)], capture_output=True,
                              text=True, timeout=300)

    made = cli("convert", f"{source}:build", "-o", model)
    assert made.returncode == 0, made.stderr
    checked = cli("validate", model, f"{source}:build")
    assert checked.returncode == 0 and "validation: PASS" in checked.stdout, checked.stdout + checked.stderr
    checked = cli("validate", model, f"{source}:clock")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "builds different weights each time" in checked.stderr and "fixed seed" in checked.stderr


@pytest.mark.parametrize("stage", ["lower_program", "run_pipeline", "delegate_aware", "_write"])
def test_no_untyped_exception_escapes_convert(stage, monkeypatch):
    """Whatever breaks inside the converter (here: each stage made to raise an arbitrary exception) reaches the
    caller as a ConversionError naming it, with the original as its cause."""
    from litert_torch import ConversionError, assemble, converter

    def broken(*args, **kwargs):
        raise AttributeError("'int' object has no attribute 'device'")

    # the passes and the delegate plan run in assemble.finish_signature, the ending every front end shares
    monkeypatch.setattr(assemble if stage in ("run_pipeline", "delegate_aware") else converter, stage, broken)
    with pytest.raises(ConversionError, match="AttributeError: 'int' object has no attribute 'device'") as info:
        litert_torch.convert(torch.nn.Linear(3, 2).eval(), (torch.randn(1, 3),))
    assert isinstance(info.value.__cause__, AttributeError)


class SamePadding(torch.nn.Module):
    """TensorFlow-style 'same' padding computed in forward from the module's own integer buffers."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.register_buffer("stride", torch.tensor([2, 2]))
        self.register_buffer("kernel_size", torch.tensor([3, 3]))

    def forward(self, x):
        h, w = x.shape[-2:]
        pad_h = max((-(h // -self.stride[0]) - 1) * self.stride[0] + self.kernel_size[0] - h, 0)
        pad_w = max((-(w // -self.stride[1]) - 1) * self.stride[1] + self.kernel_size[1] - w, 0)
        x = torch.nn.functional.pad(x, [int(pad_w) // 2, int(pad_w) - int(pad_w) // 2,
                                        int(pad_h) // 2, int(pad_h) - int(pad_h) // 2])
        return torch.nn.functional.conv2d(x, self.conv.weight, self.conv.bias,
                                          stride=(int(self.stride[0]), int(self.stride[1])))


def test_sizes_computed_from_integer_buffers_are_folded_before_tracing():
    model = SamePadding().eval()
    x = torch.randn(1, 3, 17, 17)
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(model, (x,), strict=False)  # what torch.export alone does with it
    edge = litert_torch.convert(model, (x,))
    torch.testing.assert_close(torch.from_numpy(edge(x)), model(x), rtol=1e-4, atol=1e-5)
    # the module is left as it was: its buffers are buffers again, with their values
    assert dict(model.named_buffers()).keys() == {"stride", "kernel_size"}
    assert model.stride.tolist() == [2, 2] and isinstance(model.kernel_size, torch.Tensor)
