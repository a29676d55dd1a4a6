"""A desktop image classifier on a converted model: open an image, see the top-5 classes and the latency.

    python samples/desktop/app.py                       # the shapes classifier shipped in samples/shapes
    python samples/desktop/app.py --model m.tflite --labels labels.json --image photo.png

Tk for the window, Pillow for images, litert_torch.EdgeModel (LiteRT with XNNPACK) for inference. The model
takes one NHWC float image in [0, 1] (`litert-convert convert ... --channel-last-io`) and gives class scores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import tkinter as tk
from tkinter import filedialog, ttk

import numpy as np
from PIL import Image, ImageTk

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(os.path.dirname(HERE), "shapes")
DEFAULT_MODEL = os.path.join(SHAPES, "shapes_cnn.tflite")
DEFAULT_LABELS = os.path.join(SHAPES, "labels.json")
EXAMPLES = os.path.join(SHAPES, "images")
PREVIEW = 256


class Classifier:
    """The converted model and its labels; `classify` takes a PIL image and returns (scores, milliseconds)."""

    def __init__(self, model_path: str, labels_path: str):
        from litert_torch import EdgeModel  # imported here so that `--help` answers at once

        self.model = EdgeModel.load(model_path)
        with open(labels_path) as f:
            self.labels: list[str] = json.load(f)
        signature = next(iter(self.model.signatures.values()))
        shape = signature.inputs[0].shape
        if len(shape) != 4 or shape[3] != 3:
            raise SystemExit(f"{model_path}: expected one NHWC RGB image input, found shape {list(shape)} "
                             "(convert with --channel-last-io)")
        self.height, self.width = int(shape[1]), int(shape[2])

    def preprocess(self, image: Image.Image) -> np.ndarray:
        image = image.convert("RGB")
        if image.size != (self.width, self.height):
            image = image.resize((self.width, self.height), Image.BILINEAR)
        return (np.asarray(image, np.float32) / 255.0)[None]

    def classify(self, image: Image.Image) -> tuple[np.ndarray, float]:
        x = self.preprocess(image)
        start = time.perf_counter()
        scores = np.asarray(self.model(x)).reshape(-1)
        return scores, (time.perf_counter() - start) * 1000.0


class App:
    """The window: example buttons and an Open button, the image, the top-5 classes with bars, the latency."""

    def __init__(self, root: tk.Tk, classifier: Classifier):
        self.root, self.classifier = root, classifier
        root.title("litert_torch — image classifier")
        root.configure(padx=12, pady=12)
        bar = ttk.Frame(root)
        bar.grid(row=0, column=0, columnspan=2, sticky="w")
        ttk.Button(bar, text="Open image…", command=self.open_dialog).pack(side="left", padx=(0, 12))
        ttk.Label(bar, text="Examples:").pack(side="left", padx=(0, 4))
        for name in sorted(os.listdir(EXAMPLES)) if os.path.isdir(EXAMPLES) else []:
            path = os.path.join(EXAMPLES, name)
            ttk.Button(bar, text=os.path.splitext(name)[0], command=lambda p=path: self.load(p)).pack(side="left")
        self.canvas = tk.Canvas(root, width=PREVIEW, height=PREVIEW, background="#ddd", highlightthickness=0)
        self.canvas.grid(row=1, column=0, pady=10)
        panel = ttk.Frame(root, padding=(16, 10))
        panel.grid(row=1, column=1, sticky="n")
        ttk.Label(panel, text="Top 5", font=("TkDefaultFont", 12, "bold")).grid(row=0, column=0, sticky="w")
        self.rows: list[tuple[ttk.Label, ttk.Progressbar, ttk.Label]] = []
        for i in range(5):
            name = ttk.Label(panel, text="–", width=14)
            meter = ttk.Progressbar(panel, length=160, maximum=1.0)
            score = ttk.Label(panel, text="", width=7, anchor="e")
            name.grid(row=i + 1, column=0, sticky="w", pady=3)
            meter.grid(row=i + 1, column=1, padx=6)
            score.grid(row=i + 1, column=2, sticky="e")
            self.rows.append((name, meter, score))
        self.latency = ttk.Label(panel, text="latency: –")
        self.latency.grid(row=7, column=0, columnspan=3, sticky="w", pady=(12, 0))
        self.source = ttk.Label(root, text="Open an image or pick an example.", foreground="#555")
        self.source.grid(row=2, column=0, columnspan=2, sticky="w")
        self._photo = None

    def open_dialog(self) -> None:
        path = filedialog.askopenfilename(
            title="Open an image", initialdir=EXAMPLES,
            filetypes=[("Images", "*.png *.jpg *.jpeg *.bmp *.gif *.webp"), ("All files", "*")])
        if path:
            self.load(path)

    def load(self, path: str) -> tuple[list[tuple[str, float]], float]:
        """Classify the image at `path` and show it; returns the top 5 (label, score) and the latency in ms."""
        image = Image.open(path)
        scores, ms = self.classifier.classify(image)
        order = np.argsort(-scores)[:5]
        top = [(self.classifier.labels[i], float(scores[i])) for i in order]
        for (name, meter, score), (label, value) in zip(self.rows, top + [("–", 0.0)] * (5 - len(top))):
            name.configure(text=label)
            meter.configure(value=max(0.0, min(1.0, value)))
            score.configure(text=f"{value:.3f}" if label != "–" else "")
        self.latency.configure(text=f"latency: {ms:.2f} ms")
        preview = image.convert("RGB")
        preview.thumbnail((PREVIEW, PREVIEW)) if max(preview.size) > PREVIEW else None
        if max(preview.size) < PREVIEW:
            factor = PREVIEW // max(preview.size)
            preview = preview.resize((preview.width * factor, preview.height * factor), Image.NEAREST)
        self._photo = ImageTk.PhotoImage(preview)
        self.canvas.delete("all")
        self.canvas.create_image(PREVIEW // 2, PREVIEW // 2, image=self._photo)
        self.source.configure(text=os.path.basename(path))
        return top, ms

    def displayed(self) -> list[tuple[str, str]]:
        """The (class, score) texts the window shows, top first."""
        return [(name.cget("text"), score.cget("text")) for name, _, score in self.rows]

    def screenshot(self, path: str) -> None:
        """Save the window as it is on screen (needs an X display)."""
        from PIL import ImageGrab

        self.root.update()
        x, y = self.root.winfo_rootx(), self.root.winfo_rooty()
        w, h = self.root.winfo_width(), self.root.winfo_height()
        ImageGrab.grab(bbox=(x, y, x + w, y + h), xdisplay=os.environ.get("DISPLAY")).save(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a .tflite with one NHWC float image input")
    parser.add_argument("--labels", default=DEFAULT_LABELS, help="JSON list of class names")
    parser.add_argument("--image", help="an image to classify at start")
    parser.add_argument("--screenshot", help="save the window to this PNG after loading --image, then quit")
    args = parser.parse_args(argv)
    classifier = Classifier(args.model, args.labels)
    try:
        root = tk.Tk()
    except tk.TclError as exc:  # no display: say what is missing instead of a Tk traceback
        print(f"the desktop sample needs a display ({exc}); run it in a desktop session, or under a virtual "
              "display: xvfb-run python samples/desktop/app.py", file=sys.stderr)
        return 2
    app = App(root, classifier)
    app = App(root, classifier)
    if args.image:
        app.load(args.image)
    if args.screenshot:
        root.update()
        root.after(300, lambda: (app.screenshot(args.screenshot), root.destroy()))
    root.mainloop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
