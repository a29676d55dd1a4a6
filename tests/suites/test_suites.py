"""The suite runner survives crashes and hangs, and a sample of both external suites (PyTorch's OpInfo and
ONNX's node tests) gives no wrong answer, crash or untyped error."""

from __future__ import annotations

import random

import pytest

from litert_torch.suites import runner

BAD = ("wrong", "crash", "error", "timeout")


def test_a_crash_or_a_hang_costs_one_case():
    results = runner.run_cases("tests.suites.fake_suite", ["ok", "abort", "hang", "raise", "ok_after"], jobs=1,
                               timeout=30)
    assert results["ok"]["status"] == "pass" and results["ok_after"]["status"] == "pass", results
    assert results["abort"] == {"status": "crash", "detail": "the process died (SIGABRT)"}, results
    assert results["hang"]["status"] == "timeout", results
    assert results["raise"]["status"] == "error" and "boom" in results["raise"]["detail"], results


def _sample(module, n: int) -> list[str]:
    return sorted(random.Random(7).sample(module.cases(), n))


@pytest.mark.parametrize("suite,count", [("opinfo", 60), ("onnx-node", 80)])
def test_a_sample_of_the_suite_has_no_wrong_answer_or_crash(suite, count):
    pytest.importorskip("expecttest" if suite == "opinfo" else "onnx")
    module = runner.suite_module(suite)
    results = runner.run_cases(suite, _sample(module, count), jobs=2, timeout=120)
    bad = {case: r for case, r in results.items() if r["status"] in BAD}
    assert not bad, bad
    assert sum(r["status"] == "pass" for r in results.values()) >= count // 10  # the harness really ran cases
