"""The official litert-torch's own public-API tests, run unchanged against this package.

    python bench/official_api_tests.py                  # writes bench/results/official_api_tests.md
    python bench/official_api_tests.py --official       # also runs them on the official package, for the baseline

Downloads the official wheel (pip download, no install) into a scratch folder, takes its public-API test files
as they are, and runs them with pytest in this environment, where `import litert_torch` is this package (the
official one is never installed here: it shares the import name). With --official the same files also run in
bench/.venv-official, the official package's own environment (made by bench/compare.py), and the table shows
which tests pass on one and not the other. Prints passed / failed / skipped per file and the failures.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFICIAL_VERSION = "0.10.0"
# the public-API test files, by their path in the wheel under litert_torch/ (file names are unique)
WHEEL_TESTS = ["_convert/test/test_convert.py", "_convert/test/test_convert_multisig.py",
               "_convert/test/test_convert_composites.py", "_convert/test/test_to_channel_last_io.py",
               "_convert/test/test_compiled_model.py", "_convert/test/test_layout_amax.py",
               "debug/test/test_culprit.py", "debug/test/test_search_model.py"]
TEST_FILES = [os.path.basename(path) for path in WHEEL_TESTS]
OFFICIAL_PYTHON = os.path.join(ROOT, "bench", ".venv-official", "bin", "python")
RESULT = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)")
SKIPPED = re.compile(r"^SKIPPED \[(\d+)\] ([^:]+):(\d+)")


def fetch_tests(work: str) -> str:
    """The official wheel's test files, extracted into work/tests."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", work,
                    f"litert-torch=={OFFICIAL_VERSION}"], check=True)
    wheel = next(os.path.join(work, f) for f in os.listdir(work) if f.endswith(".whl"))
    out = os.path.join(work, "tests")
    os.makedirs(out)
    with zipfile.ZipFile(wheel) as z:
        for path in WHEEL_TESTS:
            with open(os.path.join(out, os.path.basename(path)), "wb") as f:
                f.write(z.read(f"litert_torch/{path}"))
    return out


def run(python: str, tests: str, cwd: str) -> dict[str, str]:
    """{test id: PASSED / FAILED / ERROR / SKIPPED} of one pytest run over the test files."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = cwd if cwd else ""
    proc = subprocess.run([python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts=",
                           *[os.path.join(tests, f) for f in TEST_FILES]],
                          cwd=tests, env=env, capture_output=True, text=True, timeout=3600)
    results: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = RESULT.match(line.strip())
        if m:
            results[os.path.basename(m.group(2))] = m.group(1)
        m = SKIPPED.match(line.strip())
        if m:  # skips are reported per source line, with a count
            for i in range(int(m.group(1))):
                results[f"{os.path.basename(m.group(2))}::line{m.group(3)}#{i}"] = "SKIPPED"
    if not results:
        raise RuntimeError(f"no results from pytest ({python}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return results


def by_file(results: dict[str, str]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {f: {"PASSED": 0, "FAILED": 0, "ERROR": 0, "SKIPPED": 0} for f in TEST_FILES}
    for test, status in results.items():
        name = test.split("::")[0]
        if name in table:
            table[name][status] += 1
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--official", action="store_true", help="also run the files on the official package")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "official_api_tests.md"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="official_tests_") as work:
        tests = fetch_tests(work)
        ours = run(sys.executable, tests, ROOT)
        official = None
        if args.official:
            if not os.path.exists(OFFICIAL_PYTHON):
                raise SystemExit(f"no {OFFICIAL_PYTHON}: run bench/compare.py once to make the official environment")
            if subprocess.run([OFFICIAL_PYTHON, "-c", "import pytest, absl, parameterized"], capture_output=True).returncode:
                subprocess.run([OFFICIAL_PYTHON, "-m", "pip", "install", "--quiet", "pytest", "absl-py", "parameterized"], check=True)
            official = run(OFFICIAL_PYTHON, tests, "")
    lines = ["# The official litert-torch's public-API tests on this package", "",
             f"`python bench/official_api_tests.py{' --official' if official else ''}` on "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: litert-torch=={OFFICIAL_VERSION}'s "
             f"{', '.join(TEST_FILES)}, unchanged.", "",
             "| file | passed | failed | errors | skipped |" + (" official passed | official skipped |" if official else ""),
             "|---|---|---|---|---|" + ("---|---|" if official else "")]
    ours_table = by_file(ours)
    official_table = by_file(official) if official else None
    for name in TEST_FILES:
        row = ours_table[name]
        line = f"| {name} | {row['PASSED']} | {row['FAILED']} | {row['ERROR']} | {row['SKIPPED']} |"
        if official_table:
            line += f" {official_table[name]['PASSED']} | {official_table[name]['SKIPPED']} |"
        lines.append(line)
    total = {k: sum(r[k] for r in ours_table.values()) for k in ("PASSED", "FAILED", "ERROR", "SKIPPED")}
    lines += ["", f"Here: {total['PASSED']} passed, {total['FAILED']} failed, {total['ERROR']} errors, "
              f"{total['SKIPPED']} skipped. On the official package without TensorFlow the use_v2 variants skip "
              "(`litert_torch.converter_v2.is_supported()` is False there); here one path serves both, so they "
              "run."]
    failures = sorted(t for t, s in ours.items() if s in ("FAILED", "ERROR"))
    if failures:
        lines += ["", "Failing here:", *[f"- {t}" for t in failures]]
    if official:
        only_official = sorted(t for t, s in official.items() if s == "PASSED" and ours.get(t) != "PASSED")
        only_ours = sorted(t for t, s in ours.items() if s == "PASSED" and official.get(t) != "PASSED")
        lines += ["", f"Passing on the official package and not here: {len(only_official)}",
                  *[f"- {t}" for t in only_official],
                  "", f"Passing here and not on the official package: {len(only_ours)}",
                  *[f"- {t}" for t in only_ours]]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 1 if failures or (official and only_official) else 0


if __name__ == "__main__":
    sys.exit(main())
