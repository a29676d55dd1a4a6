"""Where a decode step's time goes: the decode signature of one bench model timed whole and with parts of its
graph taken out, so that the differences attribute the time to the products, the attention cores, the small ops
around them and the cache updates.

    python bench/llm_decode_parts.py [--model llama_135m] [--recipes dynamic_wi4b32_afp32,dynamic_wi8_afp32]
                                     [--position 160] [--rounds 15] [--results bench/results/llm_decode_parts.md]

Each variant is exported by the exporter (a fresh process each) with its graph changed after the passes, then
quantized by the recipe as usual; the variants are for timing only (most do not compute the model):

    update     the decode signature as exported
    model      the same without its DYNAMIC_UPDATE_SLICEs (each cache output is its input)
    no_if      `model` with each attention core's branch for `--position` inlined: static SLICEs, no IF
               (exact only below that branch's length)
    no_attn    `model` without the attention cores (each core's output replaced by its query)
    products   the FULLY_CONNECTEDs alone, chained layer by layer by 4 small ops (XNNPack drops ops whose outputs
               nobody reads, so each product's output is read): q, k and v of the layer's input, k + v added to q,
               o of that, gate and up of o multiplied, down of the product is the next layer's input
    stacked    `model` with q, k and v as one FULLY_CONNECTED over their stacked weights (then SLICEs), and gate
               and up as one (then a SPLIT): the same outputs, fewer products

All but `update` are timed through LiteRT's interpreter at one thread (decode at input position `--position`,
its inputs set once, `--rounds` rounds of 20 calls in turns, the fastest call kept): the interpreter does not
alias a cache input with its output, so its DYNAMIC_UPDATE_SLICE copies the whole cache, which LiteRT-LM does
not; the cache updates are measured in LiteRT-LM instead (`update` against `model`, litert_lm.Benchmark,
prefill 128 and 64 decode tokens, in turns, best of `--rounds` // 3). Models are bench/llm.py's; Llama-shaped
decoders only (seven products a layer).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from compare import write_results  # noqa: E402
from llm import model_dir, read_bandwidth, runtime_speed, weight_bytes  # noqa: E402

VARIANTS = ("update", "model", "no_if", "no_attn", "products", "stacked")

# Run in a fresh process per variant: the exporter with the decode graph changed after the passes.
EXPORT = r"""
import sys
sys.path.insert(0, {root!r})
import numpy as np
from litert_torch import ir
from litert_torch.generative import prefix, signature

variant, position = {variant!r}, {position}
rewrite = signature.attend_filled_prefix


def op(opcode, inputs, outputs, **options):
    return ir.Op(opcode, inputs, outputs, options)


def const(name, values):
    values = np.asarray(values, np.int32)
    return ir.Tensor(name, values.shape, np.int32, values)


def stacked(graph):
    # each layer's q, k, v (one input) and gate, up (one input) as one product over the stacked weights
    groups = {{}}
    for o in graph.ops:
        if o.opcode == "FULLY_CONNECTED":
            groups.setdefault(id(o.inputs[0]), []).append(o)
    replaced = {{}}
    for ops in (g for g in groups.values() if len(g) > 1):
        w = np.concatenate([o.inputs[1].values for o in ops])
        outs = [o.outputs[0] for o in ops]
        rows = w.shape[0]
        joined = ir.Tensor(outs[0].name + "/stacked", [*outs[0].shape[:-1], rows], np.float32)
        new = [op("FULLY_CONNECTED", [ops[0].inputs[0], ir.Tensor(outs[0].name + "/w", w.shape, np.float32, w),
                                      None], [joined], **ops[0].options)]
        rank, start = joined.rank, 0
        if len(ops) == 2 and outs[0].shape == outs[1].shape:
            new.append(op("SPLIT", [const(joined.name + "/axis", rank - 1), joined], outs, num_splits=2))
        else:
            for i, out in enumerate(outs):
                new.append(op("SLICE", [joined, const(f"{{joined.name}}/b{{i}}", [0] * (rank - 1) + [start]),
                                        const(f"{{joined.name}}/s{{i}}", out.shape)], [out]))
                start += out.shape[-1]
        replaced[id(ops[0])] = new
        replaced.update((id(o), []) for o in ops[1:])
    graph.ops = [n for o in graph.ops for n in replaced.get(id(o), [o])]


