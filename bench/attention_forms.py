"""The decode attention cores of a model in several forms of the same arithmetic, each timed in a standalone
graph of `--layers` cores through LiteRT's interpreter (XNNPack, one thread), against the form the exporter
writes (`prefix`), in the same run: what the cores of a decode step cost, and how far each form is from reading
the cache slots it needs once at the memory bandwidth measured in the run.

    python bench/attention_forms.py [--layers 30] [--kv-heads 3] [--groups 3] [--head-dim 64] [--cache 1024]
                                    [--position 160] [--rounds 30] [--evict | --no-evict]
                                    [--results bench/results/attention_forms.md]

The defaults are the 135M Llama of bench/llm.py (SmolLM-135M's attention) decoding at position 160, the
positions bench/llm_int4.py times. Each graph chains its cores (a core's output is the next one's query), so
that no core can be dropped; every form is checked against `prefix` on the same inputs. With `--evict` (the
default), two float32 products of [H, H] weights (H = query heads x head dimension) follow each core, the same
in every form: the weights streamed between the cores evict the cache slots from the CPU's caches, as a decode
step's weights do, so that each core reads its slots from memory; the `ms` columns are then the whole graph's
less the same graph without the cores (`--no-evict`: the cores alone, their slots staying in the CPU's caches).

    prefix        what the exporter writes for a decode step below `--position`'s branch length
                  (generative/prefix.py): the first N slots of the key and value caches [1, KV, C, D] (one run
                  of memory per head) and of the mask SLICEd, then BATCH_MATMUL (keys read as stored, adj_y),
                  the mask added, SOFTMAX, BATCH_MATMUL (values read as stored)
    prefix_if     `prefix` inside an IF on the position, whose then branch is the sliced core and whose else
                  branch the whole one (the exporter's chain runs one such branch per core and step)
    values_transposed  `prefix` with the value cache stored transposed, [1, KV, D, C], and read with adj_y
                  (what the exporter wrote before): each head's prefix D strided rows
    whole         the same core over the whole cache, no SLICE (what the exporter wrote before the prefix
                  branches)
    unsliced      `prefix` on caches that are N slots long: no SLICE, the same products. Not a form a
                  LiteRT-LM model can take (the runtime allocates the cache at its full length); the time of
                  the products and softmax alone, had the runtime a view of the prefix
    one_row       `prefix` with one query row per batch entry ([1, G, KV, 1, D] against [1, 1, KV, N, D]), so
                  that each product is a matrix-vector product
    cache_lhs     `values_transposed` with the cache as the left operand of both products (the query as the
                  right one) and a TRANSPOSE of each small result
    xnnpack_sdpa  XNNPack's fused attention (the `odml.scaled_dot_product_attention` custom op, which the
                  XNNPack delegate claims) on caches that are N slots long, in its [1, N, KV, D] layout: the
                  fused kernel's time without any SLICE
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from compare import fastest_call, machine, write_results  # noqa: E402
from llm import read_bandwidth  # noqa: E402

from litert_torch import ir  # noqa: E402
from litert_torch.flatbuffer.writer import serialize  # noqa: E402
from litert_torch.generative import prefix  # noqa: E402

FORMS = ("prefix", "prefix_if", "values_transposed", "whole", "unsliced", "one_row", "cache_lhs", "xnnpack_sdpa")
MASKED = -1e30


class _Graph:
    """A graph being built: tensors named in order, ops appended."""

    def __init__(self):
        self.graph, self.count = ir.Graph("main"), 0

    def tensor(self, shape, values=None, dtype=np.float32) -> ir.Tensor:
        self.count += 1
        data = None if values is None else np.asarray(values, dtype).reshape(shape)
        return ir.Tensor(f"t{self.count}", list(shape), dtype, data)

    def op(self, opcode: str, inputs: list, shape, **options) -> ir.Tensor:
        out = self.tensor(shape)
        self.graph.ops.append(ir.Op(opcode, inputs, [out], options))
        return out

    def ints(self, values) -> ir.Tensor:
        return self.tensor([len(values)], values, np.int32)

    def slice(self, x: ir.Tensor, size: list[int]) -> ir.Tensor:
        return self.op("SLICE", [x, self.ints([0] * x.rank), self.ints(size)], size)

    def reshape(self, x: ir.Tensor, shape: list[int]) -> ir.Tensor:
        return self.op("RESHAPE", [x, self.ints(shape)], shape, new_shape=shape)

    def transpose(self, x: ir.Tensor, perm: list[int]) -> ir.Tensor:
        return self.op("TRANSPOSE", [x, self.ints(perm)], [x.shape[p] for p in perm])

    def bmm(self, a: ir.Tensor, b: ir.Tensor) -> ir.Tensor:  # a @ b^T over the last two axes
        return self.op("BATCH_MATMUL", [a, b], [*a.shape[:-1], b.shape[-2]], adj_x=False, adj_y=True,
                       asymmetric_quantize_inputs=False)

    def attend(self, x: ir.Tensor, k: ir.Tensor, v: ir.Tensor, mask: ir.Tensor) -> ir.Tensor:
        """softmax(x @ k^T + mask) @ v, keys and values [.., N, D] as stored."""
        p = self.softmax(self.bmm(x, k), mask)
        return self.op("BATCH_MATMUL", [p, v], [*p.shape[:-1], v.shape[-1]], adj_x=False, adj_y=False,
                       asymmetric_quantize_inputs=False)

    def evict(self, x: ir.Tensor, weights: list[np.ndarray]) -> ir.Tensor:
        """x flattened through the float32 products of `weights` ([H, H] each), back in x's shape."""
        flat = self.reshape(x, [1, int(np.prod(x.shape))])
        for w in weights:
            flat = self.op("FULLY_CONNECTED", [flat, self.tensor(w.shape, w), None], flat.shape,
                           fused_activation_function="NONE")
        return self.reshape(flat, list(x.shape))

    def softmax(self, scores: ir.Tensor, mask: ir.Tensor) -> ir.Tensor:
        added = self.op("ADD", [scores, mask], scores.shape, fused_activation_function="NONE")
        return self.op("SOFTMAX", [added], scores.shape, beta=1.0)


