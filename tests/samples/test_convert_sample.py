"""The README's first command: the sample conversion runs, passes its numerics check and writes the file."""

import os
import subprocess
import sys

import litert_torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_convert_sample_script(tmp_path):
    out = tmp_path / "tiny.tflite"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "samples", "convert_sample.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "numerics: PASS" in proc.stdout
    assert litert_torch.EdgeModel.load(out).signatures["serving_default"].inputs[0].shape == (1, 3, 64, 64)
