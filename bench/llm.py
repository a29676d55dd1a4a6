"""LLM export benchmark, side by side with the official `export_hf` (PyPI litert-torch, in its own virtual
environment bench/.venv-official): conversion time and peak memory, bundle size, and prefill / decode speed of
both bundles in the LiteRT-LM runtime, with each decode time set against the bound of reading the weights once
per token on this machine.

    python bench/llm.py [--models toy_llama,llama_135m] [--recipes none,dynamic_wi8_afp32] [--threads 1,2]
                        [--no-official]

Models are built from configs with random weights and saved as Hugging Face directories under bench/.llm_models
(first run only): 2-layer toys of each architecture, a ~135M-parameter Llama (SmolLM-135M's shape) and, when
asked for (`--models llama_1b --no-official`), a 1.2B-parameter one (Llama-3.2-1B's shape, 4.9 GB of float32
weights), and mixture-of-experts models at hidden size 256 (`moe_config`): a Qwen3-MoE with 32 experts of which
4 are chosen per token (`--models moe_32e`), gpt-oss (`gpt_oss_32e`: 32 experts, top 4), LFM2-MoE
(`lfm2_moe_32e`: 32, top 4) and Qwen3-Next (`qwen3_next_64e`: 64, top 2, and a shared expert). Each
conversion runs in a fresh process, so that its peak RSS is its own. The decode bound is the bytes of weights a
decode step reads (the bundle's TFLite model, less what only prefill reads) divided by the memory read bandwidth
measured in the same run (a large numpy reduction on one thread); for a mixture-of-experts model, the k-of-E
bound counts k of the E rows of each expert table the graph gathers by expert (`gathered_expert_bytes`).
The official exporter's failures are recorded as rows (the exception's type and message); a mixture-of-experts
model it fails on by default is tried again with `OFFICIAL_MOE_OPTIONS`. Results: bench/results/llm.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "bench", ".llm_models")
RESULTS = os.path.join(ROOT, "bench", "results", "llm.md")
sys.path.insert(0, ROOT)

TOYS = ("llama", "qwen2", "qwen3", "phi3", "gemma3", "qwen3_moe")


def model_dir(name: str) -> str:
    path = os.path.join(MODELS_DIR, name)
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    import torch
    import transformers

    from tests.generative import tiny_lm

    if name.startswith("toy_"):
        return tiny_lm.save(path, name.removeprefix("toy_"))
    shapes = {  # SmolLM-135M's and Llama-3.2-1B's shapes
        "llama_135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                           num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048),
        "llama_1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192}),
    }
    moe = moe_config(name, tiny_lm.tokenizer())
    if moe is not None:
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(moe).save_pretrained(path)
        tiny_lm.tokenizer().save_pretrained(path)
        return path
    if name in shapes:
        tok = tiny_lm.tokenizer()
        cfg = transformers.LlamaConfig(**shapes[name], tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                                       eos_token_id=tok.eos_token_id)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        model.save_pretrained(path)
        tok.save_pretrained(path)
        return path
    raise ValueError(f"unknown model {name}")


def moe_config(name: str, tok):
    """The mixture-of-experts benchmark models' configs (None for other names): each architecture's layers at a
    small width (hidden 256) with a realistic ratio of experts to chosen ones, the experts most of the weights."""
    import transformers as T

    common = dict(vocab_size=len(tok), hidden_size=256, num_attention_heads=8, max_position_embeddings=2048,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if name == "moe_32e":  # Qwen3-MoE (32 experts, top 4)
        return T.Qwen3MoeConfig(**common, intermediate_size=512, moe_intermediate_size=128, num_experts=32,
                                num_experts_per_tok=4, norm_topk_prob=True, num_hidden_layers=4,
                                num_key_value_heads=4, head_dim=32, tie_word_embeddings=True)
    # no padding token: its embedding row would be initialised to zeros, an all-zero channel of the tied table
    # that int4 recipes give a zero scale (which XNNPack refuses)
    common["pad_token_id"] = None
    if name == "gpt_oss_32e":  # gpt-oss-20b's layout: 32 experts (top 4) with biases and clamped SwiGLU, attention
        # sinks, sliding-window (128) and full attention layers alternating
        return T.GptOssConfig(**{**common, "max_position_embeddings": 131072}, intermediate_size=128,
                              num_local_experts=32, num_experts_per_tok=4, num_hidden_layers=4, num_key_value_heads=2, head_dim=32, sliding_window=128,
                              layer_types=["sliding_attention", "full_attention"] * 2, tie_word_embeddings=False)
    if name == "lfm2_moe_32e":  # LFM2-8B-A1B's layout: short convolutions around attention layers, a dense MLP
        # in the first layer, 32 sigmoid-routed experts (top 4) with a routing bias in the others
        return T.Lfm2MoeConfig(**common, intermediate_size=512, moe_intermediate_size=128, num_experts=32,
                               num_experts_per_tok=4, num_dense_layers=1, num_hidden_layers=6,
                               num_key_value_heads=4,
                               layer_types=["conv", "conv", "full_attention", "conv", "conv", "full_attention"],
                               tie_word_embeddings=True)
    if name == "qwen3_next_64e":  # Qwen3-Next's layout: three gated DeltaNet layers to one gated attention layer,
        # 64 routed experts (top 2) and a shared expert in every layer
        return T.Qwen3NextConfig(**common, intermediate_size=512, moe_intermediate_size=64,
                                 shared_expert_intermediate_size=64, num_experts=64, num_experts_per_tok=2,
                                 norm_topk_prob=True, num_hidden_layers=4, num_key_value_heads=2, head_dim=64,
                                 layer_types=["linear_attention"] * 3 + ["full_attention"],
                                 linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
                                 linear_num_key_heads=4, linear_num_value_heads=8, tie_word_embeddings=False)
    return None


# A child's ru_maxrss starts from its parent's resident size at fork: the peak is read from VmHWM after resetting
# it at the start (Linux: writing 5 to /proc/self/clear_refs).
CONVERT = """
import json, sys, time
open("/proc/self/clear_refs", "w").write("5")
sys.path.insert(0, {root!r})
start = time.perf_counter()
from litert_torch.generative.export_hf import export
out = export.export(model={src!r}, output_dir={out!r}, prefill_lengths=[{prefill}], cache_length={cache},
                    quantization_recipe={recipe!r}, keep_temporary_files=True)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({{"seconds": time.perf_counter() - start, "peak_rss": hwm * 1024, "bundle": out}}))
