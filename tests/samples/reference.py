"""What the Python EdgeModel says about the sample images: the reference the apps must agree with."""

from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image

from litert_torch import EdgeModel
from tests.samples.conftest import SHAPES

MODEL = os.path.join(SHAPES, "shapes_cnn.tflite")
IMAGES = os.path.join(SHAPES, "images")


def labels() -> list[str]:
    with open(os.path.join(SHAPES, "labels.json")) as f:
        return json.load(f)


def example_images() -> list[str]:
    return sorted(os.path.join(IMAGES, n) for n in os.listdir(IMAGES) if n.endswith(".png"))


def edge_scores(path: str) -> np.ndarray:
    """Class scores of the converted model on the image at `path` (NHWC float in [0, 1], as the apps feed it)."""
    x = (np.asarray(Image.open(path).convert("RGB"), np.float32) / 255.0)[None]
    return np.asarray(EdgeModel.load(MODEL)(x)).reshape(-1)
