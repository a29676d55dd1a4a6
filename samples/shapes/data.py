"""Coloured shapes drawn with PIL: the data the sample classifier is trained on, made on the fly.

Each image is 64x64 RGB: one shape (a class of `CLASSES`) of random size, position, rotation and colour on a
random background, with a little pixel noise.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ["circle", "square", "triangle", "star", "cross", "ring"]
SIZE = 64


def _polygon(cx: float, cy: float, radii: list[float], angle: float) -> list[tuple[float, float]]:
    n = len(radii)
    return [(cx + r * math.cos(angle + 2 * math.pi * k / n), cy + r * math.sin(angle + 2 * math.pi * k / n))
            for k, r in enumerate(radii)]


def _colours(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A background and a shape colour that differ clearly in brightness."""
    while True:
        bg = rng.integers(0, 256, 3)
        fg = rng.integers(0, 256, 3)
        if abs(int(bg.mean()) - int(fg.mean())) > 70:
            return tuple(int(v) for v in bg), tuple(int(v) for v in fg)


def draw(label: int, rng: np.random.Generator) -> Image.Image:
    """One image of class `label` (an index into CLASSES)."""
    bg, fg = _colours(rng)
    image = Image.new("RGB", (SIZE, SIZE), bg)
    pen = ImageDraw.Draw(image)
    r = float(rng.uniform(12, 26))
    cx, cy = (float(rng.uniform(r + 2, SIZE - r - 2)) for _ in range(2))
    angle = float(rng.uniform(0, 2 * math.pi))
    name = CLASSES[label]
    if name == "circle":
        pen.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)
    elif name == "ring":
        pen.ellipse([cx - r, cy - r, cx + r, cy + r], outline=fg, width=max(3, int(r / 3)))
    elif name == "square":
        pen.polygon(_polygon(cx, cy, [r] * 4, angle), fill=fg)
    elif name == "triangle":
        pen.polygon(_polygon(cx, cy, [r] * 3, angle), fill=fg)
    elif name == "star":
        pen.polygon(_polygon(cx, cy, [r, r * 0.42] * 5, angle), fill=fg)
    elif name == "cross":
        w = r * 0.35
        for a in (angle, angle + math.pi / 2):
            dx, dy = math.cos(a), math.sin(a)
            px, py = -dy * w, dx * w
            pen.polygon([(cx - dx * r + px, cy - dy * r + py), (cx + dx * r + px, cy + dy * r + py),
                         (cx + dx * r - px, cy + dy * r - py), (cx - dx * r - px, cy - dy * r - py)], fill=fg)
    pixels = np.asarray(image, np.int16) + rng.integers(-12, 13, (SIZE, SIZE, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def dataset(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` images (float32 NHWC in [0, 1]) and labels, classes in turn."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % len(CLASSES)
    images = np.stack([np.asarray(draw(int(k), rng), np.float32) / 255.0 for k in labels])
    return images, labels
