"""EdgeModel on LiteRT's CompiledModel: the CPU runs; the GPU runs on this machine's Vulkan device (SwiftShader,
the software device from Debian's chromium package, where there is no GPU); without any device the error says
what to install."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import EdgeModel
from litert_torch.runtime.accelerated import AcceleratorUnavailable
from tests.helpers import assert_matches, gpu_device_or_skip

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def conv_model():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    return model, torch.randn(1, 3, 8, 8)


def test_compiled_model_on_cpu_matches():
    model, x = conv_model()
    edge = litert_torch.convert(model, (x,))
    on_cpu = EdgeModel(edge.flatbuffer, accelerator="cpu")
    assert on_cpu.accelerator == "cpu"
    assert_matches(model(x), on_cpu(x))


def test_gpu_runs_the_model_from_bytes_and_from_a_file(tmp_path):
    gpu_device_or_skip()
    model, x = conv_model()
    edge = litert_torch.convert(model, (x,))
    path = tmp_path / "m.tflite"
    edge.export(str(path))
    for on_gpu in (EdgeModel(edge.flatbuffer, accelerator="gpu"), EdgeModel.load(path, accelerator="gpu")):
        assert on_gpu.accelerator == "gpu"
        assert_matches(model(x), on_gpu(x))


def run_isolated(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (the Vulkan device is chosen once per process), with `env` set and the
    user's Vulkan settings cleared."""
    clean = {k: v for k, v in os.environ.items() if k not in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES")}
    clean.update(env, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, clean.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=clean, capture_output=True, text=True,
                          timeout=300)


GPU_WITHOUT_DEVICES = """
    import torch
    from torch import nn
    import litert_torch
    from litert_torch.runtime import gpu_device
    from litert_torch.runtime.accelerated import GpuDeviceMissing

    gpu_device.SWIFTSHADER_DIRS, gpu_device.ICD_DIRS = (), ()  # a machine with neither
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    try:
        litert_torch.EdgeModel(edge.flatbuffer, accelerator="gpu")(torch.randn(1, 4))
    except GpuDeviceMissing as exc:
        print("MISSING", exc)
"""


def test_without_gpu_or_swiftshader_the_error_says_what_to_install():
    done = run_isolated(GPU_WITHOUT_DEVICES)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MISSING" in done.stdout and "apt-get install chromium" in done.stdout, done.stdout


def test_the_users_vulkan_settings_are_kept():
    done = run_isolated("""
        import os
        from litert_torch.runtime import gpu_device
        print(gpu_device.prepare(), os.environ["VK_ICD_FILENAMES"])
    """, VK_ICD_FILENAMES="/nowhere/icd.json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kind='user'" in done.stdout and done.stdout.split()[-1] == "/nowhere/icd.json"


def test_swiftshader_is_found_when_nothing_else_is_configured():
    device = gpu_device_or_skip()
    done = run_isolated("""
        import os
        from litert_torch.runtime import gpu_device
        gpu_device.ICD_DIRS = ()  # no installed driver
        device = gpu_device.prepare()
        print(device.kind, os.environ.get("VK_ICD_FILENAMES"), bool(os.environ.get("XDG_RUNTIME_DIR")))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    kind, icd, runtime_dir = done.stdout.split()
    if device.kind == "swiftshader":
        assert kind == "swiftshader" and icd.endswith("vk_swiftshader_icd.json") and runtime_dir == "True"


def test_unknown_accelerator():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    with pytest.raises(ValueError, match="accelerator must be one of"):
        EdgeModel(edge.flatbuffer, accelerator="tpu")(torch.randn(1, 4))


def test_npu_request_without_an_npu_is_a_clear_error():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    on_npu = EdgeModel(edge.flatbuffer, accelerator="npu")
    try:
        out = on_npu(torch.randn(1, 4))
    except AcceleratorUnavailable as exc:
        assert "NPU" in str(exc) and "accelerator='cpu'" in str(exc)
    else:  # a machine with an NPU and its dispatch library: then it must have run there
        assert on_npu.accelerator == "npu" and out.shape == (1, 2)


def test_gpu_tests_fail_rather_than_skip_under_require(monkeypatch):
    from litert_torch.runtime import gpu_device

    monkeypatch.setattr(gpu_device, "prepare", lambda dirs=None: gpu_device.GpuDevice("none"))
    monkeypatch.setenv("LITERT_GPU_TESTS", "require")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        gpu_device_or_skip()
    monkeypatch.delenv("LITERT_GPU_TESTS")
    with pytest.raises(pytest.skip.Exception):
        gpu_device_or_skip()


def test_ci_requires_the_gpu_tests():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert "export LITERT_GPU_TESTS=require" in f.read()
