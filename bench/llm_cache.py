"""Decode time against the KV cache's allocated length: the ~135M Llama of bench/llm.py (SmolLM-135M's shape,
random weights) exported at several cache lengths, timed after a short prompt in the LiteRT-LM runtime
(`litert_lm.Benchmark`) and in our runner (`generative.load`), one thread. Each cache length is exported twice:
as the exporter writes it ("prefix": each attention core runs on the cache prefix that holds the filled part,
generative/prefix.py) and, as the control, with that rewrite turned off in this process ("whole": every step
attends over the whole cache), so that the part of a step that grows with the cache shows. A second table times the cache update alone: a
graph of 30 DYNAMIC_UPDATE_SLICEs, one per cache of the model's shape, run through LiteRT's CompiledModel with
each cache's buffer bound as both input and output (as our runner and LiteRT-LM bind them) and with separate
output buffers.

    python bench/llm_cache.py [--caches 512,1024,4096] [--recipes none,dynamic_wi8_afp32] [--prompt 32]
                              [--decode-tokens 32] [--repeats 3]

Each row gives decode ms/token and its ratio to the same variant at the first (shortest) cache, all measured in
this run: bundles alternate, one untimed run each, then the best of `--repeats`. The model is saved once under
bench/.llm_models/llama_135m_8k (llama_135m's weights, max_position_embeddings 8192 so that a 4096 cache is
allowed). Results: bench/results/llm_cache.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
RESULTS = os.path.join(ROOT, "bench", "results", "llm_cache.md")
VARIANTS = ("prefix", "whole")


def model_8k() -> str:
    """llama_135m's directory with max_position_embeddings 8192 (the weights are the same)."""
    from llm import MODELS_DIR, model_dir

    path = os.path.join(MODELS_DIR, "llama_135m_8k")
    if not os.path.exists(os.path.join(path, "config.json")):
        base = model_dir("llama_135m")
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(base):
            shutil.copy(os.path.join(base, name), path)
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        cfg["max_position_embeddings"] = 8192
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    return path


def export(src: str, out: str, recipe: str, prompt: int, cache: int, variant: str) -> str:
    from litert_torch.generative import signature
    from litert_torch.generative.export_hf import export as hf_export

    rewrite = signature.attend_filled_prefix
    if variant == "whole":  # the control: no attention core rewritten
        signature.attend_filled_prefix = lambda graph, input_pos, min_skipped_flops=0: 0
    try:
        return hf_export.export(model=src, output_dir=out, prefill_lengths=[prompt], cache_length=cache,
                                quantization_recipe=recipe)
    finally:
        signature.attend_filled_prefix = rewrite


def litert_lm_speed(bundle: str, prompt: int, decode: int, cache: int) -> tuple[float, float]:
    """LiteRT-LM's decode ms/token and prefill tokens/s."""
    import litert_lm

    with tempfile.TemporaryDirectory() as cache_dir:
        info = litert_lm.Benchmark(bundle, litert_lm.Backend.CPU(thread_count=1), prefill_tokens=prompt,
                                   decode_tokens=decode, max_num_tokens=cache, cache_dir=cache_dir).run()
    return 1000.0 / info.last_decode_tokens_per_second, info.last_prefill_tokens_per_second


def runner_decode_ms(bundle: str, prompt: int, decode: int) -> tuple[float, np.ndarray]:
    """ms per greedy decode step after a `prompt`-token prompt in our runner, and the logits of every step."""
    from litert_torch.generative import load

    llm = load(bundle, num_threads=1)
    logits = llm.prefill(list(range(1, prompt + 1)))
    steps = []
    start = time.perf_counter()
    for _ in range(decode):
        logits = llm.decode(int(np.argmax(logits)))
        steps.append(logits)
    elapsed = time.perf_counter() - start
    return 1000.0 * elapsed / decode, np.stack(steps)


def update_graph(cache: int, layers: int = 30, heads: int = 3, depth: int = 64) -> tuple[bytes, list, list]:
    """A model of `layers` DYNAMIC_UPDATE_SLICEs writing one position of [1, heads, cache, depth] caches, the
    caches returned under their input names; with its input and output names."""
    from litert_torch import ir
    from litert_torch.flatbuffer.writer import serialize

    graph = ir.Graph("update")
    pos = ir.Tensor("input_pos", [1], np.int32)
    row = ir.Tensor("row", [1, heads, 1, depth], np.float32)
    zero = ir.Tensor("zero", [1], np.int32, np.zeros(1, np.int32))
    start = ir.Tensor("start", [4], np.int32)
    graph.ops.append(ir.Op("CONCATENATION", [zero, zero, pos, zero], [start],
                           {"axis": 0, "fused_activation_function": "NONE"}))
    graph.inputs, names = [pos, row], [f"cache_{i}" for i in range(layers)]
    for name in names:
        old = ir.Tensor(name, [1, heads, cache, depth], np.float32)
        new = ir.Tensor(f"{name}_updated", [1, heads, cache, depth], np.float32)
        graph.inputs.append(old)
        graph.ops.append(ir.Op("DYNAMIC_UPDATE_SLICE", [old, row, start], [new], {}))
        graph.outputs.append(new)
    inputs = ["input_pos", "row", *names]
    return serialize(ir.Model([graph], [ir.Signature("update", 0, inputs, names)])), inputs, names


