"""A model past 2 GB: conversion time, file size and peak memory against the weights' own size.

    python bench/large_model.py [--width 16384] [--layers 2] [--out bench/results/large_model.md]

Each phase runs in a fresh process so that its peak resident memory (ru_maxrss) is its own:
  1. build the PyTorch model (the weights' memory, the baseline), convert it and export the .tflite;
  2. load the .tflite (file-backed, memory-mapped) and run it, comparing with the output phase 1 saved.
Goal: the conversion's peak RSS at most 1.5x the weight bytes (the PyTorch model itself included).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONVERT = r"""
import json, resource, sys, time
import numpy as np, torch
from torch import nn
import litert_torch
width, layers, path, ref = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
with torch.no_grad():
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).eval()
    for layer in model:
        nn.init.normal_(layer.weight, std=width ** -0.5)
    x = torch.randn(1, width)
    np.save(ref, np.concatenate([x.numpy(), model(x).numpy()]))
weights = sum(p.numel() * p.element_size() for p in model.parameters())
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
edge = litert_torch.convert(model, (x,))
convert_s = time.perf_counter() - start
start = time.perf_counter()
edge.export(path)
export_s = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"weights": weights, "baseline_rss": baseline, "peak_rss": peak, "convert_s": convert_s,
                  "export_s": export_s, "file_backed": edge.file_backed}))
"""

RUN = r"""
import json, resource, sys, time
import numpy as np
import litert_torch
path, ref = sys.argv[1], sys.argv[2]
saved = np.load(ref)
x, expected = saved[:1], saved[1:]
start = time.perf_counter()
edge = litert_torch.EdgeModel.load(path)
got = edge(x)
run_s = time.perf_counter() - start
err = float(np.abs(got - expected).max())
print(json.dumps({"peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "load_and_run_s": run_s,
                  "max_err": err, "max_ref": float(np.abs(expected).max()), "file_backed": edge.file_backed}))
"""


def phase(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "large_model.md"))
    args = parser.parse_args()
    gb = 1024 ** 3
    with tempfile.TemporaryDirectory() as work:
        path, ref = os.path.join(work, "large.tflite"), os.path.join(work, "ref.npy")
        conv = phase(CONVERT, str(args.width), str(args.layers), path, ref)
        size = os.path.getsize(path)
        run = phase(RUN, path, ref)
    w = conv["weights"]
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from compare import machine, write_results

    lines = [
        "# A model past 2 GB", "",
        f"- command: `python bench/large_model.py{' ' + ' '.join(sys.argv[1:]) if sys.argv[1:] else ''}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}",
        f"- model: {args.layers} x nn.Linear({args.width}, {args.width}), float32", "",
        "| figure | value |", "|---|---|",
        f"| weight bytes | {w / gb:.2f} GiB |",
        f"| .tflite size | {size / gb:.2f} GiB (constants after the flatbuffer: {conv['file_backed']}) |",
        f"| peak RSS after building the PyTorch model | {conv['baseline_rss'] / gb:.2f} GiB "
        f"({conv['baseline_rss'] / w:.2f}x the weights) |",
        f"| peak RSS through convert + export | {conv['peak_rss'] / gb:.2f} GiB ({conv['peak_rss'] / w:.2f}x the "
        "weights; goal <= 1.5x) |",
        f"| convert / export | {conv['convert_s']:.1f} s / {conv['export_s']:.1f} s |",
        f"| load + first run (fresh process) | {run['load_and_run_s']:.1f} s, peak RSS {run['peak_rss'] / gb:.2f} GiB "
        f"(file-backed: {run['file_backed']}) |",
        f"| max \\|err\\| against PyTorch | {run['max_err']:.2e} (max \\|ref\\| {run['max_ref']:.2e}) |",
    ]
    lines += ["", "Loading and running hold the memory-mapped file's pages as they are read and XNNPACK's own packed copy "
              "of the weights (it re-lays them out for its kernels), so a run needs about twice the weight bytes; "
              "the conversion itself streams the weights to the file without copying them."]
    text = "\n".join(lines) + "\n"
    write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
