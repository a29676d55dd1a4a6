"""Every Python code block in README.md and docs/*.md runs as written: the blocks of one file run in order, in one
fresh process, in an empty folder outside the repository where only the project's own packages can be imported
(they may use what an earlier block of the same file defined). Blocks that export a Hugging Face LLM run with
-m slow."""

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


def _run(code: str, tmp_path) -> subprocess.CompletedProcess:
    """Run `code` in an empty folder outside the repository, where our two import packages (this checkout's) are
    importable as an installed project makes them, and nothing else of the repository is (not `tests`)."""
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    (site / "litert_torch").symlink_to(os.path.join(ROOT, "litert_torch"))
    (site / "litert_convert").symlink_to(os.path.join(ROOT, "cli", "litert_convert"))
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)


def _check(path: str, code: str, tmp_path) -> None:
    done = _run(code, tmp_path)
    assert done.returncode == 0, f"{path}: a code block fails:\n{done.stderr[-3000:]}"


def test_the_blocks_see_the_project_but_not_the_repositorys_tests(tmp_path):
    done = _run("import litert_torch.generative.examples, litert_convert.main\nimport tests.generative", tmp_path)
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'tests'" in done.stderr, done.stderr


@pytest.mark.parametrize("path", [p for p in DOCS if any(not any(m in b for m in SLOW_MARKERS) for b in blocks(p))])
def test_the_code_blocks_of_a_document_run(path, tmp_path):
    fast = [b for b in blocks(path) if not any(m in b for m in SLOW_MARKERS)]
    _check(path, "\n".join(fast), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in DOCS if any(any(m in b for m in SLOW_MARKERS) for b in blocks(p))])
def test_the_llm_code_blocks_of_a_document_run(path, tmp_path):
    _check(path, "\n".join(blocks(path)), tmp_path)