# the forms whose value cache is stored transposed, [1, KV, D, C] (read with adj_y); the others store it as the keys
TRANSPOSED_VALUES = ("values_transposed", "cache_lhs")


def build(form: str, a: argparse.Namespace, n: int) -> bytes:
    """The .tflite of `--layers` chained cores in `form`. Inputs: the query [1, KV, G, D] (heads kv-major, as the
    exporter's), the mask, then each layer's key and value caches in the form's layout."""
    kv, g, d = a.kv_heads, a.groups, a.head_dim
    slots = n if form in ("unsliced", "xnnpack_sdpa") else a.cache
    b = _Graph()
    query = b.tensor([1, kv, g, d])
    mask = b.tensor([1, 1, 1, slots])
    if form == "xnnpack_sdpa":
        keys = [b.tensor([1, slots, kv, d]) for _ in range(a.layers)]
        values = [b.tensor([1, slots, kv, d]) for _ in range(a.layers)]
    else:
        keys = [b.tensor([1, kv, slots, d]) for _ in range(a.layers)]
        values = [b.tensor([1, kv, d, slots] if form in TRANSPOSED_VALUES else [1, kv, slots, d])
                  for _ in range(a.layers)]
    b.graph.inputs = [query, mask, *keys, *values]
    x = b.reshape(query, [1, 1, kv * g, d]) if form == "xnnpack_sdpa" else query
    if form == "one_row":
        x = b.reshape(b.transpose(query, [0, 2, 1, 3]), [1, g, kv, 1, d])
    sliced = form in ("prefix", "values_transposed", "one_row", "cache_lhs")
    m = b.slice(mask, [1, 1, 1, n]) if sliced else mask
    if form == "one_row":
        m = b.reshape(m, [1, 1, 1, 1, n])
    weights = _evicting_weights(a)
    if form == "prefix_if":
        below = b.tensor([1], dtype=np.bool_)
        b.graph.inputs.append(below)
        then_graph, else_graph = _core_graph(a, n, True), _core_graph(a, n, False)
    for i, (k, v) in enumerate(zip(keys, values)):
        if sliced:
            k = b.slice(k, [1, kv, n, d])
            v = b.slice(v, [1, kv, d, n] if form in TRANSPOSED_VALUES else [1, kv, n, d])
        if form == "one_row":
            k, v = b.reshape(k, [1, 1, kv, n, d]), b.reshape(v, [1, 1, kv, n, d])
        if form == "prefix_if":
            x = b.op("IF", [below, x, k, v, mask], x.shape, then_subgraph_index=then_graph,
                     else_subgraph_index=else_graph)
        elif form == "cache_lhs":
            p = b.softmax(b.transpose(b.bmm(k, x), [0, 1, 3, 2]), m)
            x = b.transpose(b.bmm(v, p), [0, 1, 3, 2])
        elif form == "xnnpack_sdpa":  # a placeholder op, made the custom op below
            x = b.op("ADD", [x, k, v, m], x.shape, fused_activation_function="NONE")
        elif form == "values_transposed":
            x = b.bmm(b.softmax(b.bmm(x, k), m), v)
        elif form != "none":
            x = b.attend(x, k, v, m)
        if a.evict and form == "one_row":  # through the products in the other forms' head order
            heads = b.transpose(b.reshape(x, [1, g, kv, d]), [0, 2, 1, 3])
            x = b.reshape(b.transpose(b.evict(heads, weights[i]), [0, 2, 1, 3]), [1, g, kv, 1, d])
        elif a.evict:
            x = b.evict(x, weights[i])
    if form == "one_row":
        x = b.reshape(b.transpose(b.reshape(x, [1, g, kv, d]), [0, 2, 1, 3]), [1, kv, g, d])
    elif form == "xnnpack_sdpa":
        x = b.reshape(x, [1, kv, g, d])
    b.graph.outputs = [x]
    names = [t.name for t in b.graph.inputs]
    data = serialize(ir.Model([b.graph], [ir.Signature("main", 0, names, ["out"])]))
    return _as_sdpa(data, a.head_dim) if form == "xnnpack_sdpa" else data


