"""EdgeModel behaviour: output structures, torch/numpy I/O, input checks, threads, files and metadata."""

import json
import os

import numpy as np
import pytest
import torch
from torch import nn

import litert_torch
from litert_torch import metadata
from litert_torch import EdgeModel, ModelInputError
from litert_torch.flatbuffer.reader import read_model
from litert_torch.flatbuffer.writer import serialize
from tests.helpers import assert_matches


class MultiOut(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(6, 3)

    def forward(self, x, y):
        a, b = self.fc(x), torch.relu(y) * 2
        if self.kind == "tuple":
            return a, b
        if self.kind == "list":
            return [a, b, a + 1]
        return {"logits": a, "aux": {"scaled": b}}


@pytest.mark.parametrize("kind", ["tuple", "list", "dict"])
def test_output_structure_is_the_modules(kind):
    model = MultiOut(kind).eval()
    x, y = torch.randn(2, 6), torch.randn(5)
    edge = litert_torch.convert(model, (x, y))
    want = model(x, y)
    flat = edge(x, y)  # the official convention: numpy arrays, a tuple, or a flat dict by output name
    if kind == "dict":
        assert set(flat) == {"logits", "aux_scaled"}
        assert_matches([want["logits"], want["aux"]["scaled"]], [flat["logits"], flat["aux_scaled"]])
    else:
        assert type(flat) is tuple and all(isinstance(v, np.ndarray) for v in flat)
        assert_matches(list(want), list(flat))
    edge.output_style = "pytorch"
    got = edge(x, y)
    assert type(got) is type(want)
    assert_matches(want, got)
    assert_matches(want, edge.run("serving_default", (x, y)))
    if kind == "dict":
        assert set(got) == {"logits", "aux"} and set(got["aux"]) == {"scaled"}


def test_signature_names_follow_argument_and_output_names():
    edge = litert_torch.convert(MultiOut("dict").eval(), (torch.randn(2, 6), torch.randn(5)))
    sig = edge.signatures["serving_default"]
    assert [s.name for s in sig.inputs] == ["args_0", "args_1"]
    assert [s.name for s in sig.outputs] == ["logits", "aux_scaled"]
    assert sig.inputs[0].shape == (2, 6) and sig.inputs[0].dtype == np.float32
    x, y = torch.randn(2, 6), torch.randn(5)
    by_position = edge(x, y)
    for call in (edge(args_0=x, args_1=y), edge(x=x.numpy(), y=y.numpy()), edge(x, args_1=y)):
        assert all(np.array_equal(by_position[k], call[k]) for k in by_position)
    with pytest.raises(ModelInputError, match="missing args_1"):
        edge(args_0=x)


def test_kwargs_and_numpy_io():
    model = MultiOut("tuple").eval()
    x, y = torch.randn(2, 6), torch.randn(5)
    edge = litert_torch.convert(model, (x,), {"y": y})
    got = edge(x.numpy(), y=y.numpy())
    assert isinstance(got[0], np.ndarray)
    assert_matches(model(x, y=y), got)
    assert isinstance(edge(x, y=y)[0], np.ndarray)  # numpy out by default, as the official Model
    edge.output_style = "pytorch"
    assert isinstance(edge(x, y=y)[0], torch.Tensor)
    assert isinstance(edge(x.numpy(), y=y.numpy())[0], np.ndarray)
    with pytest.raises(ValueError, match="output_style"):
        edge.output_style = "tensors"


def test_wrong_shape_and_dtype_name_the_input():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(3, 4),))
    with pytest.raises(ModelInputError, match=r"input 'args_0' \(input\) expects shape \[3, 4\], got \[3, 5\]"):
        edge(torch.randn(3, 5))
    with pytest.raises(ModelInputError, match=r"input 'args_0' \(input\) expects dtype float32, got float64"):
        edge(torch.randn(3, 4, dtype=torch.float64))
    with pytest.raises(ModelInputError, match=r"structure .*: expected \(T,\), got \(T, T\)"):
        edge(torch.randn(3, 4), torch.randn(3, 4))
    with pytest.raises(ModelInputError, match="torch.Tensor or numpy array"):
        edge(3.0)


def test_thread_count_is_configurable():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 32, 32)
    edge = litert_torch.convert(model, (x,), num_threads=2)
    assert edge.num_threads == 2
    first = edge(x)
    edge.num_threads = 1
    assert_matches(model(x), edge(x))
    assert np.array_equal(first, edge(x))
    with pytest.raises(ValueError):
        edge.num_threads = 0


