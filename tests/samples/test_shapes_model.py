"""The sample model: the training script runs end to end, and the committed files agree with each other."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import torch

import litert_torch
from litert_torch import EdgeModel
from tests.helpers import assert_matches
from tests.samples.conftest import ROOT, SHAPES
from tests.samples.reference import MODEL, example_images, labels

sys.path.insert(0, ROOT)
from samples.shapes import data, model as shapes_model  # noqa: E402


def test_training_script_writes_a_working_model(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(SHAPES, "train.py"), "--epochs", "1", "--train", "300",
                           "--test", "60", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "converted model: held-out accuracy" in proc.stdout
    edge = EdgeModel.load(tmp_path / "shapes_cnn.tflite")
    assert edge.signatures["serving_default"].inputs[0].shape == (1, 64, 64, 3)
    assert sorted(os.listdir(tmp_path / "images")) == sorted(f"{c}.png" for c in data.CLASSES)


def test_committed_model_is_the_committed_weights_converted():
    model, _ = shapes_model.build()
    x, y = data.dataset(12, seed=5)
    committed = EdgeModel.load(MODEL)
    with torch.no_grad():
        reference = model(torch.from_numpy(x).permute(0, 3, 1, 2))
    for i in range(len(x)):
        assert_matches(reference[i:i + 1], committed(x[i:i + 1]))
    fresh = litert_torch.convert(model, (torch.from_numpy(x[:1]).permute(0, 3, 1, 2),), channel_last_io=True)
    np.testing.assert_allclose(fresh(x[:1]), committed(x[:1]), atol=1e-6)


def test_trained_model_is_right_on_held_out_shapes():
    x, y = data.dataset(120, seed=11)
    edge = EdgeModel.load(MODEL)
    predicted = np.array([int(np.argmax(edge(x[i:i + 1]))) for i in range(len(x))])
    assert (predicted == y).mean() >= 0.9
    assert labels() == data.CLASSES and len(example_images()) == len(data.CLASSES)


def test_training_script_leaves_the_committed_files_alone_by_default(tmp_path):
    """Without --out or --update the script writes into ./shapes_out, never over the files the apps load."""
    before = os.path.getmtime(MODEL)
    proc = subprocess.run([sys.executable, os.path.join(SHAPES, "train.py"), "--epochs", "1", "--train", "200",
                           "--test", "40"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "shapes_out" / "shapes_cnn.tflite").exists()
    assert os.path.getmtime(MODEL) == before
