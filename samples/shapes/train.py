"""Train the sample classifier on generated shapes, then convert it with litert_torch.

    python samples/shapes/train.py [--epochs 10] [--train 8000] [--out DIR] [--update]

Writes into --out (default: ./shapes_out; --update writes beside this file instead, replacing the committed
files the apps use): shapes_cnn.pt (weights), labels.json, shapes_cnn.tflite (NHWC float input
[1, 64, 64, 3] in [0, 1], class probabilities out) and images/<class>.png (held-out examples for the apps).
Prints the held-out accuracy of the PyTorch model and of the converted model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import litert_torch  # noqa: E402
from samples.shapes import data, model as shapes_model  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train", type=int, default=8000, help="training images")
    parser.add_argument("--test", type=int, default=600, help="held-out images")
    parser.add_argument("--out", default="shapes_out", help="where to write the weights, labels, model and images")
    parser.add_argument("--update", action="store_true",
                        help="write beside this file, replacing the committed model the sample apps load")
    args = parser.parse_args()
    if args.update:
        args.out = HERE
    torch.manual_seed(0)
    start = time.perf_counter()
    x_train, y_train = data.dataset(args.train, seed=1)
    x_test, y_test = data.dataset(args.test, seed=2)
    to_nchw = lambda a: torch.from_numpy(a).permute(0, 3, 1, 2).contiguous()  # noqa: E731
    xt, yt = to_nchw(x_train), torch.from_numpy(y_train)
    net = shapes_model.ShapesCNN(len(data.CLASSES))
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    steps = args.epochs * (len(xt) // 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    loss_fn = nn.NLLLoss()
    for epoch in range(args.epochs):
        net.train()
        order = torch.randperm(len(xt))
        for i in range(0, len(xt) - 63, 64):
            batch = order[i:i + 64]
            loss = loss_fn(torch.log(net(xt[batch]) + 1e-9), yt[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        net.eval()
        with torch.no_grad():
            acc = (net(to_nchw(x_test)).argmax(1).numpy() == y_test).mean()
        print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.3f}, held-out accuracy {acc:.1%}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    out = lambda path: os.path.join(args.out, os.path.basename(path))  # noqa: E731
    torch.save(net.state_dict(), out(shapes_model.WEIGHTS))
    with open(out(shapes_model.LABELS), "w") as f:
        json.dump(data.CLASSES, f)
    edge = litert_torch.convert(net, (to_nchw(x_test[:1]),), channel_last_io=True)
    edge.export(out(shapes_model.MODEL))
    edge_pred = np.array([int(np.argmax(edge(x_test[i:i + 1]))) for i in range(len(x_test))])
    print(f"converted model: held-out accuracy {(edge_pred == y_test).mean():.1%}, "
          f"{os.path.getsize(out(shapes_model.MODEL)) / 1024:.0f} KiB")

    images = os.path.join(args.out, "images")
    os.makedirs(images, exist_ok=True)
    rng = np.random.default_rng(3)
    for label, name in enumerate(data.CLASSES):
        data.draw(label, rng).save(os.path.join(images, f"{name}.png"))
    print(f"done in {time.perf_counter() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
