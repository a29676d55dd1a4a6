"""Fleet throughput on Ray: the same manifest (tests/fleet/models.py, 6 models x 2 variants, validated) on a
cluster of 1 and of 2 one-CPU worker nodes started on this machine, and what a 100-model manifest would take on N
nodes, from the per-task costs measured in the same run.

    python bench/fleet.py [--workers 1,2] [--out bench/results/fleet.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from litert_torch import batch  # noqa: E402

MODELS = ["mlp", "cnn", "depthwise", "gru", "attention", "norm"]


def manifest(folder: str) -> str:
    lines = ['[defaults]\ntarget = ["cpu"]\n', "[validation]\ndraws = 1\n"]
    for m in MODELS:
        lines.append(f'[[model]]\nname = "{m}"\nsource = "{ROOT}/tests/fleet/models.py:{m}"\n')
    lines += ['[[variant]]\nname = "float"\n', '[[variant]]\nname = "fp16"\nquantize = "fp16"\n']
    path = os.path.join(folder, "fleet.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path


def measure(workers: int, path: str, folder: str) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(workers):
        cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    out = os.path.join(folder, f"out{workers}")
    try:
        start = time.perf_counter()
        table = batch.run(path, out)
        wall = time.perf_counter() - start
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(out, ignore_errors=True)
    seconds = [r["seconds"] for r in table["tasks"] if r["status"] == "ok"]
    return {"workers": workers, "tasks": len(table["tasks"]), "ok": table["summary"]["ok"], "wall": wall,
            "task_mean": statistics.mean(seconds), "task_sum": sum(seconds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fleet.md"))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fleet_") as folder:
        path = manifest(folder)
        for n in (int(w) for w in args.workers.split(",")):
            rows.append(measure(n, path, folder))
            print(rows[-1], flush=True)
    base = rows[0]
    # per task, the wall time a task costs a node (conversion process start, conversion, validation), from the
    # 1-worker run: its wall time over its task count
    per_task = base["wall"] / base["tasks"]
    lines = ["# Fleet throughput on Ray", "",
             f"`python bench/fleet.py --workers {args.workers}` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} "
             f"UTC; {platform.machine()}, {os.cpu_count()} cores; a Ray cluster on this machine (head with no CPUs, "
             "one-CPU worker nodes); manifest: 6 small models x 2 variants (float, fp16), each validated.", "",
             "| worker nodes | tasks | ok | wall s | tasks/min | speed-up | mean task s (in its process) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workers']} | {r['tasks']} | {r['ok']} | {r['wall']:.1f} | {60 * r['tasks'] / r['wall']:.1f} "
                     f"| {base['wall'] / r['wall']:.2f}x | {r['task_mean']:.2f} |")
    overhead = per_task - base["task_mean"]
    lines += ["", f"A task costs a node {per_task:.1f} s here (1-worker wall time / tasks): {base['task_mean']:.1f} s "
              f"converting and validating inside its process, {overhead:.1f} s starting that process (imports) and "
              "scheduling. A 100-model x 2-variant manifest of models like these would take about "
              + ", ".join(f"{200 * per_task / n / 60:.1f} min on {n} node{'s' if n > 1 else ''}" for n in (1, 4, 16, 64))
              + " (tasks are independent; larger models scale with their own conversion time)."]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