def test_same_model_twice_gives_identical_bytes(tmp_path):
    def make():
        torch.manual_seed(3)
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                             nn.Linear(8 * 8 * 8, 4)).eval()

    x = torch.randn(1, 3, 8, 8)
    a = litert_torch.convert(make(), (x,))
    b = litert_torch.convert(make(), (x,))
    assert a.flatbuffer == b.flatbuffer
    a.export(tmp_path / "a.tflite")
    b.export(tmp_path / "b.tflite")
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes()


def test_export_and_load_round_trip(tmp_path):
    model = MultiOut("dict").eval()
    x, y = torch.randn(2, 6), torch.randn(5)
    edge = litert_torch.convert(model, (x, y))
    path = tmp_path / "m.tflite"
    edge.export(path)
    loaded = EdgeModel.load(path)
    assert loaded.flatbuffer == edge.flatbuffer
    assert_matches(model(x, y), loaded.call_like_module(x, y))
    assert litert_torch.load(path).flatbuffer == edge.flatbuffer
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask  # a plain new file, not the temp file's 0600


def test_reader_writer_round_trip_preserves_the_model():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU6(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(4, 3), nn.Softmax(-1)).eval()
    x = torch.randn(1, 3, 16, 16)
    edge = litert_torch.convert(model, (x,))
    parsed = read_model(edge.flatbuffer)
    again = serialize(parsed)
    assert again == edge.flatbuffer
    assert parsed.subgraphs[0].ops[0].source is not None


def test_source_map_names_nodes_and_lines():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return torch.sigmoid(self.conv(x))  # LINE_SIGMOID

    edge = litert_torch.convert(Net().eval(), (torch.randn(1, 3, 8, 8),))
    entries = edge.source_map
    ops = read_model(edge.flatbuffer).subgraphs[0].ops
    assert len(entries) == len(ops)
    logistic = next(e for e, op in zip(entries, ops) if op.opcode == "LOGISTIC")
    assert logistic["target"] == "aten.sigmoid.default"
    assert logistic["location"].split(" ")[0].endswith("test_edge_model.py:%d" % _line_of("LINE_SIGMOID"))
    conv = next(e for e, op in zip(entries, ops) if op.opcode == "CONV_2D")
    assert conv["module"] == "conv (Conv2d)"
    assert metadata.decode(edge.metadata["litert_torch.io"])["signatures"]["serving_default"]["inputs"] == ["args_0"]


def _line_of(marker):
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def test_foreign_model_without_our_metadata_runs_positionally():
    edge = litert_torch.convert(nn.Linear(4, 2).eval(), (torch.randn(1, 4),))
    parsed = read_model(edge.flatbuffer)
    parsed.metadata = {}
    bare = EdgeModel(serialize(parsed))
    x = torch.randn(1, 4)
    assert_matches(edge(x), bare(x))


def test_metadata_entries_are_compressed_when_smaller_and_plain_files_still_read():
    big = {"strings": [f"model.py:{i} in forward" for i in range(500)]}
    packed = metadata.encode(big)
    assert not packed.startswith(b"{") and len(packed) < len(json.dumps(big)) / 4
    assert metadata.decode(packed) == big
    small = {"version": 1}
    assert metadata.encode(small) == b'{"version":1}'  # compressing would not save a byte
    assert metadata.decode(b' {"version":1}') == small
    with pytest.raises(ValueError, match="not a litert_torch metadata entry"):
        metadata.decode(b"\x00garbage")


@pytest.mark.parametrize("fn", [lambda x: torch.relu(x), lambda x: x * 2 + 1, lambda x: torch.exp(x)],
                         ids=["relu", "affine", "exp"])
def test_zero_dimensional_values_keep_shape_unit_tuple(fn):
    """An op on a 0-d tensor gives a 0-d result, as in PyTorch (the runtime's signature runner hands rank-0
    outputs back as (1,))."""
    class Scalar(torch.nn.Module):
        def forward(self, x):
            return fn(x)

    x = torch.tensor(0.25)
    edge = litert_torch.convert(Scalar(), (x,))
    out = edge.call_like_module(x)
    assert out.shape == ()
    torch.testing.assert_close(out, fn(x))
    assert edge(x).shape == ()
    assert np.asarray(edge(x.numpy())).shape == ()
