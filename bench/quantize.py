"""Quantization table: every zoo model in every mode — file size, LiteRT latency (XNNPACK, 1 and 2 threads) and
accuracy against the float PyTorch model — plus the trained shapes classifier's held-out accuracy per mode.

    python bench/quantize.py [--models resnet18 bert ...] [--runs 20] [--eval 16] [--out bench/results/quantize.md]

Accuracy on the zoo (random weights, so only agreement with the float model means anything): over `--eval`
inputs drawn like the sample inputs, max |err| relative to max |ref|, mean |err|, cosine similarity, and top-1
agreement where the output is a row of class scores. int8 is calibrated on 32 other inputs drawn the same way.
The shapes classifier (samples/shapes, trained) is scored on 300 held-out images against their true labels.
Latencies of different models are compared only as ratios to the same model's float file, measured in the
same run.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import litert_torch  # noqa: E402
from compare import machine, time_interleaved, tflite_latency, write_results  # noqa: E402
from tests.models import zoo  # noqa: E402

MODES = ["float", "fp16", "dynamic-int8", "int8", "pt2e-int8"]
CALIBRATION = 32


def draw(case, count: int, seed: int) -> list[tuple]:
    torch.manual_seed(seed)
    return [tuple(case.inputs(1)) for _ in range(count)]


def accuracy(model, edge, inputs: list[tuple]) -> dict[str, float]:
    refs, gots = [], []
    with torch.no_grad():
        for args in inputs:
            ref = model(*args)
            got = edge.call_like_module(*args)
            ref = ref[0] if isinstance(ref, (tuple, list)) else ref
            got = got[0] if isinstance(got, (tuple, list)) else got
            ref = getattr(ref, "logits", ref)
            got = getattr(got, "logits", got)
            refs.append(np.asarray(ref, np.float64).reshape(ref.shape[0], -1) if ref.dim() > 1 else
                        np.asarray(ref, np.float64).reshape(1, -1))
            gots.append(np.asarray(got, np.float64).reshape(refs[-1].shape))
    ref, got = np.concatenate(refs), np.concatenate(gots)
    err = np.abs(got - ref)
    cos = float((ref * got).sum() / (np.linalg.norm(ref) * np.linalg.norm(got) + 1e-30))
    out = {"rel": float(err.max() / (np.abs(ref).max() + 1e-30)), "mean": float(err.mean()), "cos": cos}
    if ref.shape[1] > 1 and ref.shape[1] <= 10000:
        out["top1"] = float((ref.argmax(1) == got.argmax(1)).mean())
    return out


def latency(edges: dict[str, "litert_torch.EdgeModel"], inputs: tuple, threads: int, runs: int,
            work: str) -> dict[str, float]:
    runners = {}
    for mode, edge in edges.items():
        path = os.path.join(work, f"{mode}.tflite")
        edge.export(path)
        feeds = list(edge.feeds(*inputs).values())
        runners[mode] = tflite_latency(path, feeds, threads)[0]
    times = time_interleaved(runners, runs, warmup=3)
    return {mode: statistics.median(t) * 1000 for mode, t in times.items()}


def quantized(edge, mode: str, calibration: list[tuple], model=None, sample: tuple = ()):
    if mode == "float":
        return edge
    if mode == "pt2e-int8":  # the PyTorch module quantized with PT2E (litert_torch.quantize), then converted
        return pt2e(model, sample, calibration)
    return litert_torch.quantize_model(edge, mode, calibration_data=calibration if mode == "int8" else None)


def pt2e(model, sample: tuple, calibration: list[tuple], **options):
    from torchao.quantization.pt2e import quantize_pt2e

    from litert_torch.quantize import pt2e_quantizer

    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=True))
    prepared = quantize_pt2e.prepare_pt2e(torch.export.export(model, sample).module(), quantizer)
    with torch.no_grad():
        for args in calibration:
            prepared(*args)
    return litert_torch.convert(quantize_pt2e.convert_pt2e(prepared, fold_quantize=False), sample, **options)


def zoo_rows(names: list[str], runs: int, evals: int) -> list[dict]:
    cases = {c.name: c for c in zoo.MODELS}
    rows = []
    for name in names:
        case = cases[name]
        torch.manual_seed(0)
        model = zoo.build(case)
        sample = tuple(case.inputs(1))
        edge = litert_torch.convert(model, sample)
        calibration = draw(case, CALIBRATION, seed=100)
        evaluation = draw(case, evals, seed=200)
        edges, seconds = {}, {}
        for mode in MODES:
            start = time.perf_counter()
            try:
                edges[mode] = quantized(edge, mode, calibration, model, sample)
            except (litert_torch.QuantizationError, litert_torch.ConversionError) as exc:
                print(f"{name} {mode}: {exc}", flush=True)
                continue
            seconds[mode] = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as work:
            lat = {t: latency(edges, sample, t, runs, work) for t in (1, 2)}
        for mode, e in edges.items():
            row = {"model": name, "mode": mode, "bytes": len(e.flatbuffer), "float_bytes": len(edge.flatbuffer),
                   "ms1": lat[1][mode], "ms2": lat[2][mode], "float_ms1": lat[1]["float"],
                   "float_ms2": lat[2]["float"], "seconds": seconds[mode], **accuracy(model, e, evaluation)}
            report = e.quantization
            row["float_ops"] = len(report.float_ops) if report else 0
            rows.append(row)
            print(render_row(row), flush=True)
    return rows


def shapes_rows(runs: int) -> list[dict]:
    from samples.shapes import data, model as shapes_model

    model, _ = shapes_model.build()
    images, labels = data.dataset(300, seed=21)
    calibration = [(images[i:i + 1],) for i in range(CALIBRATION)]  # NHWC, as the converted model takes them
    x = torch.from_numpy(images[:1]).permute(0, 3, 1, 2)
    edge = litert_torch.convert(model, (x,), channel_last_io=True)
    with torch.no_grad():
        ref = model(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy().argmax(1)
    rows = []
    edges = {mode: quantized(edge, mode, calibration) for mode in MODES if mode != "pt2e-int8"}
    nchw = [(torch.from_numpy(images[i:i + 1]).permute(0, 3, 1, 2),) for i in range(CALIBRATION)]
    edges["pt2e-int8"] = pt2e(model, (x,), nchw, channel_last_io=True)
    with tempfile.TemporaryDirectory() as work:
        lat = {t: latency(edges, (images[:1],), t, runs, work) for t in (1, 2)}
    for mode, e in edges.items():
        pred = np.array([int(np.argmax(e(images[i:i + 1]))) for i in range(len(images))])
        rows.append({"mode": mode, "bytes": len(e.flatbuffer), "float_bytes": len(edge.flatbuffer),
                     "ms1": lat[1][mode], "ms2": lat[2][mode], "float_ms1": lat[1]["float"],
                     "float_ms2": lat[2]["float"], "accuracy": float((pred == labels).mean()),
                     "agreement": float((pred == ref).mean())})
    return rows


def _ms(value: float) -> str:
    return f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def render_row(r: dict) -> str:
    top1 = f"{r['top1']:.0%}" if "top1" in r else "–"
    return (f"| {r['model']} | {r['mode']} | {r['bytes'] / 1e6:.2f} | {r['float_bytes'] / r['bytes']:.2f}x | "
            f"{_ms(r['ms1'])} ({r['ms1'] / r['float_ms1']:.2f}x) | {_ms(r['ms2'])} ({r['ms2'] / r['float_ms2']:.2f}x) | "
            f"{r['rel']:.1e} | {r['mean']:.1e} | {r['cos']:.4f} | {top1} | {r['float_ops']} |")


def render(rows: list[dict], shapes: list[dict], args) -> str:
    import ai_edge_litert

    try:
        from importlib.metadata import version
        aeq = version("ai-edge-quantizer")
    except Exception:
        aeq = "?"
    lines = [
        "# Quantization: size, speed and accuracy per mode", "",
        f"- command: `python bench/quantize.py{' ' + ' '.join(sys.argv[1:]) if sys.argv[1:] else ''}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}",
        f"- versions: torch {torch.__version__}, ai-edge-litert {getattr(ai_edge_litert, '__version__', '?')}, "
        f"ai-edge-quantizer {aeq}",
        f"- latency: LiteRT interpreter with XNNPACK, median of {args.runs} runs after 3 warm-up runs, all modes of "
        "a model interleaved run by run; in brackets, the ratio to the same model's float file",
        f"- accuracy: against the float PyTorch model over {args.eval} inputs drawn like the sample input; int8 "
        f"calibrated on {CALIBRATION} other draws; `float ops` counts ops the mode left in float", "",
        "## The trained shapes classifier (samples/shapes), 300 held-out images", "",
        "| mode | MB | smaller | 1 thread ms | 2 threads ms | accuracy (true labels) | agrees with PyTorch |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in shapes:
        lines.append(f"| {r['mode']} | {r['bytes'] / 1e6:.3f} | {r['float_bytes'] / r['bytes']:.2f}x | "
                     f"{r['ms1']:.3f} ({r['ms1'] / r['float_ms1']:.2f}x) | {r['ms2']:.3f} "
                     f"({r['ms2'] / r['float_ms2']:.2f}x) | {r['accuracy']:.1%} | {r['agreement']:.1%} |")
    lines += ["", "## The model zoo (random weights: agreement with the float model)", "",
              "| model | mode | MB | smaller | 1 thread ms | 2 threads ms | max err / max\\|ref\\| | mean err | cosine | "
              "top-1 agrees | float ops |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [render_row(r) for r in rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[c.name for c in zoo.MODELS])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--eval", type=int, default=16)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "quantize.md"))
    args = parser.parse_args()
    shapes = shapes_rows(args.runs)
    rows = zoo_rows(args.models, args.runs, args.eval)
    text = render(rows, shapes, args)
    write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
