"""int4 weights for decode: speed and quality of quantization recipes side by side on one bench model (by
default the ~135M Llama of bench/llm.py, SmolLM-135M's shape with its own random weights).

    python bench/llm_int4.py [--model llama_135m] [--recipes none,dynamic_wi8_afp32,dynamic_wi4b32_afp32]
                             [--repeats 4] [--results bench/results/llm_int4.md]

Each recipe's bundle is exported once (a fresh process each, as bench/llm.py does); then the bundles are timed
by litert_lm.Benchmark at one thread in turns (one untimed run each, then `--repeats` rounds over all of them,
best kept), so that the ratios between recipes come from the same minutes of this shared, noisy machine. The
decode bound is the constant bytes a decode step reads (bench/llm.py's `decode_weight_bytes`: each buffer once, the
rows a lookup reads of a table nothing else reads) over the memory read bandwidth measured in the same run. Quality: `generative.validate_llm` of each bundle (our runner) against the Hugging Face model in
float32: greedy tokens, teacher-forced top-1 agreement and each step's max logit error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from compare import write_results  # noqa: E402

from llm import (COPIES, bundle_copies, convert, decode_weight_bytes, model_dir, read_bandwidth,  # noqa: E402
                 read_tflite, runtime_speed)

ITEMSIZE = {0: 4, 1: 2, 9: 1, 2: 4}  # TFLite tensor types: float32, float16, int8, int32


def decode_cache_bytes(path: str, first: int, last: int) -> float:
    """Bytes of the KV cache that a decode step's attention reads besides the weights, on average over the steps
    at input positions `first` to `last` - 1: the slots of the prefix branch each step runs (generative/prefix.py's
    lengths: the shortest that holds the position, or the whole cache), keys and values of every layer, each read
    once."""
    import numpy as np

    from litert_torch.generative.prefix import branch_length

    m, _ = read_tflite(path)
    for i in range(m.SignatureDefsLength()):
        sig = m.SignatureDefs(i)
        if sig.SignatureKey() != b"decode":
            continue
        graph = m.Subgraphs(sig.SubgraphIndex())
        total, slots = 0, 0
        for j in range(sig.InputsLength()):
            if sig.Inputs(j).Name().startswith(b"kv_cache_"):
                t = graph.Tensors(sig.Inputs(j).TensorIndex())
                total += int(np.prod(t.ShapeAsNumpy())) * ITEMSIZE[t.Type()]
                slots = max(slots, *(int(d) for d in t.ShapeAsNumpy()))  # the cache length: the longest axis at these sizes
        read = [branch_length(p, slots) for p in range(first, last)]
        return total * sum(read) / len(read) / slots
    raise ValueError(f"{path} has no decode signature")


PROMPT = "once upon a time there was a little robot who liked to read books about the sea"


def quality(src: str, bundles: dict, tokens: int) -> dict:
    import torch
    import transformers

    from litert_torch import generative

    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    out = {}
    for recipe, bundle in bundles.items():
        llm = generative.load(bundle)
        report = generative.validate_llm(llm, hf, llm.encode(PROMPT), tokens, layers=False)
        errors = report.step_max_abs_error
        out[recipe] = {"first_divergence": report.first_divergence, "top1": report.token_agreement,
                       "steps": len(report.step_top1_agrees), "mean_abs": sum(errors) / len(errors),
                       "max_abs": max(errors), "max_rel": report.max_relative_error}
        print(recipe, json.dumps(out[recipe]), flush=True)
        del llm
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama_135m")
    parser.add_argument("--recipes", default="none,dynamic_wi8_afp32,dynamic_wi4b32_afp32")
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--quality-tokens", type=int, default=32)
    parser.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "llm_int4.md"))
    args = parser.parse_args()
    recipes = args.recipes.split(",")
    src = model_dir(args.model)
    rows: dict = {}
    with tempfile.TemporaryDirectory() as work:
        for recipe in recipes:
            out = os.path.join(work, recipe.replace("/", "_"))
            conv = convert(src, out, recipe, args.prefill, args.cache)
            rows[recipe] = {"bundle": conv["bundle"], "bundle_mb": os.path.getsize(conv["bundle"]) / 1e6,
                            "weights": decode_weight_bytes(os.path.join(out, "model.tflite")),
                            "cache": decode_cache_bytes(os.path.join(out, "model.tflite"), args.prefill,
                                                        args.prefill + args.decode_tokens)}
        bandwidth = read_bandwidth()
        copies = {r: bundle_copies(rows[r]["bundle"], COPIES) for r in recipes}
        for r in recipes:
            runtime_speed(copies[r][0], 1, args.prefill, args.decode_tokens, args.cache)
        for repeat in range(args.repeats):
            for r in recipes:
                got = runtime_speed(copies[r][repeat % COPIES], 1, args.prefill, args.decode_tokens, args.cache)
                rows[r]["decode_ms"] = min(rows[r].get("decode_ms", float("inf")), got["decode_ms"])
                rows[r]["prefill_tok_s"] = max(rows[r].get("prefill_tok_s", 0.0), got["prefill_tok_s"])
                print(r, json.dumps(got), flush=True)
        bandwidth = max(bandwidth, read_bandwidth())  # the best of before and after the timings
        scores = quality(src, {r: rows[r]["bundle"] for r in recipes}, args.quality_tokens)
    from importlib.metadata import version

    base = "dynamic_wi8_afp32" if "dynamic_wi8_afp32" in rows else recipes[0]
    lines = ["# int4 weights for decode", "",
             f"`python bench/llm_int4.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores (shared); litert-lm-api {version('litert-lm-api')}, ai-edge-quantizer "
             f"{version('ai-edge-quantizer')}. Model `{args.model}` (bench/llm.py's build, random weights).",
             f"Speed: one thread, prefill {args.prefill} tokens, cache {args.cache}, {args.decode_tokens} decode "
             f"tokens, litert_lm.Benchmark; the bundles timed in turns, best of {args.repeats} rounds. Memory read "
             f"bandwidth in this run: {bandwidth / 1e9:.1f} GB/s (one thread); bound: the constant bytes "
             "a decode step reads (each buffer once; of a table only looked up, the rows a token looks up) at that "
             "bandwidth; bound with cache: the weights and the KV cache "
             "slots a timed decode step's attention reads (float32 keys and values of the prefix branch it runs, "
             "generative/prefix.py; on average over the timed steps), once each.",
             f"Quality: `generative.validate_llm` against the Hugging Face model in float32, {args.quality_tokens} "
             "greedy tokens from one prompt; top-1: teacher-forced steps whose top token is Hugging Face's; logit "
             "error: each step's max |ours - HF| over the vocabulary (mean and max over the steps; relative: to "
             "the step's max |HF logit|).", "",
             f"| recipe | bundle MB | bound ms | bound with cache ms | decode ms | decode / bound | decode / bound with cache | decode / {base} | prefill tok/s | "
             "greedy tokens as float to | top-1 agreement | mean step logit error | max logit error | max relative |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in recipes:
        row, q = rows[r], scores[r]
        bound = 1000.0 * row["weights"] / bandwidth
        with_cache = 1000.0 * (row["weights"] + row["cache"]) / bandwidth
        same = "all" if q["first_divergence"] is None else f"step {q['first_divergence']}"
        lines.append(f"| {r} | {row['bundle_mb']:.1f} | {bound:.2f} | {with_cache:.2f} | {row['decode_ms']:.2f} | "
                     f"{row['decode_ms'] / bound:.2f} | {row['decode_ms'] / with_cache:.2f} | {row['decode_ms'] / rows[base]['decode_ms']:.2f} | "
                     f"{row['prefill_tok_s']:.0f} | {same} | {q['top1']:.1%} of {q['steps']} | {q['mean_abs']:.3g} | "
                     f"{q['max_abs']:.3g} | {q['max_rel']:.3g} |")
    text = "\n".join(lines) + "\n"
    write_results(args.results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
