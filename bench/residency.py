"""Delegate residency of every zoo model: share of ops and MACs each target takes, partitions, and why the
rest stays on the CPU. Prints a markdown table (used in docs/DELEGATES.md).

    python bench/residency.py [--models resnet18 bert ...]
"""

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import litert_torch  # noqa: E402
from tests.models import zoo  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[c.name for c in zoo.MODELS])
    args = parser.parse_args()
    cases = {c.name: c for c in zoo.MODELS}
    print("| model | target | ops on delegate | MACs on delegate | partitions | stays on CPU | "
          "before delegate-aware lowering |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        case = cases[name]
        torch.manual_seed(0)
        edge = litert_torch.convert(zoo.build(case), case.inputs(1))
        for target, plan in edge.delegate_plan.targets.items():
            reasons: dict[str, int] = {}
            for f in plan.fallbacks:
                key = f"{f.opcode}: {f.reason}"
                reasons[key] = reasons.get(key, 0) + 1
            why = "; ".join(f"{k} (x{n})" if n > 1 else k for k, n in reasons.items()) or "–"
            before = "–"
            if plan.before is not None:
                b = plan.before
                rewrites = ", ".join(f"{k} x{n}" for k, n in plan.rewrites.items())
                before = (f"{b['delegated_ops']}/{b['ops']} ops, {b['delegated_macs'] / max(b['macs'], 1):.1%} "
                          f"of MACs, {b['partition_count']} partitions ({rewrites})")
            print(f"| {name} | {target} | {plan.delegated_ops}/{plan.ops} ({plan.op_share:.0%}) "
                  f"| {plan.mac_share:.1%} | {len(plan.partitions)} | {why} | {before} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