def _evicting_weights(a: argparse.Namespace) -> list[list[np.ndarray]]:
    """Two [H, H] float32 weights per layer (the same in every form), scaled to keep the chained values in range."""
    hidden = a.kv_heads * a.groups * a.head_dim
    rng = np.random.default_rng(1)
    return [[(rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32) for _ in range(2)]
            for _ in range(a.layers)]


def _core_graph(a: argparse.Namespace, n: int, sliced: bool) -> ir.Graph:
    """A branch of `prefix_if`'s IFs: the core on the first `n` slots (`sliced`) or on the whole cache."""
    kv, g, d = a.kv_heads, a.groups, a.head_dim
    b = _Graph()
    b.graph.name = f"core_{n if sliced else a.cache}"
    x, k, v = b.tensor([1, kv, g, d]), b.tensor([1, kv, a.cache, d]), b.tensor([1, kv, a.cache, d])
    m = b.tensor([1, 1, 1, a.cache])
    b.graph.inputs = [x, k, v, m]
    if sliced:
        k, v, m = b.slice(k, [1, kv, n, d]), b.slice(v, [1, kv, n, d]), b.slice(m, [1, 1, 1, n])
    b.graph.outputs = [b.attend(x, k, v, m)]
    return b.graph


def _as_sdpa(data: bytes, head_dim: int) -> bytes:
    """`data` with its 4-input ADDs made `odml.scaled_dot_product_attention` custom ops (the query already
    scaled: scale 1)."""
    import flatbuffers
    import flatbuffers.flexbuffers as flex
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    code.customCode, code.version = "odml.scaled_dot_product_attention", 1
    m.operatorCodes.append(code)
    options = list(bytes(flex.Dumps({"scale": 1.0})))
    for op in m.subgraphs[0].operators:
        if len(op.inputs) == 4:
            op.opcodeIndex, op.builtinOptionsType, op.builtinOptions = len(m.operatorCodes) - 1, 0, None
            op.customOptions, op.customOptionsFormat = options, 0
    builder = flatbuffers.Builder(len(data) + 4096)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def inputs(form: str, a: argparse.Namespace, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The same query, mask and caches for every form, in its layout: slots past `--position` hold values the
    mask removes (exactly: exp(-1e30 - max) is 0 in float32), slots past N are never read by a sliced form."""
    kv, g, d, c = a.kv_heads, a.groups, a.head_dim, a.cache
    query = (rng.standard_normal((1, kv, g, d)) / np.sqrt(d)).astype(np.float32)
    mask = np.where(np.arange(c) <= a.position, 0.0, MASKED).astype(np.float32).reshape(1, 1, 1, c)
    keys = [rng.standard_normal((1, kv, c, d)).astype(np.float32) for _ in range(a.layers)]
    values = [rng.standard_normal((1, kv, c, d)).astype(np.float32) for _ in range(a.layers)]
    if form in ("unsliced", "xnnpack_sdpa"):
        mask, keys, values = mask[..., :n], [k[:, :, :n] for k in keys], [v[:, :, :n] for v in values]
    if form == "xnnpack_sdpa":
        return [query, mask, *(k.transpose(0, 2, 1, 3) for k in keys), *(v.transpose(0, 2, 1, 3) for v in values)]
    extra = [np.array([a.position < n])] if form == "prefix_if" else []
    if form in TRANSPOSED_VALUES:
        return [query, mask, *keys, *(v.transpose(0, 1, 3, 2) for v in values)]
    return [query, mask, *keys, *values, *extra]


def time_form(form: str, a: argparse.Namespace, n: int) -> tuple[float, np.ndarray]:
    """The fastest call of `--rounds` rounds of 10 (ms), and the output."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=build(form, a, n), num_threads=1)
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), inputs(form, a, n, np.random.default_rng(0))):
        interpreter.set_tensor(detail["index"], np.ascontiguousarray(value))
    best = fastest_call(interpreter.invoke, a.rounds, 10)
    return best * 1e3, interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--groups", type=int, default=3, help="Query heads per key/value head.")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--position", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--evict", action=argparse.BooleanOptionalAction, default=True,
                        help="Stream weights between the cores (see the docstring).")
    parser.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "attention_forms.md"))
    a = parser.parse_args()
    n = prefix.branch_length(a.position, a.cache)
    forms = a.forms.split(",")
    if forms[0] != "prefix":
        forms = ["prefix", *(f for f in forms if f != "prefix")]
    timed = [*forms, "none"] if a.evict else forms
    bandwidth = read_bandwidth()
    times: dict[str, list[float]] = {f: [] for f in timed}
    outputs: dict[str, np.ndarray] = {}
    for _ in range(3):  # the forms in turns, best of three turns
        for form in timed:
            ms, outputs[form] = time_form(form, a, n)
            times[form].append(ms)
            print(form, f"{ms:.3f} ms", flush=True)
    bandwidth = max(bandwidth, read_bandwidth())
    slot_bytes = a.layers * 2 * a.kv_heads * a.head_dim * 4
    read_ms = {f: 1e3 * slot_bytes * (a.cache if f == "whole" else n) / bandwidth for f in forms}
    base = min(times["none"]) if a.evict else 0.0  # the streamed weights alone
    reference = min(times["prefix"]) - base
    lines = ["# Decode attention cores in several forms", "",
             f"`python bench/attention_forms.py {' '.join(shlex.quote(x) for x in sys.argv[1:])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}, {os.cpu_count()} cores "
             f"(shared). {a.layers} cores of {a.kv_heads} key/value heads x {a.groups} query heads, head "
             f"dimension {a.head_dim}, cache {a.cache}, decode at position {a.position} (the prefix branch of "
             f"{n} slots); LiteRT's interpreter with XNNPack, one thread, fastest of {a.rounds} rounds of 10 "
             f"calls, the forms in turns, best of 3 turns. "
             + (f"Weights streamed between the cores (`--evict`): the graph without the cores took {base:.3f} ms, "
                "taken off every form's time. " if a.evict else "The cores alone (`--no-evict`). ")
             + f"Memory read bandwidth in this run: "
             f"{bandwidth / 1e9:.1f} GB/s (one thread). The forms are described in the script's docstring.",
             "", "| form | slots read | ms | / prefix | slots once at bandwidth, ms | / that | max abs diff to prefix |",
             "|---|---|---|---|---|---|---|"]
    for form in forms:
        best = min(times[form]) - base
        diff = float(np.max(np.abs(outputs[form] - outputs["prefix"])))
        lines.append(f"| {form} | {a.cache if form == 'whole' else n} | {best:.3f} | {best / reference:.2f} | "
                     f"{read_ms[form]:.3f} | {best / read_ms[form]:.1f} | {diff:.1e} |")
    write_results(a.results, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
