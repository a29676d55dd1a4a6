"""Side-by-side benchmark: our converter against the official one (PyPI litert-torch), eager PyTorch and ONNX
Runtime, on the models of tests/models/zoo.py, all measured in one run on this machine.

    python bench/compare.py                       # every model; writes bench/results/compare.md
    python bench/compare.py --models resnet18 vit_b_16 --runs 30

Per model: conversion time, .tflite size, op and TRANSPOSE counts, LiteRT latency (XNNPACK; median and p90
after warm-up) at each thread count for both files in the same interpreter, eager PyTorch and ONNX Runtime
latency at the same thread counts, and the ratios ours / official. The official converter is installed into
its own virtual environment (it shares our import name) on first use: bench/.venv-official.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import litert_torch  # noqa: E402
from litert_torch import EdgeModel  # noqa: E402
from litert_torch.flatbuffer.reader import read_model  # noqa: E402
from tests.models import zoo  # noqa: E402

OFFICIAL_VERSION = "0.10.0"
# transformers 5.25 changed the kernel decorators the official exporter patches (its export_hf then fails with
# "apply_rotary_pos_emb is not decorated with @use_kernel_forward_from_hub"): the last release it runs with.
OFFICIAL_REQUIREMENTS = [f"litert-torch=={OFFICIAL_VERSION}", "torch==2.14.1", "torchvision==0.29.1",
                         "transformers==5.24.0", "timm"]
# Targets from the optimisation issue: produced-model latency ratio (ours / official) per model, else 1.0.
LATENCY_TARGETS = {"shufflenet_v2_x1_0": 0.7, "vit_b_16": 0.7, "lstm_2layer": 0.5}
CONVERSION_TARGET = 0.3
SIZE_TARGET = 1.0
# Why a model can miss a target, for the results file. Facts about our output, not about one run's numbers.
NOTES = {
    "lstm_2layer": "With the default targets (cpu, gpu, npu) the LSTM is unrolled: the input projection of all "
                   "steps in one FULLY_CONNECTED, then per step a 32x128 recurrent FULLY_CONNECTED, one SPLIT into "
                   "the gates and ten 32-element LOGISTIC/TANH/MUL/ADD ops, all in one XNNPACK partition (the "
                   "official file slices each gate and runs in three partitions). At this size each op's dispatch, "
                   "not arithmetic, is the time (see the compute column), and both files dispatch a similar number "
                   "of ops per step; below 0.5x would take a fused recurrent kernel, which XNNPACK lacks (LiteRT's "
                   "builtin fused LSTM, kept by target='cpu', is slower here). Running both layers of the stack as "
                   "one wavefront (one set of ops per step for both) halves the ops but turns each step's product "
                   "into a 64x256 one, a quarter zeros, which was slower on one thread.",
    "bilstm": "As for lstm_2layer: each direction unrolled, the REVERSE_V2 of the backward one folded into the order "
              "of its steps.",
    "shufflenet_v2_x1_0": "Both files run the same 56 convolutions through XNNPACK in one partition; what differs is "
                          "data movement (TRANSPOSE counts above). The 16 channel shuffles are real transposes in "
                          "any layout: each shuffled half feeds both the identity path and the next convolution, so "
                          "no permutation of weights absorbs them. Below 0.7x the convolutions themselves would "
                          "have to run faster at the same float32 numerics.",
    "vit_b_16": "Time goes to the 49 FULLY_CONNECTED and 24 BATCH_MATMUL ops, the same products in both files; we "
                "remove a third of the transposes and reshapes, which is not where the time is. The line below "
                "gives the share of XNNPACK's dense peak that 0.7x would need.",
    "mlp": "Four ops over microseconds: the ratio is invocation overhead and timer noise.",
    "swin_t": "The official file has fewer TRANSPOSE ops but moves more data: per block it transposes q, k and v "
              "together (one rank-5 TRANSPOSE) and then k once more for its product, where ours transposes q, k "
              "and v apart (rank 4, each a third of the data) and k once; rank 5 would also keep every block's "
              "attention off a GPU delegate.",
    "inception_v3": "The official file joins each InceptionE block's six branches in one CONCATENATION, which "
                    "XNNPACK does not take (it takes at most five inputs): that file runs in three partitions, "
                    "ours (one join of two, then five) in one.",
    "densenet121": "Each dense layer concatenates every feature map before it: the official file lists them all "
                   "again each time (up to 25 inputs, beyond XNNPACK's five: 44 partitions); ours joins each "
                   "layer's new features to the previous layer's concatenation (two inputs, one partition).",
}


def ensure_official_venv(path: str) -> str:
    python = os.path.join(path, "bin", "python")
    if os.path.exists(python):
        return python
    print(f"installing the official converter into {path} (first run only) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", *OFFICIAL_REQUIREMENTS], check=True)
    return python


def tflite_latency(path: str, inputs: list[np.ndarray], threads: int):
    """A callable that runs one inference (inputs already set; variable state reset as EdgeModel does), and one
    that returns the first output."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs):
        interpreter.set_tensor(detail["index"], value.astype(detail["dtype"]))

    def run():
        interpreter.reset_all_variables()  # for both files alike: a no-op where there is no state
        interpreter.invoke()

    def output():
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])

    return run, output