def inlined(graph):
    # each core's branch for `position`, in the graph itself
    producers, consumers = graph.producers(), graph.consumers()
    cores = [c for o in graph.ops if (c := prefix._core(o, producers, consumers, graph)) is not None]
    n = prefix.branch_length(position, cores[0].cache)
    replaced = {{}}
    for i, core in enumerate(cores):
        branch = prefix._sliced(core, n, f"inlined_{{i}}")
        feeds = {{id(a): b for a, b in zip(branch.inputs[1:], core.arguments())}}
        for o in branch.ops:
            o.inputs = [feeds.get(id(t), t) if t is not None else None for t in o.inputs]
        branch.ops[-1].outputs = list(core.ops[-1].outputs)
        replaced.update((id(o), []) for o in core.ops[:-1])
        replaced[id(core.ops[-1])] = branch.ops
    graph.ops = [n for o in graph.ops for n in replaced.get(id(o), [o])]


def products(graph):
    # the FULLY_CONNECTEDs alone, seven a layer, each read by the next through 4 small ops
    lookup = next(i for i, o in enumerate(graph.ops) if o.opcode == "EMBEDDING_LOOKUP")
    kept = graph.ops[:lookup + 2]  # the lookup and its reshape to [1, 1, H]
    x = kept[-1].outputs[0]
    fcs = [o for o in graph.ops if o.opcode == "FULLY_CONNECTED"]
    layers = (len(fcs) - 1) // 7
    if len(fcs) != 7 * layers + 1:
        raise SystemExit(f"{{len(fcs)}} products: not seven a layer and the logits")

    def t(name, like, n):
        return ir.Tensor(name, [*like.shape[:-1], n], np.float32)

    for i in range(layers):
        q, k, v, o, gate, up, down = fcs[7 * i: 7 * i + 7]
        for p in (q, k, v):
            p.inputs[0] = x
        qo, ko = q.outputs[0], k.outputs[0]
        kv, wide = t(f"kv{{i}}", ko, ko.shape[-1]), t(f"wide{{i}}", qo, qo.shape[-1])
        both = t(f"q{{i}}", qo, qo.shape[-1])
        kept += [q, k, v, op("ADD", [ko, v.outputs[0]], [kv], fused_activation_function="NONE"),
                 op("CONCATENATION", [kv] * (qo.shape[-1] // ko.shape[-1]), [wide], axis=kv.rank - 1,
                    fused_activation_function="NONE"),
                 op("ADD", [qo, wide], [both], fused_activation_function="NONE")]
        o.inputs[0] = both
        gate.inputs[0] = up.inputs[0] = o.outputs[0]
        inner = t(f"inner{{i}}", gate.outputs[0], gate.outputs[0].shape[-1])
        kept += [o, gate, up, op("MUL", [gate.outputs[0], up.outputs[0]], [inner], fused_activation_function="NONE")]
        down.inputs[0] = inner
        kept.append(down)
        x = down.outputs[0]
    fcs[-1].inputs[0] = x
    kept.append(fcs[-1])
    graph.ops = kept


def changed(graph, input_pos, min_skipped_flops=0):
    if graph.name == "decode" and variant == "stacked":
        stacked(graph)
    if graph.name == "decode" and variant == "no_if":
        inlined(graph)
        count = 1
    else:
        count = rewrite(graph, input_pos, min_skipped_flops)
    if graph.name != "decode" or variant == "update":
        return count
    for o in [o for o in graph.ops if o.opcode == "DYNAMIC_UPDATE_SLICE"]:
        graph.ops.remove(o)
        graph.replace_uses(o.outputs[0], o.inputs[0])
    if variant == "no_attn":
        for o in [o for o in graph.ops if o.opcode == "IF"]:
            graph.ops.remove(o)
            graph.replace_uses(o.outputs[0], o.inputs[1])
    if variant == "products":
        products(graph)
    return count


signature.attend_filled_prefix = changed
from litert_torch.generative.export_hf import export

print(export.export(model={src!r}, output_dir={out!r}, prefill_lengths=[{prefill}], cache_length={cache},
                    quantization_recipe={recipe!r}, keep_temporary_files=True))
"""


def export_variant(src: str, out: str, recipe: str, variant: str, position: int, prefill: int, cache: int) -> str:
    """The bundle path of `variant` exported with `recipe` into `out` (its model.tflite beside it)."""
    code = EXPORT.format(root=ROOT, src=src, out=out, recipe=recipe, variant=variant, position=position,
                         prefill=prefill, cache=cache)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} ({recipe}): {proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


class DecodeCall:
    """The decode signature of a .tflite in LiteRT's interpreter at one thread, its inputs set once (token 1, the
    input position, zero caches)."""

    def __init__(self, path: str, position: int):
        from ai_edge_litert.interpreter import Interpreter

        self.runner = Interpreter(model_path=path, num_threads=1).get_signature_runner("decode")
        feeds = {}
        for name, d in self.runner.get_input_details().items():
            if name == "tokens":
                feeds[name] = np.ones(d["shape"], d["dtype"])
            elif name == "input_pos":
                feeds[name] = np.full(d["shape"], position, d["dtype"])
            else:
                feeds[name] = np.zeros(d["shape"], d["dtype"])
        self.runner(**feeds)

    def ms(self, calls: int = 20) -> float:
        """The fastest of `calls` single calls (on a shared machine, the call least slowed by others)."""
        # the signature runner's own invoke, without setting its inputs again
        invoke, index = self.runner._interpreter_wrapper.Invoke, self.runner._subgraph_index
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            invoke(index)
            best = min(best, time.perf_counter() - start)
        return best * 1000.0


def measure(recipe: str, args: argparse.Namespace, work: str) -> dict:
    src = model_dir(args.model)
    paths = {v: export_variant(src, os.path.join(work, f"{recipe}_{v}".replace("/", "_")), recipe, v,
                               args.position, args.prefill, args.cache) for v in VARIANTS}
    calls = {v: DecodeCall(os.path.join(os.path.dirname(paths[v]), "model.tflite"), args.position)
             for v in VARIANTS if v != "update"}
    best = {v: float("inf") for v in VARIANTS}
    for _ in range(args.rounds):
        for v, call in calls.items():
            best[v] = min(best[v], call.ms())
    del calls
    runtime = {"update": float("inf"), "model": float("inf")}
    for _ in range(max(1, args.rounds // 3)):
        for v in runtime:
            got = runtime_speed(paths[v], 1, args.prefill, 64, args.cache)["decode_ms"]
            runtime[v] = min(runtime[v], got)
    weights = weight_bytes(os.path.join(os.path.dirname(paths["model"]), "model.tflite"))
    print(recipe, json.dumps({"interpreter": best, "litert_lm": runtime}), flush=True)
    return {"interpreter": best, "litert_lm": runtime, "weights": weights}


def render(rows: dict, args: argparse.Namespace, bandwidth: float) -> str:
    lines = ["# Where a decode step's time goes", "",
             f"`python bench/llm_decode_parts.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores (shared). Model `{args.model}` (bench/llm.py's build), cache {args.cache}; "
             f"decode at input position {args.position}, one thread, LiteRT's interpreter, the fastest call of "
             f"{args.rounds} rounds of 20 in turns; cache updates in LiteRT-LM (prefill {args.prefill}, 64 decode tokens, "
             f"best of {max(1, args.rounds // 3)}). Memory read bandwidth in this run: {bandwidth / 1e9:.1f} GB/s "
             "(one thread). The variants are described in the script's docstring.", "",
             "| recipe | weights bound ms | model ms | products ms | products / bound | small ops ms | "
             "attention cores ms | of which IF ms | stacked q/k/v, gate/up ms | cache updates ms (LiteRT-LM) | "
             "LiteRT-LM decode ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for recipe, row in rows.items():
        t, lm = row["interpreter"], row["litert_lm"]
        bound = 1000.0 * row["weights"] / bandwidth
        lines.append(f"| {recipe} | {bound:.2f} | {t['model']:.2f} | {t['products']:.2f} | "
                     f"{t['products'] / bound:.2f} | {t['no_attn'] - t['products']:.2f} | "
                     f"{t['model'] - t['no_attn']:.2f} | {t['model'] - t['no_if']:.2f} | "
                     f"{t['stacked']:.2f} ({t['stacked'] - t['model']:+.2f}) | {lm['update'] - lm['model']:.2f} | "
                     f"{lm['update']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama_135m")
    parser.add_argument("--recipes", default="dynamic_wi4b32_afp32,dynamic_wi8_afp32")
    parser.add_argument("--position", type=int, default=160)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "llm_decode_parts.md"))
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        bandwidth = read_bandwidth()
        for recipe in args.recipes.split(","):
            rows[recipe] = measure(recipe, args, work)
        bandwidth = max(bandwidth, read_bandwidth())
    text = render(rows, args, bandwidth)
    write_results(args.results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