"""


def convert(src: str, out: str, recipe: str, prefill: int, cache: int) -> dict:
    code = CONVERT.format(root=ROOT, src=src, out=out, recipe=recipe, prefill=prefill, cache=cache)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


# What the official exporter needs for a mixture-of-experts model: with its defaults the export fails; this
# option splits the experts' weights and runs every expert for every token, weighting the outputs by the router.
OFFICIAL_MOE_OPTIONS = {"moe_exports_implementation": "litert_moe_sequential"}


def convert_official(python: str, src: str, out: str, recipe: str, prefill: int, cache: int,
                     options: dict | None = None) -> dict:
    """The official exporter's run (with extra export keywords `options`), or {"error": ...} when it fails."""
    worker = os.path.join(ROOT, "bench", "official_llm_worker.py")
    proc = subprocess.run([python, worker, src, out, str(prefill), str(cache), recipe, json.dumps(options or {})],
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    if proc.returncode != 0:
        return {"error": failure(proc.stderr, proc.returncode), **({"options": options} if options else {})}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if options:
        result["options"] = options
    bundles = [f for f in os.listdir(out) if f.endswith(".litertlm")]
    tflites = [f for f in os.listdir(out) if f.endswith(".tflite")]
    if not bundles:
        return {"error": "no .litertlm written"}
    result["bundle"] = os.path.join(out, bundles[0])
    if tflites:
        result["tflite"] = os.path.join(out, sorted(tflites, key=len)[-1])
    else:  # the official exporter keeps only the bundle: its model, for the weight bytes
        from litert_torch.generative.bundle import unpack_bundle

        result["tflite"] = os.path.join(out, "unpacked.tflite")
        with open(result["tflite"], "wb") as f:
            f.write(unpack_bundle(result["bundle"])[0])
    return result


def failure(stderr: str, code: int) -> str:
    """A failed run's exception, "Type: message" (its last line that reads as one; torch.export prints more
    after it), cut to 160 characters; else its last line of stderr, or its exit status."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    raised = [l for l in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b:?", l)]
    return (raised or lines or [f"exit {code}"])[-1][:160]


def is_moe(src: str) -> bool:
    """Whether the model directory's config.json has routed experts."""
    return expert_counts(src) is not None


def expert_counts(src: str) -> tuple[int, int] | None:
    """(experts chosen per token, experts per layer) from the model directory's config.json; None without
    routed experts."""
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    return (int(cfg["num_experts_per_tok"]), int(experts)) if experts else None


def read_tflite(path: str) -> tuple[Any, list[int]]:
    """The .tflite at `path` through the TFLite schema's flatbuffer accessors, and each operator code's builtin
    operator."""
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        m = schema.Model.GetRootAs(f.read(), 0)
    codes = [max(m.OperatorCodes(i).BuiltinCode(), m.OperatorCodes(i).DeprecatedBuiltinCode())
             for i in range(m.OperatorCodesLength())]
    return m, codes


def buffer_bytes(m: Any, index: int) -> int:
    """The size of buffer `index` of model `m`, stored inside the flatbuffer or after it."""
    return m.Buffers(index).DataLength() or m.Buffers(index).Size()


def weight_bytes(path: str) -> int:
    """Bytes of constant data in the .tflite (each buffer once)."""
    m, _ = read_tflite(path)
    meta = {m.Metadata(i).Buffer() for i in range(m.MetadataLength())}
    return sum(buffer_bytes(m, i) for i in range(m.BuffersLength()) if i not in meta)


def decode_weight_bytes(path: str, signature: str = "decode") -> int:
    """Bytes of constant data one call of `signature` reads (each buffer once): what its subgraph and the
    subgraphs its IFs run read, where a table that only GATHER or EMBEDDING_LOOKUP reads counts the rows one call
    looks up (one row of an embedding table per token, not the table), and blockwise scales count as their
    weights do. Unlike `weight_bytes`, constants only other signatures read are not counted."""
    from ai_edge_litert import schema_py_generated as schema

    m, codes = read_tflite(path)
    op_enum = schema.BuiltinOperator
    lookups = {op_enum.GATHER: 0, op_enum.EMBEDDING_LOOKUP: 1}  # opcode -> the table's input slot
    start = next(m.SignatureDefs(i).SubgraphIndex() for i in range(m.SignatureDefsLength())
                 if m.SignatureDefs(i).SignatureKey().decode() == signature)
    pending, seen = [start], set()
    whole: set[int] = set()
    rows: dict[int, float] = {}  # buffer -> the fraction of it the lookups read
    while pending:
        gi = pending.pop()
        if gi in seen:
            continue
        seen.add(gi)
        g = m.Subgraphs(gi)
        for j in range(g.OperatorsLength()):
            op = g.Operators(j)
            code = codes[op.OpcodeIndex()]
            if code == op_enum.IF:
                opts = schema.IfOptions()
                table = op.BuiltinOptions()
                opts.Init(table.Bytes, table.Pos)
                pending += [opts.ThenSubgraphIndex(), opts.ElseSubgraphIndex()]
            for k in range(op.InputsLength()):
                if op.Inputs(k) < 0:
                    continue
                t = g.Tensors(op.Inputs(k))
                buffers = [t.Buffer()]
                q = t.Quantization()
                if q is not None and q.DetailsType() == schema.QuantizationDetails.BlockwiseQuantization:
                    details = schema.BlockwiseQuantization()
                    details.Init(q.Details().Bytes, q.Details().Pos)
                    buffers.append(g.Tensors(details.Scales()).Buffer())
                for b in (b for b in buffers if b):
                    if lookups.get(code) == k and t.ShapeLength() >= 1 and t.Shape(0) > 0:
                        index = g.Tensors(op.Inputs(1 - k))
                        looked_up = int(np.prod(index.ShapeAsNumpy())) if index.ShapeLength() else 1
                        rows[b] = max(rows.get(b, 0.0), min(1.0, looked_up / t.Shape(0)))
                    else:
                        whole.add(b)

    return int(sum(buffer_bytes(m, b) for b in whole)
               + sum(buffer_bytes(m, b) * f for b, f in rows.items() if b not in whole))


def gathered_expert_bytes(path: str, experts: int) -> int:
    """Bytes of the constant tables (each buffer once) that the .tflite's GATHERs read by expert: tables of
    `experts` rows along the gathered axis 0, of which a token reads the rows of its chosen experts (weights,
    their scales, biases). A table the graph reads whole for every token (experts run one by one) is not one."""
    from ai_edge_litert import schema_py_generated as schema

    m, codes = read_tflite(path)
    tables: set[int] = set()
    for g in (m.Subgraphs(i) for i in range(m.SubgraphsLength())):
        for op in (g.Operators(j) for j in range(g.OperatorsLength())):
            if codes[op.OpcodeIndex()] != schema.BuiltinOperator.GATHER:
                continue
            table = g.Tensors(op.Inputs(0))
            if table.ShapeLength() >= 2 and table.Shape(0) == experts and table.Buffer():
                tables.add(table.Buffer())
    return sum(buffer_bytes(m, i) for i in tables)


def read_bandwidth() -> float:
    """Bytes per second of a one-thread sum over 1 GiB of float32 (best of 5)."""
    a = np.ones(2**28, np.float32)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t)
    return a.nbytes / best


