"""What a chain of IFs costs besides the branch it runs: generative/prefix.py makes each attention core a chain
of single-level IFs, one per cache prefix, of which exactly one runs the core and every other passes the chained
result on through a branch with no ops. Each graph here has `--layers` such chains of K IFs around a one-op
branch (an ADD of [1, 3, 3, 64]), the taken IF last; timed through LiteRT's interpreter with XNNPack, one thread,
the fastest of `--rounds` rounds of 20 calls, for each K in `--chains`.

    python bench/if_chain.py [--chains 1,2,4,7,13,21] [--layers 30] [--rounds 20]
                             [--results bench/results/if_chain.md]

The last column is the slope against K = 1: what each IF that passes its result on adds, per layer.
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

from litert_torch import ir  # noqa: E402
from litert_torch.flatbuffer.writer import serialize  # noqa: E402

SHAPE = [1, 3, 3, 64]


def branch(name: str, passes_on: bool) -> ir.Graph:
    """The IFs' branches: inputs (the result so far, the query); the first passes the result on, the other adds
    the query to itself."""
    graph = ir.Graph(name)
    chained, query = ir.Tensor("chained", SHAPE, np.float32), ir.Tensor("query", SHAPE, np.float32)
    graph.inputs = [chained, query]
    if passes_on:
        graph.outputs = [chained]
    else:
        out = ir.Tensor("out", SHAPE, np.float32)
        graph.ops = [ir.Op("ADD", [query, query], [out], {"fused_activation_function": "NONE"})]
        graph.outputs = [out]
    return graph


def build(chain: int, layers: int) -> bytes:
    """`layers` chains of `chain` IFs; input `taken` is the condition of each chain's last IF, `passed` the
    others'."""
    query = ir.Tensor("query", SHAPE, np.float32)
    taken, passed = ir.Tensor("taken", [1], np.bool_), ir.Tensor("passed", [1], np.bool_)
    runs, passes = branch("runs", False), branch("passes_on", True)
    graph = ir.Graph("main", inputs=[query, taken, passed])
    x = query
    for layer in range(layers):
        chained = x
        for i in range(chain):
            out = ir.Tensor(f"layer_{layer}_if_{i}", SHAPE, np.float32)
            condition = taken if i == chain - 1 else passed
            graph.ops.append(ir.Op("IF", [condition, chained, x], [out],
                                   {"then_subgraph_index": runs, "else_subgraph_index": passes}))
            chained = out
        x = chained
    graph.outputs = [x]
    return serialize(ir.Model([graph, runs, passes], [ir.Signature("main", 0, ["query", "taken", "passed"],
                                                                   ["out"])]))


def time_chain(chain: int, a: argparse.Namespace) -> float:
    """Microseconds per layer: the fastest of `--rounds` rounds of 20 calls."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=build(chain, a.layers), num_threads=1)
    interpreter.allocate_tensors()
    values = {"query": np.ones(SHAPE, np.float32), "taken": np.array([True]), "passed": np.array([False])}
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], values[detail["name"].rsplit("/", 1)[-1]])  # "main/query"
    best = fastest_call(interpreter.invoke, a.rounds, 20)
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert np.array_equal(out, np.full(SHAPE, 2.0 ** a.layers, np.float32)), "the chain did not run its branch"
    return best * 1e6 / a.layers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", default="1,2,4,7,13,21")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "if_chain.md"))
    a = parser.parse_args()
    chains = [int(c) for c in a.chains.split(",")]
    times: dict[int, float] = {}
    for _ in range(3):  # the chains in turns, best of three turns
        for chain in chains:
            times[chain] = min(times.get(chain, float("inf")), time_chain(chain, a))
    base = chains[0]
    lines = ["# The cost of a chain of IFs", "",
             f"`{' '.join(['python bench/if_chain.py', *map(shlex.quote, sys.argv[1:])])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}. {a.layers} layers, each a chain "
             "of K single-level IFs of which the last runs a one-op branch and the others pass the result on; "
             f"LiteRT's interpreter with XNNPack, one thread, fastest of {a.rounds} rounds of 20 calls, best of 3 "
             "turns.", "", "| IFs per chain | us per layer | us per IF passing its result on |", "|---|---|---|"]
    for chain in chains:
        slope = "" if chain == base else f"{(times[chain] - times[base]) / (chain - base):.2f}"
        lines.append(f"| {chain} | {times[chain]:.2f} | {slope} |")
    write_results(a.results, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