def dense_peak_gflops(threads: int, runs: int, work: str) -> float:
    """What XNNPACK's float FULLY_CONNECTED reaches on this machine at `threads` (a 256x1024 by 1024x1024
    product, the shape of a transformer's dense layers): the ceiling a compute-bound model runs against."""
    from litert_torch import EdgeModel, ir
    from litert_torch.flatbuffer.writer import serialize

    rows, depth, width = 256, 1024, 1024
    x, y = ir.Tensor("x", [rows, depth], np.float32), ir.Tensor("y", [rows, width], np.float32)
    weights = np.random.default_rng(0).standard_normal((width, depth)).astype(np.float32)
    op = ir.Op("FULLY_CONNECTED", [x, ir.Tensor("w", weights.shape, np.float32, weights), None], [y],
               {"fused_activation_function": "NONE", "keep_num_dims": False})
    path = os.path.join(work, "dense_peak.tflite")
    EdgeModel(serialize(ir.Model([ir.Graph("main", [x], [y], [op])],
                                 [ir.Signature("serving_default", 0, ["x"], ["y"])]))).export(path)
    run, _ = tflite_latency(path, [np.ones([rows, depth], np.float32)], threads)
    seconds = statistics.median(time_interleaved({"peak": run}, runs, 3)["peak"])
    return 2 * rows * depth * width / seconds / 1e9


MIN_SECONDS = 0.5  # per candidate: models that run in microseconds get as many runs as fill this


def time_interleaved(runners: dict, runs: int, warmup: int) -> dict[str, list[float]]:
    """Median-friendly timings: each round runs every candidate once, so drift on a shared machine hits all,
    and the order rotates from round to round.
    At least `runs` rounds, more for fast models (up to MIN_SECONDS of runs per candidate, at most 20000
    rounds): a median of a few dozen microsecond runs moves with every thread wake-up."""
    slowest = 0.0
    for fn in runners.values():
        start = time.perf_counter()
        for _ in range(warmup):
            fn()
        slowest = max(slowest, (time.perf_counter() - start) / max(warmup, 1))
    rounds = max(runs, min(20000, int(MIN_SECONDS / max(slowest, 1e-9))))
    times = {name: [] for name in runners}
    names = list(runners)
    for round_ in range(rounds):
        # Each round starts with the next candidate: for microsecond models the position in the round
        # (what ran just before) moves the time by more than the files differ.
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            start = time.perf_counter()
            runners[name]()
            times[name].append(time.perf_counter() - start)
    return times


def load_model(case, weights: str) -> torch.nn.Module:
    model = case.build()
    model.load_state_dict(torch.load(weights, weights_only=True)["state"])
    return model.eval()


def p90(values: list[float]) -> float:
    return float(np.percentile(values, 90))


def onnx_runner(model, inputs, path: str, threads: int):
    import onnxruntime as ort

    if not os.path.exists(path):
        try:
            torch.onnx.export(model, tuple(inputs), path, dynamo=True)
        except Exception:
            torch.onnx.export(model, tuple(inputs), path, dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    return lambda: session.run(None, feeds)


def fastest_call(call, rounds: int, calls: int) -> float:
    """Seconds per call of `call()`: the fastest of `rounds` rounds, each the mean of `calls` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def write_results(path: str, text: str) -> None:
    """Write a results file (making its folder) and print it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(text)


def machine() -> str:
    cpu = platform.processor() or "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def versions(official: str) -> str:
    import ai_edge_litert

    parts = [f"torch {torch.__version__}", f"ai-edge-litert {getattr(ai_edge_litert, '__version__', '?')}",
             f"official litert-torch {official}", f"python {platform.python_version()}"]
    try:
        import onnxruntime

        parts.append(f"onnxruntime {onnxruntime.__version__}")
    except ImportError:
        pass
    return ", ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[c.name for c in zoo.MODELS])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--official-venv", default=os.path.join(ROOT, "bench", ".venv-official"))
    parser.add_argument("--skip-official", action="store_true")
    parser.add_argument("--skip-onnx", action="store_true")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "compare.md"))
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of the models this run does not measure from the existing --out file")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    cases = {c.name: c for c in zoo.MODELS}
    with tempfile.TemporaryDirectory(prefix="litert_bench_") as work:  # converted models: GBs for the zoo
        return run(args, threads, cases, work)