COPIES = 3
COPIED_BELOW = 256e6  # larger bundles run long enough for the placement not to matter, and are timed as written


def bundle_copies(bundle: str, count: int) -> list[str]:
    """`count` fresh copies of the file `bundle`, beside it (the file itself, `count` times, past COPIED_BELOW)."""
    if os.path.getsize(bundle) >= COPIED_BELOW:
        return [bundle] * count
    out = []
    for i in range(count):
        path = f"{bundle}.copy{i}.litertlm"
        shutil.copyfile(bundle, path)
        out.append(path)
    return out


def runtime_speed(bundle: str, threads: int, prefill: int, decode: int, cache: int) -> dict:
    import litert_lm

    with tempfile.TemporaryDirectory() as cache_dir:
        info = litert_lm.Benchmark(bundle, litert_lm.Backend.CPU(thread_count=threads), prefill_tokens=prefill,
                                   decode_tokens=decode, max_num_tokens=cache, cache_dir=cache_dir).run()
    return {"prefill_tok_s": info.last_prefill_tokens_per_second,
            "decode_ms": 1000.0 / info.last_decode_tokens_per_second if info.last_decode_tokens_per_second else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join([f"toy_{t}" for t in TOYS] + ["llama_135m"]))
    parser.add_argument("--recipes", default="none,dynamic_wi8_afp32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="Timings per bundle and thread count (best kept).")
    parser.add_argument("--results", default=RESULTS, help="The markdown file to write.")
    parser.add_argument("--no-official", action="store_true", help="Measure our exporter only.")
    parser.add_argument("--official-venv", default=os.path.join(ROOT, "bench", ".venv-official"))
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    official_python = None
    if not args.no_official:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from compare import ensure_official_venv

        official_python = ensure_official_venv(args.official_venv)
    bandwidth = read_bandwidth()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            src = model_dir(name)
            experts = expert_counts(src)
            for recipe in args.recipes.split(","):
                sides = {"ours": convert(src, os.path.join(work, f"{name}_{recipe}"), recipe, args.prefill,
                                         args.cache)}
                sides["ours"]["tflite"] = os.path.join(work, f"{name}_{recipe}", "model.tflite")
                if official_python:
                    out = os.path.join(work, f"o_{name}_{recipe}")
                    sides["official"] = convert_official(official_python, src, out, recipe, args.prefill, args.cache)
                    if "error" in sides["official"] and experts:
                        default_error = sides["official"]["error"]
                        sides["official"] = convert_official(official_python, src, out + "_moe", recipe,
                                                             args.prefill, args.cache, OFFICIAL_MOE_OPTIONS)
                        sides["official"]["default_error"] = default_error
                row = {"model": name, "recipe": recipe}
                for side, conv in sides.items():
                    if "error" in conv:
                        row[side] = conv
                        continue
                    weights = weight_bytes(conv["tflite"]) if conv.get("tflite") else None
                    row[side] = {"convert_s": conv["seconds"], "peak_rss_gb": conv["peak_rss"] / 2**30,
                                 "bundle_mb": os.path.getsize(conv["bundle"]) / 1e6,
                                 "bound_ms": 1000.0 * weights / bandwidth if weights else None}
                    if weights and experts:  # a token reads k of the E rows of each gathered expert table
                        k, count = experts
                        read = weights - (1 - k / count) * gathered_expert_bytes(conv["tflite"], count)
                        row[side]["sparse_bound_ms"] = 1000.0 * read / bandwidth
                # Speeds: the sides alternate, each run once untimed (what follows a conversion: the CPU and the
                # runtime warming up), then timed `--repeats` times; the best of each is kept (this machine's
                # timings move by tens of percent from one run to the next).
                timed = [s for s in sides if "error" not in sides[s]]
                # Byte-identical copies of one bundle time differently (up to 1.4x in a 2-layer toy's prefill
                # tokens/s: where the page cache put the mapped file), so each side is timed on copies in turn.
                copies = {side: bundle_copies(sides[side]["bundle"], COPIES) for side in timed}
                for n in threads:
                    for side in timed:
                        try:
                            runtime_speed(copies[side][0], n, args.prefill, args.decode_tokens, args.cache)
                        except RuntimeError:
                            pass  # recorded by the timed runs
                    for repeat in range(args.repeats):
                        for side in timed:
                            try:
                                got = runtime_speed(copies[side][repeat % COPIES], n, args.prefill,
                                                    args.decode_tokens, args.cache)
                            except RuntimeError as exc:
                                row[side][f"t{n}"] = {"error": str(exc)[:160]}
                                continue
                            best = row[side].get(f"t{n}")
                            if best is None or "error" in best:
                                row[side][f"t{n}"] = got
                            else:
                                best["prefill_tok_s"] = max(best["prefill_tok_s"], got["prefill_tok_s"])
                                best["decode_ms"] = min(best["decode_ms"], got["decode_ms"])
                rows.append(row)
                print(json.dumps(row), flush=True)
    text = render(rows, threads, args, bandwidth)
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        f.write(text)
    print(text)
    return 0


def render(rows, threads, args, bandwidth) -> str:
    from importlib.metadata import version

    lines = ["# LLM export benchmark", "",
             f"`python bench/llm.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores; litert-lm-api {version('litert-lm-api')}, torch {version('torch')}"
             + ("." if args.no_official else "; the official exporter: litert-torch in bench/.venv-official."),
             f"Prefill {args.prefill} tokens, cache {args.cache}, {args.decode_tokens} decode tokens, both bundles "
             f"timed by litert_lm.Benchmark in this process, alternating, one untimed run each, then best of {args.repeats} over {COPIES} copies of each bundle; memory read bandwidth measured in this run: "
             f"{bandwidth / 1e9:.1f} GB/s (one thread).", "",
             "bound: the model's constant bytes read once per token at that bandwidth (prefill-only constants "
             "counted too, so the bound is slightly high; far too high for a mixture-of-experts model, whose "
             "every expert is counted while a token reads k of them). Ratios are ours / official (below 1: ours is faster, "
             "smaller, or uses less memory; prefill is tokens/s, so above 1 is faster).", ""]
    sparse = any("sparse_bound_ms" in r.get(side, {}) for r in rows for side in ("ours", "official"))
    if sparse:
        lines += ["k-of-E bound (mixture-of-experts models): the bytes a decode token reads, the constants less "
                  "(1 - k/E) of the expert tables that the graph gathers by expert (k chosen of E experts per "
                  "layer, from config.json), at the same bandwidth; a graph that runs every expert for every "
                  "token reads its tables whole, and its k-of-E bound is its bound.", ""]
    head = "| model | recipe | side | convert s | peak RSS GiB | bundle MB | bound ms |" + (
        " k-of-E bound ms |" if sparse else "")
    sep = "|---|---|---|---|---|---|---|" + ("---|" if sparse else "")
    for n in threads:
        head += f" prefill tok/s {n}t | decode ms {n}t | decode/bound {n}t |" + (
            f" decode/k-of-E bound {n}t |" if sparse else "")
        sep += "---|---|---|" + ("---|" if sparse else "")
    lines += [head, sep]
    for r in rows:
        for side in ("ours", "official"):
            e = r.get(side)
            if e is None:
                continue
            if "default_error" in e:
                lines.append(f"| {r['model']} | {r['recipe']} | {side} | failed: {e['default_error']} |")
            label = side
            if e.get("options"):
                label += " (" + ", ".join(f"{k}={v}" for k, v in e["options"].items()) + ")"
            if "error" in e:
                lines.append(f"| {r['model']} | {r['recipe']} | {label} | failed: {e['error']} |")
                continue
            bound = f"{e['bound_ms']:.2f}" if e["bound_ms"] else "-"
            line = (f"| {r['model']} | {r['recipe']} | {label} | {e['convert_s']:.1f} | {e['peak_rss_gb']:.2f} | "
                    f"{e['bundle_mb']:.1f} | {bound} |")
            if sparse:
                line += f" {e['sparse_bound_ms']:.2f} |" if e.get("sparse_bound_ms") else " - |"
            for n in threads:
                s = e[f"t{n}"]
                if "error" in s or not s.get("decode_ms"):
                    line += " - | - | - |" + (" - |" if sparse else "")
                    continue
                ratio = s["decode_ms"] / e["bound_ms"] if e["bound_ms"] else float("nan")
                line += f" {s['prefill_tok_s']:.0f} | {s['decode_ms']:.2f} | {ratio:.1f} |"
                if sparse:
                    line += f" {s['decode_ms'] / e['sparse_bound_ms']:.1f} |" if e.get("sparse_bound_ms") else " - |"
            lines.append(line)
        ours, official = r.get("ours"), r.get("official")
        if ours and official and "error" not in ours and "error" not in official:
            line = (f"| {r['model']} | {r['recipe']} | ours / official | {_r(ours['convert_s'], official['convert_s'])} | "
                    f"{_r(ours['peak_rss_gb'], official['peak_rss_gb'])} | "
                    f"{_r(ours['bundle_mb'], official['bundle_mb'])} | |" + (" |" if sparse else ""))
            for n in threads:
                a, b = ours[f"t{n}"], official[f"t{n}"]
                if "error" in a or "error" in b:
                    line += " - | - | |" + (" |" if sparse else "")
                    continue
                line += f" {_r(a['prefill_tok_s'], b['prefill_tok_s'])} | {_r(a['decode_ms'], b['decode_ms'])} | |"
                line += " |" if sparse else ""
            lines.append(line)
    return "\n".join(lines) + "\n"


def _r(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


if __name__ == "__main__":
    sys.exit(main())
