"""Models past 2 GB: constants after the flatbuffer (offset/size), streamed to the file, the model file-backed.

The threshold is lowered here so that a small model takes the same path; the real >2 GB model is marked slow
(`python -m pytest -m slow tests/api/test_large.py`), and `bench/large_model.py` measures its memory."""

import gc
import os

import numpy as np
import pytest
import torch
from ai_edge_litert import schema_py_generated as schema
from torch import nn

import litert_torch
from litert_torch.flatbuffer import writer
from litert_torch.runtime import edge_model
from tests.helpers import assert_matches


class Wide(nn.Module):
    def __init__(self, width=64, layers=2):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])

    def forward(self, x):
        return self.layers(x)


@pytest.fixture
def small_threshold(monkeypatch):
    monkeypatch.setattr(writer, "EXTERNAL_THRESHOLD", 1024)
    monkeypatch.setattr(edge_model, "FILE_BACKED_BYTES", 1024)


def test_constants_after_the_flatbuffer(small_threshold, tmp_path):
    torch.manual_seed(0)
    model, x = Wide().eval(), torch.randn(3, 64)
    edge = litert_torch.convert(model, (x,))
    assert edge.file_backed
    assert_matches(model(x), edge(x))
    path = tmp_path / "wide.tflite"
    edge.export(path)
    data = path.read_bytes()
    buffers = schema.ModelT.InitFromPackedBuf(data, 0).buffers
    external = [b for b in buffers if b.offset > 1]
    assert len(external) >= 4 and all(b.data is None for b in external)
    for b in external:  # each weight's bytes sit at its offset
        assert b.offset % writer.ALIGNMENT == 0 and b.offset + b.size <= len(data)
    weight = model.layers[0].weight.detach().numpy()
    assert any(data[b.offset:b.offset + b.size] == weight.tobytes() for b in external)
    loaded = litert_torch.EdgeModel.load(path)
    assert loaded.file_backed and loaded.delegate_plan.targets["cpu"].fully_delegated
    assert_matches(model(x), loaded(x))
    temp = edge._path
    del edge
    gc.collect()
    assert not os.path.exists(temp)  # the conversion's temporary file goes with its model


def test_in_memory_below_the_threshold():
    edge = litert_torch.convert(Wide().eval(), (torch.randn(1, 64),))
    assert not edge.file_backed
    assert all(b.offset <= 1 for b in schema.ModelT.InitFromPackedBuf(edge.flatbuffer, 0).buffers)


@pytest.mark.slow
def test_a_model_past_two_gigabytes(tmp_path):
    torch.manual_seed(0)
    model = Wide(width=16384, layers=2).eval()  # 2 x 1 GiB of weights
    for layer in model.layers:
        nn.init.normal_(layer.weight, std=16384 ** -0.5)
    x = torch.randn(1, 16384)
    with torch.no_grad():
        expected = model(x)
    edge = litert_torch.convert(model, (x,))
    assert edge.file_backed
    path = tmp_path / "big.tflite"
    edge.export(path)
    assert os.path.getsize(path) > 2**31
    del edge
    gc.collect()
    loaded = litert_torch.EdgeModel.load(path)
    got = loaded(x)
    assert np.abs(got.numpy() - expected.numpy()).max() <= 1e-4 * np.abs(expected.numpy()).max() + 1e-5
