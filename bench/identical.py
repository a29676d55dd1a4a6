"""Byte-identical conversions across two revisions: the test suite runs at a base revision (in a temporary git
worktree) and at the working tree (or a second revision), each recording a digest of every model its tests write
(the pytest plugin `bench/fingerprints.py`, loaded from this checkout into both runs), and the digests are
compared test by test.

    python bench/identical.py --base HEAD~5                      # the default test run on both sides
    python bench/identical.py --base A --head B                  # two revisions, neither the working tree
    python bench/identical.py --base main -- tests/ops -m 'slow or not slow'

A model's digest covers the .tflite without our metadata entries (source map, delegate plan, I/O: their source
locations name the checkout); those entries get their own digest, read back with each path reduced to its file
name and each line number to N. Tests whose model counts differ between the two
sides (a test added or removed) are listed apart. Exit status 1 when any model of a test run on both sides
differs. The result goes to bench/results/identical.md unless --results says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_suite(checkout: Path, out: Path, pytest_args: list[str]) -> tuple[dict[tuple[str, int], dict], float, int]:
    """Run pytest in `checkout` with its own package first on the path; the digests by (test, n)."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LITERT_MODEL_DIGESTS=str(out),
               PYTHONPATH=os.pathsep.join([str(checkout), str(checkout / "cli"), str(ROOT / "bench"),
                                           os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fingerprints", *pytest_args],
                          cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.perf_counter() - start
    print(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)", f"[{checkout}]")
    digests: dict[tuple[str, int], dict] = {}
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            digests[(entry["test"], entry["n"])] = entry
    return digests, took, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the git revision to compare the working tree with")
    parser.add_argument("--head", help="a git revision to compare instead of the working tree")
    parser.add_argument("--results", default=str(ROOT / "bench" / "results" / "identical.md"))
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs on both sides")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="litert_identical_") as tmp:
        base, head = Path(tmp) / "base", Path(tmp) / "head" if args.head else ROOT
        for folder, revision in ((base, args.base), (head, args.head)):
            if revision:
                subprocess.run(["git", "worktree", "add", "--detach", "-q", str(folder), revision], cwd=ROOT,
                               check=True)
        try:
            rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True,
                                 capture_output=True, text=True).stdout.strip()
            before, t_before, rc_before = run_suite(base, Path(tmp) / "before", args.pytest_args)
            after, t_after, rc_after = run_suite(head, Path(tmp) / "after", args.pytest_args)
        finally:
            for folder, revision in ((base, args.base), (head, args.head)):
                if revision:
                    subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, check=False)

    tests_before = {t for t, _ in before}
    tests_after = {t for t, _ in after}
    common = tests_before & tests_after
    same_count = {t for t in common
                  if max(n for u, n in before if u == t) == max(n for u, n in after if u == t)}
    differ_model = sorted({t for (t, n), e in after.items() if t in same_count and before[(t, n)]["model"] != e["model"]})
    differ_map = sorted({t for (t, n), e in after.items()
                         if t in same_count and before[(t, n)]["metadata"] != e["metadata"]})
    compared = sum(1 for t, _ in after if t in same_count)
    lines = [
        "# Byte-identical conversions", "",
        f"`python bench/identical.py --base {args.base}{' --head ' + args.head if args.head else ''} "
        f"{' '.join(args.pytest_args)}`".replace("  ", " "), "",
        f"- base {rev}: {len(before)} models written by {len(tests_before)} tests ({t_before:.0f} s, pytest exit "
        f"{rc_before})",
        f"- {args.head or 'working tree'}: {len(after)} models written by {len(tests_after)} tests ({t_after:.0f} s, pytest exit "
        f"{rc_after})",
        f"- compared: {compared} models of {len(same_count)} tests on both sides with the same model count",
        f"- models that differ: {len(differ_model)} tests; metadata that differs: {len(differ_map)} tests",
        f"- tests on one side only or writing a different number of models: "
        f"{len((tests_before | tests_after) - same_count)}",
    ]
    for title, tests in (("Models that differ", differ_model), ("Metadata that differs", differ_map),
                         ("Not compared", sorted((tests_before | tests_after) - same_count))):
        if tests:
            lines += ["", f"## {title}", ""] + [f"- `{t}`" for t in tests[:200]]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.results).write_text(text)
    return 1 if differ_model else 0


if __name__ == "__main__":
    sys.exit(main())
