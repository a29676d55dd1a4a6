"""Quiet by default: what `convert`, `validate`, `export-hf` and an LLM load write to stderr is our own lines and
the runtimes' warnings, not their INFO logs (LiteRT's accelerator registry, XNNPACK's delegate line), nor
third-party progress bars and warnings (ai-edge-quantizer, transformers, LiteRT's preserve-all-tensors warning);
--verbose shows them."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_CNN = os.path.join(ROOT, "samples", "models", "tiny_cnn.py") + ":build"
NOISE = ("INFO:", "XNNPACK", "it/s]", "Warning:", "warnings.warn", "Loading weights")


def _run(*args, cwd=None):
    proc = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if line.strip()]


def _cli(*args):
    return _run("-m", "litert_convert", *args)


PROGRESS = re.compile(r"\[\s*\d+\.\d s\] ")  # our timed stage lines, on a stderr that is not a terminal


def _said(lines):
    """The lines besides our progress lines (a stage that takes a while on a busy machine gets one)."""
    return [line for line in lines if not PROGRESS.match(line)]


def _noise(lines):
    return [line for line in lines if any(mark in line for mark in NOISE)]


def test_convert_and_validate_say_only_what_they_did(tmp_path):
    np.savez(tmp_path / "calibration.npz", x=np.random.rand(8, 1, 3, 64, 64).astype(np.float32))
    model = tmp_path / "int8.tflite"
    lines = _said(_cli("convert", TINY_CNN, "-o", model, "--quantize", "int8", "--calibration",
                       tmp_path / "calibration.npz"))
    assert len(lines) == 1 and lines[0].startswith(f"wrote {model}"), lines
    model = tmp_path / "float.tflite"
    lines = _said(_cli("convert", TINY_CNN, "-o", model))
    assert len(lines) == 1 and lines[0].startswith(f"wrote {model}"), lines
    lines = _cli("validate", model, TINY_CNN, "--json")
    assert not _said(lines), lines

    verbose = _cli("convert", TINY_CNN, "-o", tmp_path / "again.tflite", "--quantize", "int8", "--calibration",
                   tmp_path / "calibration.npz", "--verbose")
    assert any("experimental_preserve_all_tensors" in line for line in verbose), verbose


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("litert_lm_builder")
    from litert_torch.generative import examples

    return examples.save_tiny_llama(str(tmp_path_factory.mktemp("llm") / "llama"))


def test_export_hf_and_an_llm_load_show_warnings_at_most(tmp_path, tiny_llama):
    bundle = tmp_path / "model.litertlm"
    lines = _cli("export-hf", tiny_llama, "-o", bundle, "--prefill", "8", "--cache", "64")
    assert not _noise(lines) and lines[-1].startswith(f"wrote {bundle}"), lines
    assert len(lines) <= 10, lines  # one timed line per stage

    load = ("from litert_torch import generative\n"
            f"llm = generative.load({str(bundle)!r})\n"
            "print(''.join(llm.generate('once upon a time', max_new_tokens=4)))\n")
    lines = _said(_run("-c", load, cwd=tmp_path))
    # LiteRT's warnings stay (no NPU here): each a WARNING line; the runner, on the CPU, tries no vendor's plugin
    assert all(line.startswith(("WARNING:", "ERROR:")) for line in lines), lines
    assert len(lines) <= 2 and not any("plugin" in line for line in lines), lines

    lines = _cli("validate", bundle, tiny_llama, "--tokens", "4")
    assert not _noise(lines) and not [line for line in _said(lines) if "WARNING" not in line], lines
    verbose = _cli("validate", bundle, tiny_llama, "--tokens", "4", "--verbose")
    assert sum(line.startswith("INFO:") for line in verbose) > 10, verbose
