"""One `export_hf` export in a fresh process, by this project (`export_ours`) or by the official converter in its
own environment (`export_official`, through official_export_worker.py): the wall time (imports included) and the
process's peak RSS, or, for the official one, how it failed. Shared by the task benchmarks (asr.py, vlm.py).

    python bench/task_export.py KWARGS_JSON     # the fresh process of export_ours
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFICIAL_VENV = os.path.join(ROOT, "bench", ".venv-official")


def official_python(venv: str = OFFICIAL_VENV) -> str:
    """The official converter's interpreter in `venv`, installed there on first use."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from compare import ensure_official_venv

    return ensure_official_venv(venv)


def export_ours(**kwargs: object) -> dict:
    """Our `export(**kwargs)` in a fresh process: {"path", "seconds", "peak_rss_mb"}."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "cli"), *sys.path])}
    run = subprocess.run([sys.executable, os.path.abspath(__file__), json.dumps(kwargs)], capture_output=True,
                         text=True, env=env)
    if run.returncode:
        raise RuntimeError(f"our export of {kwargs.get('model')} failed:\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def export_official(python: str, **kwargs: object) -> dict:
    """The official `export(**kwargs)` in a fresh process of its environment: {"path" (the .litertlm it wrote, or
    else its .tflite), "seconds", "peak_rss_mb"}, or {"error", "message", "raised_at", "official_frame",
    "seconds", "peak_rss_mb"} when it raised."""
    worker = os.path.join(ROOT, "bench", "official_export_worker.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # `litert_torch` is the official one there
    run = subprocess.run([python, worker, json.dumps(kwargs)], capture_output=True, text=True, env=env,
                         cwd=tempfile.gettempdir())
    lines = run.stdout.strip().splitlines()
    if run.returncode or not lines:
        tail = [line for line in run.stderr.strip().splitlines() if line.strip()]
        return {"error": f"exit {run.returncode}", "message": tail[-1][:200] if tail else "", "raised_at": "?",
                "official_frame": "?"}
    result = json.loads(lines[-1])
    result["peak_rss_mb"] = result.pop("peak_rss") / 2**20
    if "error" not in result:
        found = _written(str(kwargs["output_dir"]))
        if found is None:
            return {**result, "error": "no file", "message": "it returned without writing a .litertlm or .tflite",
                    "raised_at": "-", "official_frame": "-"}
        result["path"] = found
    return result


def _written(directory: str) -> str | None:
    """The .litertlm under `directory`, or else its largest .tflite."""
    files = [os.path.join(d, f) for d, _, names in os.walk(directory) for f in names]
    for ext in (".litertlm", ".tflite"):
        hits = sorted((f for f in files if f.endswith(ext)), key=os.path.getsize)
        if hits:
            return hits[-1]
    return None


def failure_line(result: dict) -> str:
    """How an export failed, in one line: the exception, where it was raised, its message."""
    where = result["raised_at"]
    if result["official_frame"] not in (where, "?", "-"):
        where += f" (from {result['official_frame']})"
    return f"{result['error']} at {where}: {result['message']}"


def _child() -> None:
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from process_memory import peak_rss, reset_peak_rss

    reset_peak_rss()
    kwargs = json.loads(sys.argv[1])
    start = time.perf_counter()  # imports included, as on the official side
    from litert_torch.generative.export_hf import export

    path = export.export(**kwargs)
    print(json.dumps({"path": path, "seconds": time.perf_counter() - start, "peak_rss_mb": peak_rss() / 2**20}))


if __name__ == "__main__":
    _child()
