"""Where a decode step's time goes in the LiteRT-LM runtime, by sampling: each bundle's `litert_lm.Benchmark` run
(one thread) under `perf record -g`, its decode samples (the stacks under LiteRT-LM's decode task) split by the
runtime's own symbols, and the shares multiplied by the decode ms/token of the same runs.

    python bench/llm_profile.py BUNDLE [BUNDLE ...] [--prefill 128] [--decode-tokens 256] [--runs 2]
                                [--results bench/results/llm_profile.md]

    attention     under TFLite's IF kernel: the attention cores on the cache prefixes (generative/prefix.py)
      copies      of which memcpy: the SLICEs that copy each prefix out of its cache
      preparing   of which Subgraph::AllocateTensors: the runtime preparing a branch again (it releases a
                  branch's memory after each call)
    main kernels  under xnn_invoke_runtime outside the IFs: XNNPack's products and the small ops around them
    runtime       the rest: TFLite's op loop, the builtin kernels (DYNAMIC_UPDATE_SLICE, the comparisons),
                  LiteRT-LM's executor and sampler

The library's symbols are stripped below XNNPack's entry points, so a product cannot be told from an
elementwise op by name; bench/llm_decode_parts.py splits those by taking parts out of the graph. `perf` slows
the run down (the ms column is the profiled runs' own decode time), and the samples of one run move by a few
percent: compare bundles profiled in the same command. Needs `perf` (Debian's linux-perf) and
kernel.perf_event_paranoid <= 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from compare import machine, write_results  # noqa: E402

DECODE = "litert::lm::Tasks::Decode"
PARTS = ("attention", "copies", "preparing", "main kernels", "runtime")

# Run in the profiled process: bench/llm.py's benchmark of the bundle, its decode ms/token printed as JSON.
RUN = r"""
import json, sys
sys.path[:0] = [{root!r}, {bench!r}]
from llm import runtime_speed
print(json.dumps([runtime_speed({bundle!r}, 1, {prefill}, {decode}, {cache})["decode_ms"] for _ in range({runs})]))
"""


def classify(stack: list[str]) -> list[str]:
    """The parts (PARTS) a decode sample counts in, from its frames' symbols, leaf first."""
    in_if = any("if_kernel" in s for s in stack)
    if in_if:
        parts = ["attention"]
        if any(s == "memcpy" or s.startswith("__memcpy") for s in stack[:3]):
            parts.append("copies")
        if any("AllocateTensors" in s for s in stack):
            parts.append("preparing")
        return parts
    if any("xnn_invoke_runtime" in s for s in stack[1:]):  # a kernel XNNPack runs, not the loop itself
        return ["main kernels"]
    return ["runtime"]


def shares(script_output: str) -> tuple[Counter, int]:
    """Decode samples per part, and the number of decode samples, from `perf script -F ip,sym`."""
    counts: Counter = Counter()
    total = 0
    for block in script_output.split("\n\n"):
        frames = [line.split(None, 1) for line in block.strip().splitlines() if line.strip()]
        stack = [f[1] if len(f) > 1 and f[1] != "[unknown]" else f[0] for f in frames]
        if not any(DECODE in s for s in stack):
            continue
        total += 1
        counts.update(classify(stack))
    return counts, total


def profile(bundle: str, a: argparse.Namespace, work: str) -> dict:
    data = os.path.join(work, "perf.data")
    code = RUN.format(root=ROOT, bench=os.path.join(ROOT, "bench"), bundle=os.path.abspath(bundle), runs=a.runs,
                      prefill=a.prefill, decode=a.decode_tokens, cache=a.cache)
    proc = subprocess.run(["perf", "record", "-F", str(a.frequency), "-g", "-o", data, sys.executable, "-c", code],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"perf record failed for {bundle}:\n{proc.stderr[-2000:]}")
    decode_ms = json.loads(proc.stdout.strip().splitlines()[-1])
    script = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True).stdout
    counts, total = shares(script)
    if not total:
        raise SystemExit(f"no decode samples for {bundle}: is {DECODE} in the runtime's symbols?")
    return {"decode_ms": min(decode_ms), "samples": total, "shares": {p: counts[p] / total for p in PARTS}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--decode-tokens", type=int, default=256)
    parser.add_argument("--cache", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=2, help="Benchmark runs per profiled process.")
    parser.add_argument("--frequency", type=int, default=2000, help="Samples per second.")
    parser.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "llm_profile.md"))
    a = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("bench/llm_profile.py needs `perf` (Debian: apt install linux-perf)")
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for bundle in a.bundles:
            rows[bundle] = profile(bundle, a, work)
            print(bundle, json.dumps(rows[bundle]), flush=True)
    lines = ["# Where a decode step's time goes in LiteRT-LM", "",
             f"`{' '.join(['python bench/llm_profile.py', *map(shlex.quote, sys.argv[1:])])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}. One thread, prefill {a.prefill} "
             f"tokens, {a.decode_tokens} decode tokens, cache {a.cache}, {a.runs} runs per bundle under `perf record "
             f"-g -F {a.frequency}`; ms: the fastest profiled run's decode ms/token. Parts as in the script's "
             "docstring (copies and preparing are parts of attention).", "",
             "| bundle | decode ms | samples | " + " | ".join(f"{p} % | {p} ms" for p in PARTS) + " |",
             "|---|---|---|" + "---|---|" * len(PARTS)]
    for bundle, row in rows.items():
        cells = " | ".join(f"{100 * row['shares'][p]:.1f} | {row['decode_ms'] * row['shares'][p]:.2f}" for p in PARTS)
        lines.append(f"| {bundle} | {row['decode_ms']:.2f} | {row['samples']} | {cells} |")
    write_results(a.results, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
