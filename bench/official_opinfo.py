"""PyTorch's OpInfo suite through this converter and the official one (PyPI litert-torch, in its own virtual
environment bench/.venv-official, made by bench/compare.py's helper on first use), in one run: the same cases,
built by the same code (litert_torch/suites/opinfo.py), each in a worker process with a time limit; pass rates on
the cases our torch.export traces, and the ops where one passes and the other does not.

    python bench/official_opinfo.py [--sample 0.3] [--jobs 2]      # writes bench/results/opinfo_vs_official.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

UNSCORED = ("skipped", "not-exported")


def main() -> int:
    from compare import ensure_official_venv

    from litert_torch.suites import opinfo, runner

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=float, default=1.0, help="fraction of the cases (seeded)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--official-venv", default=os.path.join(ROOT, "bench", ".venv-official"))
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "opinfo_vs_official.md"))
    args = parser.parse_args()

    python = ensure_official_venv(args.official_venv)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "expecttest"], check=True)  # OpInfo imports it
    cases = opinfo.cases()
    if args.sample < 1.0:
        cases = sorted(random.Random(0).sample(cases, max(1, round(len(cases) * args.sample))))
    sides = {}
    for side, command in (("ours", None), ("official", [python, os.path.join(ROOT, "bench", "official_opinfo_worker.py")])):
        start = time.monotonic()

        def progress(done, total, case, result, side=side, start=start):
            if done % 100 == 0 or done == total:
                print(f"{side}: {done}/{total} cases, {time.monotonic() - start:.0f} s", flush=True)

        sides[side] = runner.run_cases("opinfo", cases, jobs=args.jobs, timeout=args.timeout, progress=progress,
                                       command=command)
        sides[side + "_seconds"] = time.monotonic() - start
    text = render(cases, sides, args)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump({"cases": cases, "ours": sides["ours"], "official": sides["official"]}, f, indent=0, sort_keys=True)
    print(text)
    return 0


def render(cases, sides, args) -> str:
    import torch

    from litert_torch.suites.opinfo import op_of

    ours, official = sides["ours"], sides["official"]
    scored = [c for c in cases if ours.get(c, {}).get("status") not in UNSCORED]
    both = [c for c in scored if official.get(c, {}).get("status") not in UNSCORED]
    passes = {s: sum(d.get(c, {}).get("status") == "pass" for c in scored) for s, d in (("ours", ours),
                                                                                       ("official", official))}
    lines = [
        "# PyTorch OpInfo: ours and the official converter",
        "",
        f"`python bench/official_opinfo.py --sample {args.sample} --jobs {args.jobs}` on "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; torch {torch.__version__.split('+')[0]}; "
        f"{len(cases)} cases (every OpInfo with float32 on the CPU, its first two samples; seeded sample "
        f"{args.sample:g}), compared with eager PyTorch at rtol {1e-4:g} / atol {1e-5:g}, each case in a worker "
        "process. Scored: the cases our torch.export traces (skipped and not-exported ones left out, as in "
        "docs/COVERAGE.md).",
        "",
        "| | ours | official |",
        "|---|---|---|",
        f"| pass (of {len(scored)} scored) | {passes['ours']} ({passes['ours'] / max(len(scored), 1):.1%}) | "
        f"{passes['official']} ({passes['official'] / max(len(scored), 1):.1%}) |",
    ]
    for status in ("refused", "wrong", "runtime-error", "crash", "timeout", "error", "not-exported", "skipped"):
        counts = [sum(d.get(c, {}).get("status") == status for c in cases) for d in (ours, official)]
        if any(counts):
            lines.append(f"| {status} (of all {len(cases)}) | {counts[0]} | {counts[1]} |")
    lines.append(f"| time | {sides['ours_seconds']:.0f} s | {sides['official_seconds']:.0f} s |")
    only = {s: [c for c in scored if d.get(c, {}).get("status") == "pass" and e.get(c, {}).get("status") != "pass"]
            for s, d, e in (("ours", ours, official), ("official", official, ours))}
    lines += ["", f"Cases both could trace: {len(both)}. Passing here and not on the official converter: "
              f"{len(only['ours'])}; passing there and not here: {len(only['official'])}.", ""]
    if only["official"]:
        lines += ["Passing on the official converter and not here (our result):", ""]
        for c in only["official"]:
            r = ours.get(c, {})
            lines.append(f"- `{c}`: {r.get('status')}: {r.get('detail', '')[:160]}")
        lines.append("")
    wrong = Counter(op_of(c) for c in cases if official.get(c, {}).get("status") == "wrong")
    if wrong:
        lines += ["Wrong answers from the official converter, by op: " + ", ".join(
            f"{op} ({n})" for op, n in wrong.most_common()), ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
