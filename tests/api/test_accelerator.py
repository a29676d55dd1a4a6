"""EdgeModel on LiteRT's CompiledModel: the CPU runs; asking for a GPU this machine lacks is a clear error."""

import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import EdgeModel
from litert_torch.runtime.accelerated import AcceleratorUnavailable
from tests.helpers import assert_matches


def test_compiled_model_on_cpu_matches():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    x = torch.randn(1, 3, 8, 8)
    edge = litert_torch.convert(model, (x,))
    on_cpu = EdgeModel(edge.flatbuffer, accelerator="cpu")
    assert on_cpu.accelerator == "cpu"
    assert_matches(model(x), on_cpu(x))


def test_gpu_request_without_a_gpu_is_a_clear_error():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    on_gpu = EdgeModel(edge.flatbuffer, accelerator="gpu")
    try:
        out = on_gpu(torch.randn(1, 4))
    except AcceleratorUnavailable as exc:
        assert "GPU" in str(exc) and "accelerator='cpu'" in str(exc)
    else:  # a machine with a usable GPU: then it must have run there, correctly
        assert on_gpu.accelerator == "gpu" and out.shape == (1, 2)


def test_unknown_accelerator():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    with pytest.raises(ValueError, match="accelerator must be one of"):
        EdgeModel(edge.flatbuffer, accelerator="tpu")(torch.randn(1, 4))
