"""bench/vlm.py on the tiny Gemma 3 only, our exporter only: it converts in a fresh process, times both runtimes,
finds the greedy tokens equal to Hugging Face's and LiteRT-LM's replies (with the image, and to text alone) equal
to Hugging Face's text."""

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
                          "--repeats", "1", "--no-official"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    row = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("{")))
    assert row["size"] == "tiny" and row["hf_check"] == "equal" and row["official_export"] is None
    assert row["ours_export"]["seconds"] > 0 and row["ours_export"]["peak_rss_mb"] > 0
    engine = row["litert_lm"]["ours"]
    assert row["ours"]["encoder_ms"] > 0 and row["ours"]["decode_ms"] > 0 and engine["ttft_ms"] > 0
    assert engine["decode_ms"] > 0 and engine["text"] == row["hf_text"]
    assert engine["text_only"] == row["hf_text_only"]
    assert "| tiny | none / none |" in run.stdout and "| not run |" in run.stdout
