"""Runs inside the official converter's own virtual environment (bench/.venv-official): one `export_hf` export
with the keyword arguments given as JSON, reporting on the last line of stdout, as JSON, its time and the
process's peak RSS, or, when the export raises, the exception's type, message and where it was raised (the
innermost frame, and the innermost frame inside the official package).

    <official-venv>/bin/python bench/official_export_worker.py KWARGS_JSON

KWARGS_JSON: export_hf's export keywords, e.g. {"model": DIR, "output_dir": OUT, "task": "image_text_to_text"}.
Run it from a directory outside this checkout, so that `litert_torch` is the official package.
"""

import json
import os
import sys
import time
import traceback
import types

from process_memory import peak_rss, reset_peak_rss  # bench/, this script's directory


def official_export():
    """The official `export_hf.export` module. The official package (0.10.0) imports TensorFlow's copy of the
    TFLite schema bindings from one model extension when export_hf loads; the same bindings ship with
    ai_edge_litert, which this environment has. torch and transformers look for TensorFlow while importing: they
    are imported before the stand-in exists."""
    import importlib.machinery

    import torch._dynamo  # noqa: F401
    import transformers  # noqa: F401
    from ai_edge_litert import schema_py_generated

    for name in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python"):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
        module.__path__ = []
        sys.modules.setdefault(name, module)
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema_py_generated

    import litert_torch

    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.dirname(os.path.abspath(litert_torch.__file__)) == os.path.join(checkout, "litert_torch"):
        sys.exit(f"imported this checkout's litert_torch ({litert_torch.__file__}), not the official package: run "
                 "this worker without the checkout on PYTHONPATH, from another directory")
    from litert_torch.generative.export_hf import export  # the official converter, in its own environment

    return export


def where(exc: BaseException) -> dict:
    """The innermost frame of `exc`'s traceback, and the innermost one in the official package's files."""
    frames = traceback.extract_tb(exc.__traceback__)
    package = os.sep + "litert_torch" + os.sep

    def name(frame) -> str:
        path = frame.filename
        short = path[path.rindex(package) + 1:] if package in path else os.path.basename(path)
        return f"{short}:{frame.lineno} in {frame.name}"

    inside = [f for f in frames if package in f.filename]
    return {"raised_at": name(frames[-1]) if frames else "?", "official_frame": name(inside[-1]) if inside else "?"}


def main():
    reset_peak_rss()
    kwargs = json.loads(sys.argv[1])
    start = time.perf_counter()  # imports included, as on our side
    try:
        export = official_export()
        export.export(**kwargs)
    except Exception as exc:  # reported, as the benchmark's finding for this model
        print(traceback.format_exc(), file=sys.stderr)
        message = str(exc).strip().splitlines()
        print(json.dumps({"error": type(exc).__name__, "message": message[0][:200] if message else "", **where(exc),
                          "seconds": time.perf_counter() - start, "peak_rss": peak_rss()}))
        return
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss": peak_rss()}))


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
