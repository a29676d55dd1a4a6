"""Runs inside the official converter's own virtual environment (bench/.venv-official): one `export_hf` export,
reporting its time and the process's peak RSS as JSON on the last line of stdout.

    <official-venv>/bin/python bench/official_llm_worker.py MODEL_DIR OUT_DIR PREFILL CACHE RECIPE [OPTIONS_JSON]

OPTIONS_JSON: further keyword arguments of export_hf's export, as a JSON object.
"""

import json
import sys
import time
import types


def peak_rss() -> int:
    """VmHWM: the process's peak resident size since the reset at the start of main (a child's ru_maxrss starts
    from its parent's resident size at fork)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) * 1024


def main():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    src, out, prefill, cache, recipe = sys.argv[1:6]
    options = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    start = time.perf_counter()  # imports included, as on our side
    # The official package (0.10.0) imports TensorFlow's copy of the TFLite schema bindings from one model
    # extension when export_hf loads; the same bindings ship with ai_edge_litert, which this environment has.
    # torch and transformers look for TensorFlow while importing: they are imported before the stand-in exists.
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

    from litert_torch.generative.export_hf import export  # the official converter, in its own environment

    export.export(model=src, output_dir=out, prefill_lengths=[int(prefill)], cache_length=int(cache),
                  quantization_recipe=recipe, **options)  # "none" is float there too (None: its int8 default)
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss": peak_rss()}))


if __name__ == "__main__":
    main()
