"""The README's first command as a new user runs it: a fresh virtual environment, the project installed with the
CPU build of torch (PyTorch's CPU wheel index), the sample model converted and validated, in a venv under 2 GB.
It installs torch, so it runs with -m slow; `.ci/run` runs it after the default run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def readme_commands() -> list[str]:
    with open(os.path.join(ROOT, "README.md")) as f:
        section = f.read().split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_both_readme_commands_take_torch_from_the_cpu_index():
    commands = readme_commands()
    assert len(commands) == 2 and all(CPU_INDEX in c and "pip install -e " in c for c in commands), commands


def _size(folder: str) -> int:
    return sum(os.lstat(os.path.join(d, name)).st_size for d, _, names in os.walk(folder) for name in names)


@pytest.mark.slow
def test_the_first_command_installs_a_cpu_torch_in_under_2_gb(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(".git", ".venv", "node_modules", "__pycache__",
                                                              "*.egg-info", ".pytest_cache"))
    command = readme_commands()[0]
    done = subprocess.run(["bash", "-c", command], cwd=repo, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "validation: PASS" in done.stdout + done.stderr
    venv = repo / ".venv"
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.version.cuda)"],
                           capture_output=True, text=True, timeout=300)
    assert probe.stdout.strip() == "None", probe.stdout + probe.stderr  # a CPU-only build
    assert _size(str(venv)) < 2 * 2**30
