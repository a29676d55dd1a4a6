"""`litert-convert convert --quantize`: each mode from the command line, calibration files, and bad input."""

import json
import os
import sys

import numpy as np
import pytest

from litert_torch import EdgeModel
from tests.cli.test_cli import FIXTURES, ROOT, run


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibration")
    rng = np.random.default_rng(0)
    stacked = folder / "samples.npz"
    np.savez(stacked, x=rng.standard_normal((16, 1, 3, 8, 8)).astype(np.float32))
    per_sample = folder / "per_sample"
    per_sample.mkdir()
    for i in range(10):
        np.savez(per_sample / f"{i:03d}.npz", x=rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    return stacked, per_sample


@pytest.mark.parametrize("mode", ["fp16", "dynamic-int8"])
def test_weight_modes(tmp_path, mode):
    out = tmp_path / "q.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, "--quantize", mode, "--validate")
    assert code == 0, output
    assert f"quantized {mode}:" in output and "validation: PASS" in output
    assert EdgeModel.load(out).quantization.mode == mode


SHAPES = os.path.join(ROOT, "samples", "shapes", "model.py") + ":build"


@pytest.fixture(scope="module")
def shapes_calibration(tmp_path_factory):
    """Calibration files of the shapes sample: real images, NCHW like the model's input."""
    sys.path.insert(0, ROOT)
    from samples.shapes import data

    folder = tmp_path_factory.mktemp("shapes")
    images, _ = data.dataset(24, seed=7)
    nchw = images.transpose(0, 3, 1, 2)[:, None]
    np.savez(folder / "stacked.npz", x=nchw)
    (folder / "per_sample").mkdir()
    for i in range(10):
        np.savez(folder / "per_sample" / f"{i:03d}.npz", x=nchw[i])
    return folder / "stacked.npz", folder / "per_sample"


def test_int8_with_calibration_files(tmp_path, shapes_calibration):
    stacked, per_sample = shapes_calibration
    for source, count in ((stacked, 24), (per_sample, 10)):
        out = tmp_path / "q.tflite"
        code, output = run("convert", SHAPES, "-o", out, "--force", "--quantize", "int8",
                           "--calibration", source, "--validate", "--json")
        assert code == 0, output
        summary = json.loads(output[output.index("{"):])
        assert summary["quantization"]["calibration_samples"] == count
        assert summary["validation"]["passed"] is True
    code, output = run("convert", SHAPES, "-o", out, "--force", "--quantize", "int8",
                       "--calibration", stacked, "--quantized-io", "--keep-float", "head")
    assert code == 0, output
    edge = EdgeModel.load(out)
    assert edge.signatures["serving_default"].inputs[0].dtype == np.int8
    assert [f.node for f in edge.quantization.float_ops] == ["linear"]


@pytest.mark.parametrize("extra, message", [
    (["--quantize", "int8"], "needs --calibration"),
    (["--quantize", "int3"], "unknown --quantize"),
    (["--calibration", "CAL"], "apply only with --quantize"),
    (["--quantize", "int8", "--calibration", "WRONG"], "has no array for input(s) x"),
    (["--quantize", "int8", "--calibration", "SHORT"], "3 calibration sample(s)"),
])
def test_bad_quantization_options_exit_2(tmp_path, calibration, extra, message):
    stacked, _ = calibration
    wrong, short = tmp_path / "wrong.npz", tmp_path / "short.npz"
    np.savez(wrong, y=np.zeros((16, 1, 3, 8, 8), np.float32), z=np.zeros((16, 1, 3, 8, 8), np.float32))
    np.savez(short, x=np.zeros((3, 1, 3, 8, 8), np.float32))
    names = {"CAL": stacked, "WRONG": wrong, "SHORT": short}
    args = [names.get(a, a) for a in extra]
    out = tmp_path / "q.tflite"
    code, output = run("convert", f"{FIXTURES}:with_inputs", "-o", out, *args)
    assert code == 2, output
    assert message in output
    assert not out.exists()
