"""Every Python code block in README.md and docs/*.md runs as written: the blocks of one file run in order, in one
fresh process, in an empty folder (they may use what an earlier block of the same file defined). Blocks that
export a Hugging Face LLM run with -m slow."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
SLOW_MARKERS = ("export.export(model=", "litert_lm.Engine(")


def blocks(path: str) -> list[str]:
    with open(os.path.join(ROOT, path)) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def _run(path: str, code: str, tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{path}: a code block fails:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("path", [p for p in DOCS if any(not any(m in b for m in SLOW_MARKERS) for b in blocks(p))])
def test_the_code_blocks_of_a_document_run(path, tmp_path):
    fast = [b for b in blocks(path) if not any(m in b for m in SLOW_MARKERS)]
    _run(path, "\n".join(fast), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in DOCS if any(any(m in b for m in SLOW_MARKERS) for b in blocks(p))])
def test_the_llm_code_blocks_of_a_document_run(path, tmp_path):
    _run(path, "\n".join(blocks(path)), tmp_path)
