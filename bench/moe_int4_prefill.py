"""Where an int4 mixture-of-experts bundle's prefill time goes: bench/llm.py's `moe_32e` exported with
`dynamic_wi4b32_afp32` in variants of the expert tables' int4 pass (`quantization/int4_tables.py`), timed in
LiteRT-LM in turns (best of N).

    python bench/moe_int4_prefill.py [--model moe_32e] [--threads 1] [--repeats 4]

Variants: `int4` (as exported: the prefill chunk's first tiles read the table widened whole); `float_experts`
(the pass off: the tables float32, as ai-edge-quantizer leaves them); `first_tiles_float` (the gathers int4, the
first tiles reading the float table, stored beside it); `widened_unscaled` (timing only, wrong values: the
whole-table widening without its block scales). Results: bench/results/llm_moe_int4_prefill.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import tempfile
import time
from typing import Iterator

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

from compare import write_results  # noqa: E402

import llm  # noqa: E402
from litert_torch import ir  # noqa: E402
from litert_torch.quantization import int4_tables  # noqa: E402

RECIPE = "dynamic_wi4b32_afp32"
VARIANTS = ("int4", "float_experts", "first_tiles_float", "widened_unscaled")


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """The int4 pass patched as variant `name` says, for the exports inside the block."""
    table = int4_tables._Int4Table
    saved = (int4_tables.int4_gathered_tables, table.widened)
    if name == "float_experts":
        int4_tables.int4_gathered_tables = lambda *args, **kwargs: 0
    elif name == "first_tiles_float":
        table.widened = lambda self, op: (self.w, [])
    elif name == "widened_unscaled":
        def unscaled(self, op):
            out = ir.Tensor(f"{self.w.name}/widened", self.w.shape, np.float32)
            return out, [ir.Op("CAST", [self.int4], [out], {}, op.source)]
        table.widened = unscaled
    try:
        yield
    finally:
        int4_tables.int4_gathered_tables, table.widened = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="moe_32e")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "llm_moe_int4_prefill.md"))
    args = parser.parse_args()
    from litert_torch.generative.export_hf import export

    src = llm.model_dir(args.model)
    best: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        bundles = {}
        for name in VARIANTS:
            with variant(name):
                bundles[name] = export.export(model=src, output_dir=os.path.join(work, name), prefill_lengths=[128],
                                              cache_length=1024, quantization_recipe=RECIPE)
        for repeat in range(args.repeats + 1):  # the first round untimed
            for name, bundle in bundles.items():
                got = llm.runtime_speed(bundle, args.threads, 128, 64, 1024)
                if repeat == 0:
                    continue
                b = best.setdefault(name, dict(got, bundle_mb=os.path.getsize(bundle) / 1e6))
                b["prefill_tok_s"] = max(b["prefill_tok_s"], got["prefill_tok_s"])
                b["decode_ms"] = min(b["decode_ms"], got["decode_ms"])
    lines = ["# Prefill of int4 expert tables", "",
             f"`python bench/moe_int4_prefill.py {' '.join(sys.argv[1:])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, {os.cpu_count()} cores "
             f"(load average {os.getloadavg()[0]:.1f} at the end). Model `{args.model}` (bench/llm.py), recipe "
             f"{RECIPE}, prefill 128 tokens, cache 1024, 64 decode tokens, {args.threads} thread(s), "
             f"litert_lm.Benchmark, the bundles in turns, one untimed round, best of {args.repeats}.", "",
             "| variant | bundle MB | prefill tok/s | decode ms |", "|---|---|---|---|"]
    lines += [f"| {name} | {b['bundle_mb']:.1f} | {b['prefill_tok_s']:.0f} | {b['decode_ms']:.2f} |"
              for name, b in best.items()]
    text = "\n".join(lines) + "\n"
    write_results(args.results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
