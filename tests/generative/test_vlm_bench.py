"""bench/vlm.py on the tiny Gemma 3 only: it converts in a fresh process, times both runtimes and finds the
greedy tokens equal to Hugging Face's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # three fresh processes that import PyTorch, a conversion and two runtimes: ~40 s
def test_bench_vlm_tiny():
    pytest.importorskip("litert_lm")
    pytest.importorskip("torchvision")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *sys.path])}
    run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "vlm.py"), "--sizes", "tiny", "--tokens", "4",
                          "--repeats", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    row = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("{")))
    assert row["size"] == "tiny" and row["hf_check"] == "equal"
    assert row["convert"]["seconds"] > 0 and row["convert"]["peak_rss_mb"] > 0
    assert row["ours"]["encoder_ms"] > 0 and row["ours"]["decode_ms"] > 0 and row["litert_lm"]["ttft_ms"] > 0
    assert "| tiny | none / none |" in run.stdout