def run(args, threads, cases, work) -> int:
    """Convert, time and report every model, with the converted files kept in `work`."""
    rows = {}
    jobs = []
    # One warm-up conversion on each side first, so that one-time start-up costs (imports, torch.export's
    # first trace) are not charged to whichever model comes first.
    litert_torch.convert(zoo.MLP().eval(), (torch.randn(1, 32),))
    for name in args.models:
        case = cases[name]
        model = zoo.build(case)
        torch.manual_seed(1)
        inputs = case.inputs(1)
        weights = os.path.join(work, f"{name}.pt")
        torch.save({"state": model.state_dict(), "inputs": list(inputs)}, weights)
        ours = os.path.join(work, f"{name}.ours.tflite")
        gc.collect()
        start = time.perf_counter()
        litert_torch.convert(model, inputs).export(ours)
        seconds = time.perf_counter() - start
        with torch.no_grad():
            reference = model(*inputs)
        ref0 = (reference[0] if isinstance(reference, (tuple, list)) else reference).numpy()
        # Only the saved weights stay: models kept alive would make every later conversion's garbage collection
        # walk them (the official side converts each model in a heap of its own size too).
        rows[name] = {"weights": weights, "inputs": inputs, "ref": ref0, "ours_s": seconds, "ours": ours}
        del model
        jobs.append({"name": name, "weights": weights, "out": os.path.join(work, f"{name}.official.tflite")})
        print(f"ours: {name}: {seconds:.2f}s", flush=True)

    official_version = "not run"
    if not args.skip_official:
        python = ensure_official_venv(args.official_venv)
        jobs_path, results_path = os.path.join(work, "jobs.json"), os.path.join(work, "official.json")
        with open(jobs_path, "w") as f:
            json.dump({"zoo": zoo.__file__, "models": jobs}, f)
        # Without PYTHONPATH: a path to this checkout there would make the worker import our litert_torch
        # (the two share the import name) and measure it twice.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        subprocess.run([python, os.path.join(ROOT, "bench", "official_worker.py"), jobs_path, results_path],
                       cwd=work, check=True, env=env)
        with open(results_path) as f:
            official = json.load(f)
        official_version = official.pop("_version", "?")
        for name, result in official.items():
            rows[name]["official"] = result

    peaks = {n: dense_peak_gflops(n, args.runs, work) for n in threads}
    for name, row in rows.items():
        arrays = [t.numpy() for t in row["inputs"]]
        ours_graph = read_model(open(row["ours"], "rb").read()).subgraphs[0]
        row["ours_size"] = os.path.getsize(row["ours"])
        row["ours_ops"] = len(ours_graph.ops)
        row["ours_transposes"] = ours_graph.op_counts().get("TRANSPOSE", 0)
        row["macs"] = EdgeModel.load(row["ours"]).delegate_plan.targets["cpu"].macs
        off = row.get("official", {})
        has_official = "path" in off
        if has_official:
            off_graph = read_model(open(off["path"], "rb").read()).subgraphs[0]
            off["size"] = os.path.getsize(off["path"])
            off["ops"] = len(off_graph.ops)
            off["transposes"] = off_graph.op_counts().get("TRANSPOSE", 0)
        row["latency"] = {}
        for n in threads:
            torch.set_num_threads(n)
            run_ours, out_ours = tflite_latency(row["ours"], arrays, n)
            # Our file a second time, in an interpreter of its own: the ratio of two identical files is the
            # noise band of this run, against which the ours / official ratio can be read.
            runners = {"ours": run_ours, "ours again": tflite_latency(row["ours"], arrays, n)[0]}
            if has_official:
                run_off, out_off = tflite_latency(off["path"], arrays, n)
                runners["official"] = run_off
            model, inputs = load_model(cases[name], row["weights"]), row["inputs"]

            def eager(model=model, inputs=inputs):
                with torch.inference_mode():
                    model(*inputs)

            # The two .tflite files alternate; eager PyTorch and ONNX Runtime run in blocks of their own, since
            # their thread pools keep spinning after a call and would slow whichever candidate runs next.
            times = time_interleaved(runners, args.runs, args.warmup)
            times.update(time_interleaved({"eager": eager}, args.runs, args.warmup))
            if not args.skip_onnx:
                try:
                    onnx = onnx_runner(model, inputs, os.path.join(work, f"{name}.onnx"), n)
                    times.update(time_interleaved({"onnxruntime": onnx}, args.runs, args.warmup))
                except Exception as exc:
                    row["onnx_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            row["latency"][n] = {k: (statistics.median(v), p90(v)) for k, v in times.items()}
            run_ours()
            row["ours_err"] = float(np.abs(out_ours() - row["ref"]).max())
            if has_official:
                run_off()
                got = out_off()
                row["official_err"] = float(np.abs(got - row["ref"]).max()) if got.shape == row["ref"].shape else None
        print(f"timed: {name}", flush=True)

    report = render(rows, threads, args, official_version, peaks)
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            report = merge_reports(f.read(), report, set(rows), [c.name for c in zoo.MODELS])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(report)
    print(report)
    return 0


def _row_key(line: str) -> tuple[str, str] | None:
    """(kind, model) of a results line about one model: a table row ("| name | ..."), a note ("- **name**: ...")
    or a target's need ("- **name** at ..."); None for any other line."""
    if line.startswith("| ") and not line.startswith("| model ") and not line.startswith("|---"):
        return "row", line.split("|")[1].strip()
    if line.startswith("- **"):
        name, rest = line[4:].split("**", 1)
        return ("note" if rest.startswith(":") else "need"), name
    return None


def merge_reports(old: str, new: str, measured: set[str], order: list[str]) -> str:
    """`new` with the lines (table rows, notes) about models it did not measure taken from `old`, each group of
    such lines in zoo order where `new` has that group. The header says which run the kept lines come from."""
    def sections(text: str) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {"": []}
        title = ""
        for line in text.splitlines():
            if line.startswith("## "):
                title = line
                found[title] = []
            else:
                found[title].append(line)
        return found

    rank = {name: i for i, name in enumerate(order)}
    before = sections(old)
    earlier = [ln[2:] for ln in before[""] if ln.startswith(("- command:", "- date:", "- machine:"))]
    out: list[str] = []
    for title, lines in sections(new).items():
        if title:
            out.append(title)
        else:
            lines = lines[:]
            at = next(i for i, ln in enumerate(lines) if ln.startswith("- latency:")) + 1
            lines.insert(at, "- lines about the models this run did not measure are kept from the earlier run ("
                         + "; ".join(earlier) + "); their compute share is against that run's dense peak")
        ours = {_row_key(ln) for ln in lines} - {None}
        kept = [ln for ln in before.get(title, []) if _row_key(ln) is not None and _row_key(ln)[1] not in measured
                and _row_key(ln) not in ours]
        placed = set()
        for line in lines:
            key = _row_key(line)
            if key is None:
                out.append(line)
            elif key[0] not in placed:
                placed.add(key[0])
                group = [ln for ln in lines + kept if _row_key(ln) is not None and _row_key(ln)[0] == key[0]]
                out.extend(sorted(group, key=lambda ln: rank.get(_row_key(ln)[1], len(rank))))
        leftover = [ln for ln in kept if _row_key(ln)[0] not in placed]
        if leftover:  # a group only the earlier run had: before the section's trailing blank line
            end = len(out) - (1 if out and not out[-1] else 0)
            out[end:end] = leftover
    return "\n".join(out) + "\n"


def _ms(pair) -> str:
    return f"{pair[0] * 1e3:.2f} / {pair[1] * 1e3:.2f}"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "–"


def render(rows, threads, args, official_version, peaks) -> str:
    command = "python bench/compare.py " + " ".join(sys.argv[1:])
    lines = [
        "# Ours vs the official converter",
        "",
        f"- command: `{command.strip()}`",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {machine()}",
        f"- versions: {versions(official_version)}",
        "- conversion: wall time of convert + export per model, after one warm-up conversion on each side",
        f"- latency: LiteRT interpreter with XNNPACK, at least {args.runs} runs (as many as fill {MIN_SECONDS} s for "
        f"fast models) after {args.warmup} warm-up runs, median / p90"
        " in ms; both .tflite files run in the same interpreter, alternating run by run in rotating order (inputs set once, variable"
        " state reset before each run); eager PyTorch and ONNX Runtime are timed in separate blocks",
        "",
        "## Conversion and file",
        "",
        "| model | convert ours s | official s | ratio | size ours MB | official MB | ratio | ops ours / official "
        "| TRANSPOSE ours / official | max err ours / official |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        off = row.get("official", {})
        if "path" in off:
            lines.append(
                f"| {name} | {row['ours_s']:.2f} | {off['seconds']:.2f} | {_ratio(row['ours_s'], off['seconds'])} "
                f"| {row['ours_size'] / 1e6:.2f} | {off['size'] / 1e6:.2f} | {_ratio(row['ours_size'], off['size'])} "
                f"| {row['ours_ops']} / {off['ops']} | {row['ours_transposes']} / {off['transposes']} "
                f"| {row['ours_err']:.1e} / {row['official_err'] if row.get('official_err') is None else format(row['official_err'], '.1e')} |")
        else:
            reason = off.get("error", "not run")
            lines.append(f"| {name} | {row['ours_s']:.2f} | failed: {reason} | – | {row['ours_size'] / 1e6:.2f} | – "
                         f"| – | {row['ours_ops']} / – | {row['ours_transposes']} / – | {row['ours_err']:.1e} / – |")
    for n in threads:
        lines += ["", f"## Latency, {n} thread{'s' if n > 1 else ''} (ms, median / p90)", "",
                  f"XNNPACK's dense peak here: {peaks[n]:.1f} GFLOP/s (a 256x1024x1024 FULLY_CONNECTED, timed in this "
                  "run); compute is 2 x the model's multiply-accumulates per inference over our median latency.", "",
                  "| model | ours | official | ratio ours/official | target | same file twice | compute GFLOP/s (of peak) "
                  "| eager PyTorch | ONNX Runtime |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, row in rows.items():
            lat = row["latency"][n]
            target = LATENCY_TARGETS.get(name, 1.0)
            ratio = lat["ours"][0] / lat["official"][0] if "official" in lat else None
            verdict = "–" if ratio is None else ("met" if ratio <= target else f"missed by {ratio / target:.2f}x")
            gflops = 2 * row["macs"] / lat["ours"][0] / 1e9
            lines.append(
                f"| {name} | {_ms(lat['ours'])} | {_ms(lat['official']) if 'official' in lat else '–'} "
                f"| {f'{ratio:.2f}' if ratio is not None else '–'} | ≤ {target} ({verdict}) "
                f"| {lat['ours again'][0] / lat['ours'][0]:.2f} "
                f"| {gflops:.1f} ({gflops / peaks[n]:.0%}) | {_ms(lat['eager'])} "
                f"| {_ms(lat['onnxruntime']) if 'onnxruntime' in lat else row.get('onnx_error', '–')} |")
    notes = [(name, NOTES[name]) for name in rows if name in NOTES]
    if notes:
        lines += ["", "## Notes on targets", ""]
        lines += [f"- **{name}**: {text}" for name, text in notes]
    needs = []
    for name, target in LATENCY_TARGETS.items():
        lat = rows.get(name, {}).get("latency", {}).get(threads[0], {})
        if "official" in lat:
            needed = 2 * rows[name]["macs"] / (lat["official"][0] * target) / 1e9
            needs.append(f"- **{name}** at {target}x the official file's {threads[0]}-thread latency would compute "
                         f"{needed:.1f} GFLOP/s, {needed / peaks[threads[0]]:.0%} of XNNPACK's dense peak here.")
    if needs:
        lines += ["", "What the latency targets below 1.0 would take:", ""] + needs
    lines += ["", f"Targets: conversion time ≤ {CONVERSION_TARGET}x the official converter's, size ≤ {SIZE_TARGET}x, "
              "latency ≤ 1.0x (≤ 0.7x for shufflenet_v2_x1_0 and vit_b_16, ≤ 0.5x for lstm_2layer). \"Same file "
              "twice\" times our file in a second interpreter alongside the first: how far apart two identical files "
              "land in this run, the noise band for the ours / official ratio."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