def update_ms(cache: int, repeats: int) -> dict[str, float]:
    """ms per call of `update_graph(cache)` with the caches' buffers aliased (input = output) and separate."""
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator

    flatbuffer, inputs, outputs = update_graph(cache)
    model = CompiledModel.from_buffer(flatbuffer, HardwareAccelerator.CPU)
    ins = {n: model.create_input_buffer_by_name("update", n) for n in inputs}
    ins["input_pos"].write(np.array([40], np.int32))
    ins["row"].write(np.ones((1, 3, 1, 64), np.float32))
    separate = {n: model.create_output_buffer_by_name("update", n) for n in outputs}
    out = {}
    for label, outs in (("aliased", {n: ins[n] for n in outputs}), ("separate", separate)):
        model.run_by_name("update", ins, outs)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(10):
                model.run_by_name("update", ins, outs)
            best = min(best, (time.perf_counter() - start) / 10)
        written = outs[outputs[0]].read(3 * cache * 64, np.float32).reshape(1, 3, cache, 64)
        assert (written[0, :, 40] == 1).all(), label
        out[label] = 1000.0 * best
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--caches", default="512,1024,4096")
    parser.add_argument("--recipes", default="none,dynamic_wi8_afp32")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results", default=RESULTS)
    args = parser.parse_args()
    caches = [int(c) for c in args.caches.split(",")]
    updates = {c: update_ms(c, args.repeats) for c in caches}
    print(json.dumps(updates), flush=True)
    src = model_8k()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for recipe in args.recipes.split(","):
            bundles = {(v, c): export(src, os.path.join(work, f"{recipe}_{v}_{c}"), recipe, args.prompt, c, v)
                       for v in VARIANTS for c in caches}
            times: dict[tuple[str, int], dict[str, float]] = {k: {} for k in bundles}
            logits = {}
            for repeat in range(args.repeats + 1):  # the first round untimed
                for key, bundle in bundles.items():
                    lm, prefill = litert_lm_speed(bundle, args.prompt, args.decode_tokens, key[1])
                    ours, logits[key] = runner_decode_ms(bundle, args.prompt, args.decode_tokens)
                    if repeat:
                        for side, ms in (("litert_lm", lm), ("runner", ours)):
                            times[key][side] = min(times[key].get(side, ms), ms)
                        times[key]["prefill"] = max(times[key].get("prefill", prefill), prefill)
            for (variant, cache), got in times.items():
                base = times[(variant, caches[0])]
                rows.append({"recipe": recipe, "variant": variant, "cache": cache, **got,
                             "litert_lm_ratio": got["litert_lm"] / base["litert_lm"],
                             "runner_ratio": got["runner"] / base["runner"],
                             "max_logit_diff": float(np.abs(logits[(variant, cache)]
                                                            - logits[("whole", caches[0])]).max())})
                print(json.dumps(rows[-1]), flush=True)
    text = render(rows, updates, args)
    with open(args.results, "w") as f:
        f.write(text)
    print(text)
    return 0


def render(rows: list[dict], updates: dict[int, dict[str, float]], args) -> str:
    from importlib.metadata import version

    lines = ["# Decode time against the KV cache's length", "",
             f"`python bench/llm_cache.py --caches {args.caches} --recipes {args.recipes} --prompt {args.prompt} "
             f"--decode-tokens {args.decode_tokens} --repeats {args.repeats}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores "
             f"(shared); litert-lm-api {version('litert-lm-api')}, ai-edge-litert {version('ai-edge-litert')}.",
             f"llama_135m (SmolLM-135M's shape, random weights), a {args.prompt}-token prompt, then "
             f"{args.decode_tokens} greedy decode steps, one thread; best of {args.repeats} after an untimed round. "
             "prefix: the bundle as exported (each attention core on the cache prefix holding the filled part, "
             "generative/prefix.py); whole: the control, that rewrite turned off (every step attends over the "
             f"whole cache). Ratios are to the same variant and recipe at cache {args.caches.split(',')[0]}, "
             "measured in this run. logit diff: the largest difference of our runner's logits, over every step, "
             f"from those of the whole-cache bundle at cache {args.caches.split(',')[0]} (0: the same numbers). Prefill: "
             f"the {args.prompt}-token prompt's tokens/s in LiteRT-LM (best).", "",
             "| recipe | variant | cache | LiteRT-LM decode ms | ratio | runner decode ms | ratio | logit diff | "
             "LiteRT-LM prefill tok/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['recipe']} | {r['variant']} | {r['cache']} | {r['litert_lm']:.1f} | "
                     f"{r['litert_lm_ratio']:.2f} | {r['runner']:.1f} | {r['runner_ratio']:.2f} | "
                     f"{r['max_logit_diff']:.3g} | {r['prefill']:.0f} |")
    lines += ["", "The cache update alone: 30 DYNAMIC_UPDATE_SLICEs of one position into [1, 3, C, 64] float32 "
              "caches (the 135M model's key caches), ms per call through CompiledModel, best of "
              f"{args.repeats} x 10 calls.", "",
              "| cache | MB of caches | aliased buffers ms | separate output buffers ms |", "|---|---|---|---|"]
    for cache, got in updates.items():
        lines.append(f"| {cache} | {30 * 3 * cache * 64 * 4 / 1e6:.0f} | {got['aliased']:.3f} | "
                     f"{got['separate']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
