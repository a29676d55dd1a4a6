"""The README's first command: the sample model converts with a passing numerics check."""

import os
import shutil
import subprocess
import sys

import litert_torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = shutil.which("litert-convert") or os.path.join(os.path.dirname(sys.executable), "litert-convert")


def test_readme_first_command(tmp_path):
    out = tmp_path / "tiny_cnn.tflite"
    proc = subprocess.run([SCRIPT, "convert", "samples/models/tiny_cnn.py:build", "-o", str(out), "--force",
                           "--validate"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "validation: PASS" in proc.stdout
    assert litert_torch.EdgeModel.load(out).signatures["serving_default"].inputs[0].shape == (1, 3, 64, 64)


def test_readme_names_the_command():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert "litert-convert convert samples/models/tiny_cnn.py:build -o tiny_cnn.tflite --force --validate" in readme
