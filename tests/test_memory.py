"""Handing back the pages of weights mapped from files (`memory.FilePages`), and the writer and the int8 pass
using it: the bytes written are the same, and the weights' pages are no longer resident afterwards."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from litert_torch import EdgeModel, ir
from litert_torch.flatbuffer.writer import write_model
from litert_torch.memory import FilePages, _mappings
from litert_torch.quantization.weights import int8_weights

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")

MB = 1 << 20


def resident_bytes(array: np.ndarray) -> int:
    """Bytes of `array`'s mapping resident in this process (smaps' Rss of the mapping holding it)."""
    address = array.__array_interface__["data"][0]
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                start, end = (int(v, 16) for v in head[0].split("-"))
                inside = start <= address < end
            elif inside and line.startswith("Rss:"):
                return int(head[1]) * 1024
    raise AssertionError("no mapping holds the array")


def mapped_weights(tmp_path, mode: str, rows: int = 1024, cols: int = 4096) -> np.ndarray:
    rng = np.random.default_rng(0)
    path = tmp_path / f"weights_{mode}.bin"
    rng.standard_normal((rows, cols)).astype(np.float32).tofile(path)
    return np.memmap(path, np.float32, mode, shape=(rows, cols))


@pytest.mark.parametrize("mode", ["r", "c"])  # a shared mapping, a private (copy-on-write) one
def test_pages_read_from_a_clean_file_mapping_are_handed_back_and_read_again_unchanged(tmp_path, mode):
    w = mapped_weights(tmp_path, mode)
    expected = np.fromfile(w.filename, np.float32).reshape(w.shape)
    assert float(np.abs(w).sum()) > 0  # every page read
    assert resident_bytes(w) >= w.nbytes
    pages = FilePages()
    pages.release(np.asarray(w))
    assert pages.released >= w.nbytes
    assert resident_bytes(w) < w.nbytes // 8
    np.testing.assert_array_equal(np.asarray(w), expected)  # mapped again from the file


def test_a_written_private_mapping_and_anonymous_memory_are_left_alone(tmp_path):
    w = mapped_weights(tmp_path, "c")
    w[0, 0] = 12345.0  # a page copied on write: the file no longer holds what the array holds
    anonymous = np.ones((256, 4096), np.float32)
    pages = FilePages()
    pages.release(np.asarray(w))
    pages.release(anonymous)
    pages.release(np.asarray(w)[:, ::2])  # not contiguous: its bytes are not one span
    assert pages.released == 0
    assert w[0, 0] == 12345.0 and float(anonymous.sum()) == anonymous.size


def test_smaps_parsing_keeps_shared_and_unwritten_private_file_mappings_only():
    text = "\n".join([
        "7f0000000000-7f0000100000 r--p 00000000 08:01 11 /models/a.safetensors",
        "Rss:                1024 kB", "Anonymous:             0 kB",
        "7f0000100000-7f0000200000 rw-p 00000000 08:01 12 /models/b.safetensors",
        "Anonymous:             4 kB",
        "7f0000200000-7f0000300000 rw-s 00000000 08:01 13 /dev/shm/c",
        "Anonymous:             0 kB",
        "7f0000300000-7f0000400000 rw-p 00000000 00:00 0 ",
        "Anonymous:             0 kB",
        "7f0000400000-7f0000500000 rw-p 00000000 00:00 0 [heap]",
        "Anonymous:             0 kB",
    ])
    assert _mappings(text) == [(0x7f0000000000, 0x7f0000100000), (0x7f0000200000, 0x7f0000300000)]


def _model(weight: np.ndarray) -> ir.Model:
    x = ir.Tensor("x", [1, weight.shape[1]], np.float32)
    w = ir.Tensor("w", list(weight.shape), np.float32, weight)
    y = ir.Tensor("y", [1, weight.shape[0]], np.float32)
    op = ir.Op("FULLY_CONNECTED", [x, w, None], [y], {"fused_activation_function": "NONE"})
    return ir.Model([ir.Graph("main", [x], [y], [op])], [ir.Signature("serving_default", 0, ["x"], ["y"])])


def test_the_writer_hands_back_each_weight_and_writes_the_same_bytes(tmp_path):
    w = mapped_weights(tmp_path, "c")
    plain = tmp_path / "plain.tflite"
    write_model(_model(np.asarray(w)), str(plain))
    pages = FilePages()
    released = tmp_path / "released.tflite"
    write_model(_model(np.asarray(w)), str(released), release=pages.release)
    assert released.read_bytes() == plain.read_bytes()
    assert resident_bytes(w) < w.nbytes // 8
    x = np.random.default_rng(1).standard_normal((1, w.shape[1])).astype(np.float32)
    np.testing.assert_allclose(EdgeModel.load(str(released))(x)["y"], x @ np.asarray(w).T, rtol=1e-4, atol=1e-3)


def test_int8_weights_hands_back_the_float_weights_it_quantized(tmp_path):
    w = mapped_weights(tmp_path, "c", rows=8192, cols=512)  # two blocks of rows
    model = _model(np.asarray(w))
    reference = _model(np.array(w))
    pages = FilePages()
    assert int8_weights(model.subgraphs, release=pages.release) == 1
    assert int8_weights(reference.subgraphs) == 1
    assert resident_bytes(w) < w.nbytes // 8
    got, want = model.subgraphs[0].ops[0].inputs[1], reference.subgraphs[0].ops[0].inputs[1]
    np.testing.assert_array_equal(got.data, want.data)
    assert got.quantization.scale == want.quantization.scale
