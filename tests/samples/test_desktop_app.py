"""The desktop sample in a real Tk window on a virtual X display: it shows the converted model's answer."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.samples.conftest import ROOT
from tests.samples.reference import edge_scores, example_images, labels

APP = os.path.join(ROOT, "samples", "desktop", "app.py")


def load_app_module():
    spec = importlib.util.spec_from_file_location("desktop_app", APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_real_screenshot(path: str) -> None:
    pixels = np.asarray(Image.open(path).convert("RGB"))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # a window with content, not a blank rectangle


def test_window_shows_the_edge_models_top5(x_display, artifacts, monkeypatch):
    monkeypatch.setenv("DISPLAY", x_display)
    app_module = load_app_module()
    import tkinter as tk

    root = tk.Tk()
    try:
        app = app_module.App(root, app_module.Classifier(app_module.DEFAULT_MODEL, app_module.DEFAULT_LABELS))
        names = labels()
        for path in example_images():
            app.load(path)
            root.update()
            shown = app.displayed()
            expected = edge_scores(path)
            top1 = names[int(np.argmax(expected))]
            assert shown[0][0] == top1
            # The trained model knows its shapes: the example drawn as a star is called a star.
            assert top1 == os.path.splitext(os.path.basename(path))[0]
            order = np.argsort(-expected)[:5]
            assert [s[0] for s in shown] == [names[i] for i in order]
            assert [s[1] for s in shown] == [f"{expected[i]:.3f}" for i in order]
            assert app.latency.cget("text").startswith("latency: ")
        shot = os.path.join(artifacts, "desktop_app.png")
        app.screenshot(shot)
        assert_real_screenshot(shot)
    finally:
        root.destroy()


def test_documented_command_runs_and_saves_a_screenshot(x_display, tmp_path):
    shot = tmp_path / "window.png"
    image = example_images()[0]
    proc = subprocess.run([sys.executable, APP, "--image", image, "--screenshot", str(shot)],
                          env={**os.environ, "DISPLAY": x_display}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert_real_screenshot(str(shot))


def test_a_model_without_an_image_input_is_refused(tmp_path):
    import torch

    import litert_torch

    edge = litert_torch.convert(torch.nn.Linear(4, 2), (torch.randn(1, 4),))
    edge.export(tmp_path / "linear.tflite")
    app_module = load_app_module()
    with pytest.raises(SystemExit, match="expected one NHWC RGB image input"):
        app_module.Classifier(str(tmp_path / "linear.tflite"), app_module.DEFAULT_LABELS)


def test_without_a_display_the_app_says_what_is_missing():
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "samples", "desktop", "app.py")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "needs a display" in done.stderr and "xvfb-run" in done.stderr and "Traceback" not in done.stderr
