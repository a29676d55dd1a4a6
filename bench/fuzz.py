"""Mutated .tflite files through EdgeModel + a call, in worker processes: how many run, how many are refused with
a typed error, and any that crash the process or fail untyped (the target is none).

    python bench/fuzz.py                  # 20,000 files over the seed models of litert_torch/suites/fuzz.py
    python bench/fuzz.py --limit 100000 --jobs 2 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from litert_torch.suites import fuzz, runner  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=20000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="another seed gives other mutations")
    args = parser.parse_args(argv)
    start = time.perf_counter()

    def progress(done: int, total: int, case: str, result: dict) -> None:
        if done % 1000 == 0 or done == total:
            print(f"{done}/{total} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

    results = runner.run_cases("fuzz", fuzz.cases(args.limit, args.seed), jobs=args.jobs, timeout=120,
                               progress=progress)
    counts = collections.Counter(r["status"] for r in results.values())
    print(f"{len(results)} mutated files ({', '.join(fuzz.SEEDS)}), {time.perf_counter() - start:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    bad = {case: r for case, r in results.items() if r["status"] not in ("ok", "refused")}
    for case, r in sorted(bad.items()):
        print(f"  {case}: {r['status']}: {r.get('detail', '')}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
